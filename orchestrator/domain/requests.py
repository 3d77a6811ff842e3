"""What an agent asks for: one frozen model per tool kind, discriminated by ``tool``.

These models hold secrets (env values, stdin, file and patch content). They never leave the gate:
everything downstream (evidence, logs, prompts, errors) sees only the sanitized form.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from orchestrator.domain.errors import InputInvalid

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MAX_TIMEOUT_MS = 24 * 3600 * 1000

ExecTool = Literal["shell_exec", "shell", "shell_command", "exec_command", "skill_exec"]
EXEC_TOOLS: frozenset[str] = frozenset({"shell_exec", "shell", "shell_command", "exec_command", "skill_exec"})
ALL_TOOLS: tuple[str, ...] = (
    "shell_exec",
    "shell",
    "shell_command",
    "exec_command",
    "write_stdin",
    "file_write",
    "apply_patch",
    "skill_exec",
)


def _no_nul(value: str, what: str) -> str:
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL bytes")
    return value


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True, str_strip_whitespace=False)


class ExtraMount(_Frozen):
    """A host path the request asks to see inside the sandbox: an escalation, always asked."""

    source: str = Field(min_length=1, description="Host path.")
    target: str = Field(min_length=1, description="Absolute path inside the sandbox.")
    read_only: bool = Field(default=True, description="Mount read-only.")


class SandboxPermissions(_Frozen):
    """Escalations beyond the profile. Any of them makes the policy ask."""

    network: bool = Field(default=False, description="Ask for network access.")
    writable_root: bool = Field(default=False, description="Ask for a writable root filesystem.")
    extra_mounts: tuple[ExtraMount, ...] = Field(default=(), description="Ask for extra host mounts.")

    @property
    def any(self) -> bool:
        return self.network or self.writable_root or bool(self.extra_mounts)

    def asked(self) -> list[str]:
        out = []
        if self.network:
            out.append("network")
        if self.writable_root:
            out.append("writable_root")
        out.extend(f"mount:{m.source}->{m.target}:{'ro' if m.read_only else 'rw'}" for m in self.extra_mounts)
        return out


class _RequestBase(_Frozen):
    cwd: str | None = Field(default=None, description="Working directory, relative to the workspace.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment values (secret).")
    timeout_ms: int | None = Field(default=None, ge=1, le=_MAX_TIMEOUT_MS, description="Wall-clock limit.")
    tty: bool = Field(default=False, description="Allocate a terminal.")
    profile: str | None = Field(default=None, max_length=128, description="Execution profile name.")
    sandbox_permissions: SandboxPermissions = Field(
        default_factory=SandboxPermissions, description="Escalations asked for."
    )
    tenant: str = Field(default="default", min_length=1, max_length=256, description="Owning tenant.")
    subject: str = Field(default="anonymous", min_length=1, max_length=256, description="Who asks.")
    call_id: str | None = Field(default=None, max_length=256, description="The agent's tool-call id.")
    session_id: str | None = Field(default=None, max_length=256, description="Agent or exec session id.")

    @field_validator("env")
    @classmethod
    def _env_keys(cls, env: dict[str, str]) -> dict[str, str]:
        for number, (key, value) in enumerate(env.items(), start=1):
            if not _ENV_KEY.match(key):
                # a malformed key may be a whole 'NAME=secret': name its position, never its text
                raise ValueError(f"env key #{number} is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)")
            _no_nul(value, f"env value of {key}")
        return env

    @field_validator("cwd")
    @classmethod
    def _cwd(cls, cwd: str | None) -> str | None:
        return None if cwd is None else _no_nul(cwd, "cwd")


def _argv_ok(argv: list[str]) -> list[str]:
    if not argv or not argv[0]:
        raise ValueError("argv must start with a non-empty program name")
    for arg in argv:
        _no_nul(arg, "argv")
    return argv


class ShellExecRequest(_RequestBase):
    tool: Literal["shell_exec"] = Field(description="Run an argv.")
    argv: list[str] = Field(min_length=1, description="Program and arguments, run as is.")
    _v = field_validator("argv")(_argv_ok)


class ShellRequest(_RequestBase):
    tool: Literal["shell"] = Field(description="Run an argv list (agent 'shell' tool).")
    command: list[str] = Field(min_length=1, description="Program and arguments, run as is.")
    _v = field_validator("command")(_argv_ok)


class ShellCommandRequest(_RequestBase):
    tool: Literal["shell_command"] = Field(description="Run a shell string.")
    command: str = Field(min_length=1, max_length=256 * 1024, description="Shell command string.")
    _v = field_validator("command")(lambda v: _no_nul(v, "command"))


class ExecCommandRequest(_RequestBase):
    tool: Literal["exec_command"] = Field(description="Start an interactive shell session.")
    cmd: str = Field(min_length=1, max_length=256 * 1024, description="Shell command string.")
    _v = field_validator("cmd")(lambda v: _no_nul(v, "cmd"))


class WriteStdinRequest(_RequestBase):
    tool: Literal["write_stdin"] = Field(description="Write to a running exec session.")
    session_id: str = Field(min_length=1, max_length=256, description="The exec session.")
    chars: str = Field(default="", max_length=1024 * 1024, description="Characters to write (secret).")


class FileWriteRequest(_RequestBase):
    tool: Literal["file_write"] = Field(description="Write a file in the workspace.")
    path: str = Field(min_length=1, max_length=4096, description="Target path.")
    content: str = Field(max_length=64 * 1024 * 1024, description="File content (secret).")
    _v = field_validator("path")(lambda v: _no_nul(v, "path"))


class ApplyPatchRequest(_RequestBase):
    tool: Literal["apply_patch"] = Field(description="Apply a patch in the workspace.")
    patch: str = Field(min_length=1, max_length=64 * 1024 * 1024, description="Patch text (secret).")


class SkillExecRequest(_RequestBase):
    tool: Literal["skill_exec"] = Field(description="Run a skill, resolved to an argv.")
    skill: str = Field(min_length=1, max_length=256, description="Skill name.")
    argv: list[str] = Field(min_length=1, description="The argv the skill resolved to.")
    _v = field_validator("argv")(_argv_ok)


Request = Annotated[
    ShellExecRequest
    | ShellRequest
    | ShellCommandRequest
    | ExecCommandRequest
    | WriteStdinRequest
    | FileWriteRequest
    | ApplyPatchRequest
    | SkillExecRequest,
    Field(discriminator="tool"),
]

_ADAPTER: TypeAdapter[Request] = TypeAdapter(Request)


def _field_path(loc: tuple[int | str, ...]) -> str:
    # the discriminated union puts the tool name first: `shell_exec.argv` reads better as `argv`
    if loc and loc[0] in ALL_TOOLS:
        loc = loc[1:]
    return ".".join(str(p) for p in loc) or "(root)"


def describe_validation_error(err: ValidationError) -> str:
    """Field paths and messages only: pydantic's own text echoes input values, which may be secrets."""
    return "; ".join(
        f"{_field_path(item['loc'])}: {item['msg']}" for item in err.errors(include_input=False, include_url=False)
    )


def parse_request(data: Any) -> Request:
    """Validate untrusted input into a request, or raise ``INPUT.INVALID`` naming the fields."""
    if isinstance(data, BaseModel):
        data = data.model_dump()
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as err:
        fields = [_field_path(e["loc"]) for e in err.errors(include_input=False)]
        raise InputInvalid(describe_validation_error(err), details={"fields": fields}) from None


def command_argv(request: Request) -> list[str] | None:
    """The argv an exec tool runs verbatim, or None for shell strings and non-exec tools."""
    if isinstance(request, (ShellExecRequest, SkillExecRequest)):
        return list(request.argv)
    if isinstance(request, ShellRequest):
        return list(request.command)
    return None


def command_string(request: Request) -> str | None:
    """The shell string an exec tool runs, or None."""
    if isinstance(request, ShellCommandRequest):
        return request.command
    if isinstance(request, ExecCommandRequest):
        return request.cmd
    return None
