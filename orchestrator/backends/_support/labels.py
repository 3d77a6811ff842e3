"""What marks a sandbox as ours, in one place: its labels and its name (testcontainers' ``core/labels.py``).

Every sandbox carries the same label set whatever the backend, built here from its launch spec's facts
(``sandbox_labels``): the engine's filters, the orphan collector and the evidence read them back. A backend
may only write them in a form its engine takes (Kubernetes: label-safe values), never another set.
"""

from __future__ import annotations

from typing import Final

MANAGED_BY: Final = "sandbox-orchestrator"
LABEL_MANAGED_BY: Final = "org.sandbox-orchestrator.managed-by"
LABEL_EXECUTION_ID: Final = "org.sandbox-orchestrator.execution-id"
#: "<hostname>:<pid>:<process start time>" of the controller (or its SANDBOX_CONTROLLER_ID)
LABEL_OWNER: Final = "org.sandbox-orchestrator.owner"
#: unix seconds after which the sandbox is an orphan
LABEL_DEADLINE: Final = "org.sandbox-orchestrator.deadline"
LABEL_PROFILE_HASH: Final = "org.sandbox-orchestrator.profile-hash"

#: every sandbox's name (a container's, a pod's) starts so; the rest is its execution id
NAME_PREFIX: Final = "sbx-"


def sandbox_labels(execution_id: str, *, owner: str, deadline_unix: float, profile_hash: str) -> dict[str, str]:
    """The labels of the sandbox of ``execution_id`` (a pre-started one's: its pool id); without an owner,
    no owner label (the orphan collector then goes by the deadline, or removes it: "no owner label")."""
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_EXECUTION_ID: execution_id,
        **({LABEL_OWNER: owner} if owner else {}),
        LABEL_DEADLINE: f"{deadline_unix:.0f}",
        LABEL_PROFILE_HASH: profile_hash,
    }


def sandbox_name(execution_id: str) -> str:
    """The name of the sandbox of ``execution_id``: never reused, as execution ids are not."""
    return f"{NAME_PREFIX}{execution_id}"
