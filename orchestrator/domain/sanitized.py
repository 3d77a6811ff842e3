"""The smallest auditable form of a request: what evidence, logs, prompts and errors may see.

No field here may carry a secret value: env is reduced to keys, content to size + sha256.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchestrator.domain.ci import CiRecord
from orchestrator.domain.mcp import McpContext

RiskLevelName = Literal["low", "medium", "high", "critical"]


class RiskLevel(IntEnum):
    LOW = 0
    MEDIUM = 1
    HIGH = 2
    CRITICAL = 3

    @property
    def label(self) -> RiskLevelName:
        return self.name.lower()  # type: ignore[return-value]

    @classmethod
    def parse(cls, name: str) -> RiskLevel:
        return cls[name.upper()]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class Intent(_Frozen):
    """What a command means, for gating and audit only: what runs is exactly what was asked."""

    argv: list[str] | None = Field(description="The single command's argv when it is simple; else the first one.")
    is_complex: bool = Field(description="True for pipes, chains, substitutions, wrappers, parse failures.")
    reason: str = Field(description="Why it is complex, or 'simple command'.")
    unseen: list[str] = Field(
        default_factory=list,
        description="What the gate could not see of what would run (a request with any is never allowed"
        " without approval).",
    )


class Risk(_Frozen):
    risk_level: RiskLevelName = Field(description="low | medium | high | critical")
    reason: str = Field(description="The findings that set the level, joined by '; '.")


class ContentDigest(_Frozen):
    bytes: int = Field(ge=0, description="Size of the UTF-8 content in bytes.")
    sha256: str = Field(description="sha256 of the UTF-8 content, hex.")


class ScriptDigest(_Frozen):
    """A script file a command runs (ShellExecRequest.script): where, and its size and digest, never its
    content. The runner wrote a workflow's interpolated secrets into it, in a text its readers can otherwise
    guess (the workflow file is in the repository): a plain sha256 would let them try secrets until one
    matches. So where there is evidence the digest is keyed as a session's input is (evidence.input_key);
    a plain sha256 only where there is no key (``sandboxctl check``, a gate with no evidence)."""

    path: str = Field(description="The script's path as the argv names it.")
    bytes: int = Field(ge=0, description="Size of the script in bytes.")
    sha256: str | None = Field(default=None, description="sha256 of the script's bytes, hex (no key: no evidence).")
    hmac_sha256: str | None = Field(
        default=None, description="HMAC-SHA256 of the script's bytes under the evidence's input key, hex."
    )

    @model_validator(mode="after")
    def _one_digest(self) -> ScriptDigest:
        if (self.sha256 is None) == (self.hmac_sha256 is None):
            raise ValueError("a script digest is either sha256 or hmac_sha256")
        return self

    def shown(self) -> str:
        """The digest as people read it: its kind and its first 16 hex digits."""
        return f"hmac-sha256 {self.hmac_sha256[:16]}…" if self.hmac_sha256 else f"sha256 {(self.sha256 or '')[:16]}…"


class KeyedDigest(_Frozen):
    """What was typed into a session: a plain sha256 of a keystroke or a short password would be as good as
    its content to the evidence's readers, so it is keyed (evidence.input_key)."""

    bytes: int = Field(ge=0, description="Size of the UTF-8 content in bytes.")
    hmac_sha256: str = Field(description="HMAC-SHA256 of the UTF-8 content under the evidence's input key, hex.")


class SanitizedPermissions(_Frozen):
    network: bool | list[str] = Field(default=False, description="true: unrestricted; a list: host:port patterns.")
    writable_root: bool = False
    extra_mounts: list[str] = Field(default_factory=list, description="source->target:ro|rw")


class RequestContext(_Frozen):
    """Who asked and where from: recorded, but not part of the approval key."""

    tenant: str
    subject: str
    call_id: str | None = None
    session_id: str | None = None
    retry_of: str | None = Field(default=None, description="The restricted execution this request retries.")
    ci: CiRecord | None = Field(
        default=None, description="The CI job the request is a step of, with the key of its job run (job_key)."
    )
    mcp: McpContext | None = Field(default=None, description="The MCP call the request came from.")


class SanitizedRequest(_Frozen):
    """One shape for every tool; fields that do not apply are None and left out of dumps."""

    tool: str = Field(description="The tool name as asked.")
    # what is asked (the approval key covers exactly these)
    argv: list[str] | None = Field(default=None, description="argv tools: the argv as given.")
    command: str | None = Field(default=None, description="shell-string tools: the command as given.")
    skill: str | None = None
    cwd: str | None = None
    env_keys: list[str] = Field(default_factory=list, description="Names only, sorted; never values.")
    timeout_ms: int | None = None
    tty: bool = False
    profile: str | None = None
    image: str | None = Field(default=None, description="The image asked for instead of the profile's.")
    sandbox_permissions: SanitizedPermissions = Field(default_factory=SanitizedPermissions)
    target_session_id: str | None = Field(default=None, description="write_stdin: the exec session.")
    stdin: ContentDigest | KeyedDigest | None = None
    path: str | None = Field(default=None, description="file_write: the target path as given.")
    content: ContentDigest | None = None
    script: ScriptDigest | None = Field(default=None, description="shell_exec: the script file the argv runs.")
    patch: ContentDigest | None = None
    patch_paths: list[str] | None = Field(default=None, description="apply_patch: best-effort file paths.")
    egress: list[str] | None = Field(
        default=None,
        description="Exec tools: every host:port pattern the run may reach through the egress proxy, its "
        "profile's and the request's (canonical, sorted); None when it reaches nothing.",
    )
    # derived, for gating and audit
    intent: Intent | None = None
    risk: Risk
    context: RequestContext

    def key_material(self) -> dict[str, Any]:
        """The asked action only: no context (per-call ids) and nothing derived by analyzers,
        so a key stays stable across calls, processes and analyzer improvements."""
        return self.model_dump(mode="json", exclude_none=True, exclude={"intent", "risk", "context"})

    def public(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)
