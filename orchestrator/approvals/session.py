"""What a session has already been granted: approval keys (approved_for_session) and exec sessions."""

from __future__ import annotations

from collections import OrderedDict


class SessionGrants:
    """In-memory, bounded (oldest sessions forgotten first: forgetting only means asking again)."""

    def __init__(self, max_sessions: int = 10_000) -> None:
        self._keys: OrderedDict[str, set[str]] = OrderedDict()
        self._exec_sessions: OrderedDict[str, str] = OrderedDict()
        self._max = max_sessions

    def _touch(self, table: OrderedDict[str, object], session: str) -> None:
        table.move_to_end(session)
        while len(table) > self._max:
            table.popitem(last=False)

    def grant_key(self, session: str, key: str) -> None:
        self._keys.setdefault(session, set()).add(key)
        self._touch(self._keys, session)  # type: ignore[arg-type]

    def has_key(self, session: str | None, key: str) -> bool:
        return session is not None and key in self._keys.get(session, ())

    def approve_exec_session(self, exec_session: str, execution_id: str) -> None:
        """An approved exec_command opened ``exec_session``: write_stdin to it needs no new ask."""
        self._exec_sessions[exec_session] = execution_id
        self._touch(self._exec_sessions, exec_session)  # type: ignore[arg-type]

    def exec_session_origin(self, exec_session: str) -> str | None:
        return self._exec_sessions.get(exec_session)

    def end_session(self, session: str) -> None:
        self._keys.pop(session, None)
        self._exec_sessions.pop(session, None)
