"""SANDBOX.RESTRICTED: a command that failed where the sandbox held it back, said so, with the escalation a new
request may ask for (``retry_of`` the failed execution): through policy and approval like any other request,
never applied by itself.

What is told apart, and how sure it is:
* ``egress``: the proxy refused a host that is not on the run's allowlist (the proxy's own record: certain).
  Refusals no approval could lift (a denied address, a name that does not resolve) are not offered.
* ``read_only_root``: the command's stderr says "Read-only file system" while its root was read-only. That
  is the command's own output (hostile input): a hint only, marked ``source: output``; a false one merely
  offers an escalation that is still asked about.
A seccomp denial is not among them: neither engine reports one (a refused call is an EPERM to the process).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from orchestrator.domain.errors import SandboxRestricted
from orchestrator.egress import EgressRoute
from orchestrator.egress.runs import denied_hosts
from orchestrator.pipeline.executor import RunOutcome
from orchestrator.profiles import ResolvedProfile
from orchestrator.results.redact import MARKER_PREFIX

_READ_ONLY = b"Read-only file system"
REDACTED = MARKER_PREFIX.decode()


def restriction(
    outcome: RunOutcome,
    profile: ResolvedProfile,
    route: EgressRoute | None,
    execution_id: str,
    redact: Callable[[str], str],
) -> SandboxRestricted | None:
    """SANDBOX.RESTRICTED when the command failed (a non-zero exit) and the sandbox had refused it something an
    escalation could give; None otherwise (a command that succeeded despite a refusal is not restricted)."""
    if outcome.exit_code in (0, None):
        return None
    denied: list[dict[str, Any]] = []
    escalation: dict[str, Any] = {}
    hosts = denied_hosts(route, redact) if route is not None else []
    denied.extend({"kind": "egress", "host": host, "source": "proxy"} for host in hosts)
    # a name that held a secret is said redacted, and never offered as an escalation
    offered = [host for host in hosts if REDACTED not in host]
    if offered:
        escalation["network"] = offered
    if profile.read_only_root and _READ_ONLY in outcome.stderr:
        denied.append({"kind": "read_only_root", "source": "output"})
        escalation["writable_root"] = True
    if not denied:
        return None
    what = ", ".join(d["host"] if d["kind"] == "egress" else "a write to the read-only root" for d in denied)
    return SandboxRestricted(
        f"the command exited {outcome.exit_code} after the sandbox refused {what}; a new request with retry_of "
        "and this escalation is asked about like any other",
        details={"denied": denied, "escalation": {"sandbox_permissions": escalation}, "retry_of": execution_id},
    )


KEPT_RESTRICTED = 4096  # restricted runs remembered for retry_of links (older ones are linked as unknown)


class RestrictedRuns:
    """Recent SANDBOX.RESTRICTED runs of this process (execution id -> tenant, what was denied): what a
    ``retry_of`` links to. The runner adds them; the authorizer reads them."""

    def __init__(self, kept: int = KEPT_RESTRICTED) -> None:
        self._kept = kept
        self._runs: OrderedDict[str, tuple[str, list[dict[str, Any]]]] = OrderedDict()

    def add(self, execution_id: str, tenant: str, error: SandboxRestricted) -> None:
        self._runs[execution_id] = (tenant, error.details["denied"])
        while len(self._runs) > self._kept:
            self._runs.popitem(last=False)

    def link(self, retry_of: str, tenant: str) -> dict[str, Any]:
        """What the evidence says of the execution a request retries: what the sandbox refused it, when that
        run was this process's and the same tenant's (else ``known`` false: the link is kept as asked)."""
        restricted = self._runs.get(retry_of)
        if restricted is None or restricted[0] != tenant:
            return {"execution_id": retry_of, "known": False}
        return {"execution_id": retry_of, "known": True, "denied": restricted[1]}
