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
