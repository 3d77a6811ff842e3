"""What has already been granted: approval keys (approved_for_session) and exec sessions.

Grants are scoped to (tenant, subject, session): a session id is chosen by the client, so another
tenant reusing the same id must not inherit anything. A key grant also names the policy version it
was given under: when the policy changes, earlier grants stop counting and the ask comes again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


def egress_approval_key(pattern: str) -> str:
    """The session approval of one egress host:port pattern (canonical), kept beside approval keys: an
    approved_for_session answer approves the hosts it was asked about for the rest of that session."""
    return f"egress:{pattern}"


@dataclass(frozen=True, slots=True)
class Scope:
    tenant: str
    subject: str
    session: str


@dataclass(frozen=True, slots=True)
class ExecSessionOrigin:
    execution_id: str
    tenant: str
    subject: str


class SessionApprovals:
    """In-memory and bounded (least recently used first out: forgetting only means asking again)."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self._keys: OrderedDict[tuple[Scope, str], str] = OrderedDict()  # (scope, key) -> policy hash
        self._exec: OrderedDict[str, ExecSessionOrigin] = OrderedDict()
        self._max = max_entries

    def approve_key(self, scope: Scope, key: str, policy_version_hash: str) -> None:
        self._keys[(scope, key)] = policy_version_hash
        self._keys.move_to_end((scope, key))
        while len(self._keys) > self._max:
            self._keys.popitem(last=False)

    def has_key(self, scope: Scope | None, key: str, policy_version_hash: str) -> bool:
        return scope is not None and self._keys.get((scope, key)) == policy_version_hash

    def approve_exec_session(self, exec_session: str, origin: ExecSessionOrigin) -> None:
        """An authorized exec_command opened ``exec_session``: its owner's write_stdin needs no new ask."""
        self._exec[exec_session] = origin
        self._exec.move_to_end(exec_session)
        while len(self._exec) > self._max:
            self._exec.popitem(last=False)

    def exec_session_origin(self, exec_session: str) -> ExecSessionOrigin | None:
        return self._exec.get(exec_session)

    def end_exec_session(self, exec_session: str) -> None:
        self._exec.pop(exec_session, None)

    def end_session(self, scope: Scope) -> None:
        """Forget every key approved in ``scope``: its session is over (a CI job's, at its open and its close)."""
        for entry in [e for e in self._keys if e[0] == scope]:
            del self._keys[entry]
