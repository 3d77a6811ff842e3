"""Auto-approve: the asks of trusted tenants (a CI system that must never wait for a human), or of some
tools, answered "approved" without anyone — on the record as the approver ``auto`` with the rule that
applied. Only asks: what the policy denies stays denied, and so does what an approval rule refuses (it is
consulted first). An escalation is approved only where the entry names it: the hosts it may reach
(``network``), a writable root (``writable_root``).

    approvals:
      auto_approve:
        default: none                        # for tenants not listed: all | none | {tools, network, ...}
        tenants:
          ci: all                            # every ask of tenant ci that asks no escalation
          builds: {tools: [shell_exec], network: ["*.pythonhosted.org:443", "pypi.org:443"]}
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.approvals.rules import names_escalations
from orchestrator.domain.decisions import ApprovalOutcome, ApprovalRequest, ApprovalResult
from orchestrator.domain.requests import ALL_TOOLS
from orchestrator.gate.config import EgressPatternText
from orchestrator.gate.matching import TOOL_GROUPS, expand_tools

APPROVER = "auto"


class Entry(BaseModel):
    """What of a tenant's asks is approved without anyone."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    tools: list[str] | Literal["all"] = Field(
        default="all", description="Tool names or groups (exec, files, stdin), or all."
    )
    network: list[EgressPatternText] = Field(
        default_factory=list, description="Hosts an ask may reach and still be approved (an ask about others asks)."
    )
    writable_root: bool = Field(default=False, description="Whether an ask for a writable root is approved too.")

    @field_validator("tools")
    @classmethod
    def _known(cls, tools: list[str] | str) -> list[str] | str:
        if isinstance(tools, str):
            return tools
        if not tools:
            raise ValueError("name at least one tool, or all")
        for name in tools:
            if name not in ALL_TOOLS and name not in TOOL_GROUPS:
                raise ValueError(f"unknown tool {name!r} (known: {', '.join([*ALL_TOOLS, *TOOL_GROUPS])})")
        return tools

    def approves(self, request: ApprovalRequest) -> bool:
        tool = request.sanitized.tool
        if self.tools != "all" and tool not in expand_tools(self.tools):
            return False
        return names_escalations(request, self.network, self.writable_root)

    def describe(self) -> str:
        parts = ["all" if self.tools == "all" else f"tools {', '.join(self.tools)}"]
        if self.network:
            parts.append(f"network {', '.join(self.network)}")
        if self.writable_root:
            parts.append("writable root")
        return "; ".join(parts)


Mode = Literal["all", "none"] | Entry
TenantName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
_ALL = Entry()


class AutoApprove(BaseModel):
    """Which asks are approved without anyone, per tenant (``tenants``) or for every other one (``default``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    default: Mode = Field(default="none", description="For tenants not listed: all | none | {tools, network, ...}.")
    tenants: dict[TenantName, Mode] = Field(
        default_factory=dict, description="Per tenant: all | none | {tools, network, writable_root}."
    )

    def decide(self, request: ApprovalRequest) -> ApprovalResult | None:
        """The auto approval of ``request``, or None (someone must answer)."""
        tenant = request.sanitized.context.tenant
        listed = tenant in self.tenants
        mode = self.tenants[tenant] if listed else self.default
        if mode == "none":
            return None
        entry = mode if isinstance(mode, Entry) else _ALL
        if not entry.approves(request):
            return None
        rule = f"tenant {tenant}" if listed else "default"
        return ApprovalResult(
            outcome=ApprovalOutcome.APPROVED, approver=APPROVER, reason=f"auto_approve {rule}: {entry.describe()}"
        )
