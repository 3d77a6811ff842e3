"""Auto-approve: the asks of trusted tenants (a CI system that must never wait for a human), or of some
tools, answered "approved" without anyone — on the record as the approver ``auto`` with the rule that
applied. Only asks: what the policy denies stays denied, and nothing here widens a sandbox.

    approvals:
      auto_approve:
        default: none                        # for tenants not listed: all | none | {tools: [...]}
        tenants:
          ci: all                            # every ask of tenant ci
          builds: {tools: [shell_exec]}      # only these tools' (names or groups: exec, files, stdin)
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.domain.decisions import ApprovalOutcome, ApprovalResult
from orchestrator.domain.requests import ALL_TOOLS
from orchestrator.gate.matching import TOOL_GROUPS, expand_tools

APPROVER = "auto"


class ToolList(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    tools: list[str] = Field(min_length=1, description="Tool names or groups (exec, files, stdin) approved.")

    @field_validator("tools")
    @classmethod
    def _known(cls, tools: list[str]) -> list[str]:
        for name in tools:
            if name not in ALL_TOOLS and name not in TOOL_GROUPS:
                raise ValueError(f"unknown tool {name!r} (known: {', '.join([*ALL_TOOLS, *TOOL_GROUPS])})")
        return tools


Mode = Literal["all", "none"] | ToolList
TenantName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]


class AutoApprove(BaseModel):
    """Which asks are approved without anyone, per tenant (``tenants``) or for every other one (``default``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    default: Mode = Field(default="none", description="For tenants not listed: all | none | {tools: [...]}.")
    tenants: dict[TenantName, Mode] = Field(default_factory=dict, description="Per tenant: all | none | {tools}.")

    def decide(self, tenant: str, tool: str) -> ApprovalResult | None:
        """The auto approval of an ask of ``tenant``'s ``tool``, or None (someone must answer)."""
        listed = tenant in self.tenants
        mode = self.tenants[tenant] if listed else self.default
        rule = f"tenant {tenant}" if listed else "default"
        if mode == "none":
            return None
        if isinstance(mode, ToolList):
            if tool not in expand_tools(mode.tools):
                return None
            applied = f"auto_approve {rule}: tools {', '.join(mode.tools)}"
        else:
            applied = f"auto_approve {rule}: all"
        return ApprovalResult(outcome=ApprovalOutcome.APPROVED, approver=APPROVER, reason=applied)
