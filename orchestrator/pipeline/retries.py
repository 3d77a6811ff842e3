"""What a ``retry_of`` links to: the recent SANDBOX.RESTRICTED runs of this orchestrator and what each was
refused (pipeline.restrictions says which runs are restricted)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from orchestrator.domain.errors import SandboxRestricted

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
