"""What an agent asks for: one frozen model per tool kind, discriminated by ``tool``.

These models hold secrets (env values, stdin, file and patch content). They never leave the gate:
everything downstream (evidence, logs, prompts, errors) sees only the sanitized form.
"""

from __future__ import annotations

import base64
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from orchestrator.domain.ci import CiContext
from orchestrator.domain.errors import InputInvalid
from orchestrator.domain.hosts import parse_pattern
from orchestrator.domain.images import IMAGE_MAX, IMAGE_PATTERN
from orchestrator.domain.mcp import McpContext
from orchestrator.domain.text import has_surrogates

#: an environment variable name a request may set (the OpenAPI document states the same pattern): a shell's
#: name, or one with a '-' as the GitHub runner makes of an action's input (INPUT_FETCH-DEPTH for fetch-depth):
#: execve takes it, programs read it, no shell expands it
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_MAX_TIMEOUT_MS = 24 * 3600 * 1000

# What the kernel takes at execve (checked here, so that a request the kernel would refuse is an
# INPUT.INVALID naming the field, not an engine error after the decision was recorded):
#: one argv or environment string, with its terminating NUL (MAX_ARG_STRLEN: 32 pages)
MAX_ARG_BYTES = 128 * 1024 - 1
#: argv and the request's environment together (ARG_MAX is a quarter of the stack limit, 2 MiB with
#: the usual 8 MiB; the profile's fixed environment needs its share)
MAX_EXEC_BYTES = 1024 * 1024
#: a working directory or file path (PATH_MAX, with its NUL)
MAX_PATH_BYTES = 4095
#: standard input written to a session, and file or patch content
MAX_STDIN_CHARS = 1024 * 1024
MAX_CONTENT_CHARS = 64 * 1024 * 1024
#: a script file's content (ShellExecRequest.script): 1 MiB less one byte, a multiple of 3, so that the length
#: of its base64 (MAX_SCRIPT_BASE64, in the OpenAPI document) says exactly the same
MAX_SCRIPT_BYTES = 1024 * 1024 - 1
MAX_SCRIPT_BASE64 = MAX_SCRIPT_BYTES // 3 * 4
#: standard base64, padded, nothing else (no line breaks): the pattern the OpenAPI document states too
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
_BASE64 = re.compile(BASE64_PATTERN)

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

_NOT_UTF8 = "must be valid UTF-8 text (it holds a lone surrogate: undecodable bytes, or a \\udXXX escape)"


def _valid_text(value: Any) -> Any:
    """Before pydantic's own checks: text that cannot be encoded never gets further (messages name the
    field, never the value)."""
    if isinstance(value, str) and has_surrogates(value):
        raise ValueError(_NOT_UTF8)
    return value


_TEXT = BeforeValidator(_valid_text)
# Any text of a request is valid Unicode (what a str from undecodable bytes is not). The length
# constraints come first in each type: pydantic then says "at most N characters".
Text = Annotated[str, _TEXT]
Name = Annotated[str, StringConstraints(min_length=1, max_length=256), _TEXT]
OptionalName = Annotated[str, StringConstraints(max_length=256), _TEXT]
ProfileName = Annotated[str, StringConstraints(max_length=128), _TEXT]
PathText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_PATH_BYTES), _TEXT]
ImageRef = Annotated[str, StringConstraints(min_length=1, max_length=IMAGE_MAX, pattern=IMAGE_PATTERN)]
ShellText = Annotated[str, StringConstraints(min_length=1), _TEXT]
StdinText = Annotated[str, StringConstraints(max_length=MAX_STDIN_CHARS), _TEXT]
ContentText = Annotated[str, StringConstraints(max_length=MAX_CONTENT_CHARS), _TEXT]
PatchText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_CONTENT_CHARS), _TEXT]


def _utf8_size(value: str) -> int:
    return len(value) if value.isascii() else len(value.encode("utf-8"))


def _kernel_string(value: str, what: str, limit: int = MAX_ARG_BYTES) -> str:
    """A string handed to the kernel (argv, environment, a path): no NUL, at most ``limit`` bytes."""
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL bytes")
    if _utf8_size(value) > limit:
        raise ValueError(f"{what} is longer than the kernel takes ({limit} bytes in UTF-8)")
    return value


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True, str_strip_whitespace=False)


class ExtraMount(_Frozen):
    """A host path the request asks to see inside the sandbox: an escalation, always asked."""

    source: PathText = Field(description="Host path.")
    target: PathText = Field(description="Absolute path inside the sandbox.")
    read_only: bool = Field(default=True, description="Mount read-only.")

    @field_validator("source", "target")
    @classmethod
    def _path(cls, value: str) -> str:
        return _kernel_string(value, "a mount path", MAX_PATH_BYTES)


#: the most egress hosts one request may ask for, and the longest pattern text
MAX_EGRESS_HOSTS = 64
EgressHostText = Annotated[str, StringConstraints(min_length=1, max_length=300), _TEXT]


class SandboxPermissions(_Frozen):
    """Escalations beyond the profile. Any of them makes the policy ask."""

    network: bool | tuple[EgressHostText, ...] = Field(
        default=False,
        description="Egress this request needs beyond its profile: host:port patterns ('pypi.org:443', "
        "'*.example.com:443'), reached through the egress proxy; asked about unless the policy allows them. "
        "true asks for unrestricted network, which is never given.",
    )
    writable_root: bool = Field(default=False, description="Ask for a writable root filesystem.")
    extra_mounts: tuple[ExtraMount, ...] = Field(default=(), max_length=64, description="Ask for extra host mounts.")

    @field_validator("network")
    @classmethod
    def _hosts(cls, value: bool | tuple[str, ...]) -> bool | tuple[str, ...]:
        if isinstance(value, bool):
            return value
        if len(value) > MAX_EGRESS_HOSTS:
            raise ValueError(f"at most {MAX_EGRESS_HOSTS} egress hosts")
        # one spelling each, sorted: the same hosts asked in any order or case are the same ask (its key)
        return tuple(sorted({parse_pattern(text).canonical for text in value}))

    @property
    def egress_hosts(self) -> tuple[str, ...]:
        """The host:port patterns asked for, canonical and sorted."""
        return self.network if isinstance(self.network, tuple) else ()

    @property
    def any(self) -> bool:
        return bool(self.network) or self.writable_root or bool(self.extra_mounts)

    def asked(self) -> list[str]:
        out = []
        if self.network is True:
            out.append("network")
        elif self.network:
            out.append(f"network: {', '.join(self.network)}")
        if self.writable_root:
            out.append("writable_root")
        out.extend(f"mount:{m.source}->{m.target}:{'ro' if m.read_only else 'rw'}" for m in self.extra_mounts)
        return out


class _RequestBase(_Frozen):
    cwd: Text | None = Field(default=None, description="Working directory, relative to the workspace.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment values (secret).")
    timeout_ms: int | None = Field(default=None, ge=1, le=_MAX_TIMEOUT_MS, description="Wall-clock limit.")
    tty: bool = Field(default=False, description="Allocate a terminal.")
    profile: ProfileName | None = Field(default=None, description="Execution profile name.")
    image: ImageRef | None = Field(
        default=None,
        description="Run in this image instead of the profile's (a CI job's container): only one the config's "
        "caps.allowed_images names, and only one the engine already holds (nothing is ever pulled).",
    )
    sandbox_permissions: SandboxPermissions = Field(
        default_factory=SandboxPermissions, description="Escalations asked for."
    )
    tenant: Name = Field(default="default", description="Owning tenant.")
    subject: Name = Field(default="anonymous", description="Who asks.")
    ci: CiContext | None = Field(
        default=None,
        description="The CI job this request is a step of (provider, repository, workflow, job, step, run, ref, "
        "event, actor), from the runner's own variables: rules may match it (ci:), approvers see it, the "
        "evidence links the step to its job.",
    )
    mcp: McpContext | None = Field(
        default=None,
        description="The MCP call this request came from (transport, MCP session, client, tool); set by the MCP "
        "server, recorded with the request's context.",
    )
    call_id: OptionalName | None = Field(default=None, description="The agent's tool-call id.")
    session_id: OptionalName | None = Field(default=None, description="Agent or exec session id.")
    retry_of: OptionalName | None = Field(
        default=None,
        description="The execution this one retries after it ended SANDBOX.RESTRICTED, asking for the escalation "
        "it needed (linked in the evidence; asked about like any request).",
    )

    @field_validator("env", mode="before")
    @classmethod
    def _env_text(cls, env: Any) -> Any:
        # Keys and values are checked here, by position and valid name, before pydantic could name a
        # failing entry by its key: a malformed key may be a whole 'NAME=secret'.
        if isinstance(env, dict):
            for number, (key, value) in enumerate(env.items(), start=1):
                if not isinstance(key, str) or has_surrogates(key):
                    raise ValueError(f"env key #{number} {_NOT_UTF8 if isinstance(key, str) else 'must be a string'}")
                name = key if ENV_NAME.fullmatch(key) else f"#{number}"
                if not isinstance(value, str) or has_surrogates(value):
                    raise ValueError(
                        f"the env value of {name} {_NOT_UTF8 if isinstance(value, str) else 'must be a string'}"
                    )
        return env

    @field_validator("env")
    @classmethod
    def _env_keys(cls, env: dict[str, str]) -> dict[str, str]:
        for number, (key, value) in enumerate(env.items(), start=1):
            if not ENV_NAME.fullmatch(key):
                # a malformed key may be a whole 'NAME=secret': name its position, never its text
                raise ValueError(f"env key #{number} is not a valid variable name ([A-Za-z_][A-Za-z0-9_-]*)")
            _kernel_string(f"{key}={value}", f"env value of {key}")
        return env

    @field_validator("cwd")
    @classmethod
    def _cwd(cls, cwd: str | None) -> str | None:
        return None if cwd is None else _kernel_string(cwd, "cwd", MAX_PATH_BYTES)

    def _exec_size(self, words: list[str]) -> None:
        """argv and environment together within what execve takes (each string with its NUL and
        pointer)."""
        strings = [*words, *(f"{k}={v}" for k, v in self.env.items())]
        if sum(_utf8_size(w) + 9 for w in strings) > MAX_EXEC_BYTES:
            raise ValueError(f"argv and env together are longer than the kernel takes ({MAX_EXEC_BYTES} bytes)")


def _argv_ok(argv: list[str]) -> list[str]:
    if not argv or not argv[0]:
        raise ValueError("argv must start with a non-empty program name")
    for number, arg in enumerate(argv):
        _kernel_string(arg, f"argv[{number}]")
    return argv


def _shell_string(value: str, what: str) -> str:
    # run as `/bin/bash -c STRING`: one argv string
    return _kernel_string(value, what)


class ScriptFile(_Frozen):
    """A script file the command runs, with its content: a CI runner's step (``bash -e …/_temp/<id>.sh``, a
    GitLab stage script). The gate decides on the content as on a ``bash -c`` string (code for another
    interpreter, or content it cannot read, is never allowed without an approval or a rule); the run gets
    exactly these bytes at ``path``, written into the workspace before the sandbox starts. The content may hold
    what the runner put in it (a workflow's interpolated secrets): only its size and sha256 are recorded."""

    path: PathText = Field(
        description="The script's path exactly as the argv names it (the word a shell reads its script from): "
        "absolute inside the workspace, or relative to the working directory."
    )
    content_base64: str = Field(
        max_length=MAX_SCRIPT_BASE64,
        json_schema_extra={"pattern": BASE64_PATTERN},
        description=f"The script's bytes in standard base64 (padded, no line breaks), at most {MAX_SCRIPT_BYTES}"
        " bytes (secret: recorded as size and sha256 only).",
    )
    _p = field_validator("path")(lambda v: _kernel_string(v, "script.path", MAX_PATH_BYTES))

    @field_validator("content_base64")
    @classmethod
    def _base64(cls, text: str) -> str:
        if _BASE64.fullmatch(text) is None:
            # the message names the rule, never the text
            raise ValueError("must be standard base64 (A-Z a-z 0-9 + /, padded with =, no line breaks)")
        return text

    @property
    def content(self) -> bytes:
        """The script's bytes."""
        return base64.b64decode(self.content_base64, validate=True)

    @classmethod
    def of(cls, path: str, content: bytes | str) -> ScriptFile:
        """The script at ``path`` holding ``content`` (text is taken as UTF-8)."""
        data = content.encode("utf-8") if isinstance(content, str) else content
        return cls(path=path, content_base64=base64.b64encode(data).decode("ascii"))


class ShellExecRequest(_RequestBase):
    tool: Literal["shell_exec"] = Field(description="Run an argv.")
    argv: list[Text] = Field(min_length=1, description="Program and arguments, run as is.")
    script: ScriptFile | None = Field(
        default=None,
        description="The script file the argv runs (a CI step), with its content: decided on by the gate, written "
        "at its path in the workspace before the run.",
    )
    externals: bool = Field(
        default=False,
        description="A CI job's step: the runner's externals (SANDBOX_EXTERNALS, beside the job's workspace, where "
        "no sandbox reaches) mounted read-only at /__e, where the runner's JavaScript actions find their node. Set by "
        "the controller for its CI jobs' steps only: refused (INPUT.INVALID) in POST /v1/executions.",
    )
    _v = field_validator("argv")(_argv_ok)

    @model_validator(mode="after")
    def _size(self) -> ShellExecRequest:
        self._exec_size(self.argv)
        return self


class ShellRequest(_RequestBase):
    tool: Literal["shell"] = Field(description="Run an argv list (agent 'shell' tool).")
    command: list[Text] = Field(min_length=1, description="Program and arguments, run as is.")
    _v = field_validator("command")(_argv_ok)

    @model_validator(mode="after")
    def _size(self) -> ShellRequest:
        self._exec_size(self.command)
        return self


class ShellCommandRequest(_RequestBase):
    tool: Literal["shell_command"] = Field(description="Run a shell string.")
    command: ShellText = Field(description="Shell command string (at most 128 KiB in UTF-8).")
    _v = field_validator("command")(lambda v: _shell_string(v, "command"))

    @model_validator(mode="after")
    def _size(self) -> ShellCommandRequest:
        self._exec_size(["/bin/bash", "-c", self.command])
        return self


#: how long a session call waits for output at most, and how much one answer carries at most
MAX_YIELD_MS = 300_000
MAX_SESSION_OUTPUT_BYTES = 1024 * 1024
DEFAULT_YIELD_MS = 1_000
DEFAULT_SESSION_OUTPUT_BYTES = 64 * 1024


class _SessionAnswer(_RequestBase):
    """What a session call's answer may hold (exec_command, write_stdin)."""

    yield_time_ms: int = Field(
        default=DEFAULT_YIELD_MS, ge=0, le=MAX_YIELD_MS, description="How long to collect output before answering."
    )
    max_output_bytes: int = Field(
        default=DEFAULT_SESSION_OUTPUT_BYTES,
        ge=1,
        le=MAX_SESSION_OUTPUT_BYTES,
        description="At most this much output in the answer (the rest waits for the next call).",
    )


class ExecCommandRequest(_SessionAnswer):
    tool: Literal["exec_command"] = Field(description="Start an interactive shell session.")
    cmd: ShellText = Field(description="Shell command string (at most 128 KiB in UTF-8).")
    _v = field_validator("cmd")(lambda v: _shell_string(v, "cmd"))

    @model_validator(mode="after")
    def _size(self) -> ExecCommandRequest:
        self._exec_size(["/bin/bash", "-c", self.cmd])
        return self


class WriteStdinRequest(_SessionAnswer):
    tool: Literal["write_stdin"] = Field(description="Write to a running exec session.")
    session_id: Name = Field(description="The exec session.")
    chars: StdinText = Field(default="", description="Characters to write (secret); empty: only poll.")


class FileWriteRequest(_RequestBase):
    tool: Literal["file_write"] = Field(description="Write a file in the workspace.")
    path: PathText = Field(description="Target path.")
    content: ContentText = Field(description="File content (secret).")
    _v = field_validator("path")(lambda v: _kernel_string(v, "path", MAX_PATH_BYTES))


class ApplyPatchRequest(_RequestBase):
    tool: Literal["apply_patch"] = Field(description="Apply a patch in the workspace.")
    patch: PatchText = Field(description="Patch text (secret).")


class SkillExecRequest(_RequestBase):
    tool: Literal["skill_exec"] = Field(description="Run a skill, resolved to an argv.")
    skill: Name = Field(description="Skill name.")
    argv: list[Text] = Field(min_length=1, description="The argv the skill resolved to.")
    _v = field_validator("argv")(_argv_ok)

    @model_validator(mode="after")
    def _size(self) -> SkillExecRequest:
        self._exec_size(self.argv)
        return self


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


_TOOL_PROBLEM = f"tool: one of {', '.join(ALL_TOOLS)}"
# pydantic's messages for these quote the input: ours name the field only
_OWN_MESSAGES = {"union_tag_invalid": _TOOL_PROBLEM, "union_tag_not_found": _TOOL_PROBLEM}


def describe_validation_error(err: ValidationError) -> str:
    """Field paths and messages only: pydantic's own text echoes input values, which may be secrets."""
    return "; ".join(
        _OWN_MESSAGES.get(item["type"]) or f"{_field_path(item['loc'])}: {item['msg']}"
        for item in err.errors(include_input=False, include_url=False)
    )


def parse_request(data: Any) -> Request:
    """Validate untrusted input into a request, or raise ``INPUT.INVALID`` naming the fields."""
    if isinstance(data, BaseModel):
        data = data.model_dump()
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as err:
        fields = [
            "tool" if e["type"] in _OWN_MESSAGES else _field_path(e["loc"]) for e in err.errors(include_input=False)
        ]
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
