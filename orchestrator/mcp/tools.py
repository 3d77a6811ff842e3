"""The tools, as data: each one's name, what the model is told, and the exact input schema (the pydantic model
a call's arguments are validated with: what it refuses, the published schema refuses too)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from orchestrator.domain.requests import (
    MAX_ARG_BYTES,
    MAX_CONTENT_CHARS,
    MAX_PATH_BYTES,
    MAX_STDIN_CHARS,
    MAX_YIELD_MS,
)

ToolName = Literal["run", "exec_command", "write_stdin", "read_file", "write_file", "apply_patch"]
#: a token is about four bytes of text: how max_output_tokens becomes the byte cap the service takes
BYTES_PER_TOKEN = 4
MAX_OUTPUT_TOKENS = 262_144  # 1 MiB of output, the most one session answer holds
# no NUL anywhere: the kernel takes none, so the request models refuse it and the schema says so
_NO_NUL = r"^[^\x00]*$"
# the kernel's limits are bytes of UTF-8, which a schema cannot say: as characters they are exact for ASCII (text
# beyond it may still be refused by the service, INPUT.INVALID naming the field)
_Path = Annotated[str, StringConstraints(min_length=1, max_length=MAX_PATH_BYTES, pattern=_NO_NUL)]
_Host = Annotated[str, StringConstraints(min_length=1, max_length=261)]
_Id = Annotated[str, StringConstraints(min_length=1, max_length=256)]
_Word = Annotated[str, StringConstraints(max_length=MAX_ARG_BYTES, pattern=_NO_NUL)]

YieldMs = Annotated[int, Field(ge=0, le=MAX_YIELD_MS, description="How long to wait for output before answering (ms).")]
OutputTokens = Annotated[
    int | None, Field(ge=1, le=MAX_OUTPUT_TOKENS, description="Answer with at most about this many tokens of output.")
]

REFUSALS = (
    " A refusal is a result marked isError whose structured content has error.code: POLICY.DENIED (the policy "
    "says no: do not retry the same thing), APPROVAL.DENIED / APPROVAL.TIMEOUT (a person said no, or nobody "
    "answered in time), SANDBOX.RESTRICTED (the sandbox held the command back: error.details.escalation is "
    "what to ask for; call again with those fields and retry_of set to error.details.retry_of, and it is asked "
    "about like any request), SANDBOX.TIMEOUT / SANDBOX.OOM / SANDBOX.OUTPUT_LIMIT (a limit of the profile). "
    "A call the policy wants a person to approve stays open until they decide (progress notifications say how "
    "long is left)."
)


class _Input(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)  # JSON types as the schema says


class Escalation(_Input):
    """What a call may ask for beyond its profile, decided by the policy and approvers like the rest."""

    network: list[_Host] | None = Field(
        default=None, max_length=64, description="Hosts to reach through the egress proxy, as host:port."
    )
    writable_root: bool | None = Field(default=None, description="A writable root filesystem.")


class _Governed(_Input):
    profile: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = Field(
        default=None, description="The execution profile (limits, image); the service's default when left out."
    )
    sandbox_permissions: Escalation | None = Field(
        default=None, description="Escalations, usually those a SANDBOX.RESTRICTED result named."
    )
    retry_of: _Id | None = Field(
        default=None, description="The execution id of the SANDBOX.RESTRICTED result this call retries."
    )


class RunInput(_Governed):
    argv: list[_Word] | None = Field(
        default=None, min_length=1, max_length=4096, description="Program and arguments, run as they are."
    )
    command: _Word | None = Field(default=None, min_length=1, description="A shell string, run by bash -c.")
    workdir: _Path | None = Field(default=None, description="Working directory, relative to the workspace.")
    timeout_ms: int | None = Field(default=None, ge=1, le=86_400_000, description="Wall-clock limit.")
    max_output_tokens: OutputTokens = None

    @model_validator(mode="after")
    def _one(self) -> RunInput:
        if (self.argv is None) == (self.command is None):
            raise ValueError("give exactly one of argv or command")
        return self

    @classmethod
    def schema_extra(cls, schema: dict[str, Any]) -> None:
        schema["oneOf"] = [{"required": ["argv"]}, {"required": ["command"]}]


class ExecCommandInput(_Governed):
    cmd: _Word = Field(min_length=1, description="The shell command to run (bash -c), kept running as a session.")
    workdir: _Path | None = Field(default=None, description="Working directory, relative to the workspace.")
    tty: bool = Field(default=False, description="Run it in a terminal (a REPL, a prompt); stdout and stderr merge.")
    yield_time_ms: YieldMs = 1000
    max_output_tokens: OutputTokens = None


class WriteStdinInput(_Input):
    session_id: _Id = Field(description="The session exec_command answered with.")
    chars: Annotated[str, StringConstraints(max_length=MAX_STDIN_CHARS)] = Field(
        default="", description='Characters to write ("\\n" ends a line); "" only polls for output.'
    )
    yield_time_ms: YieldMs = 1000
    max_output_tokens: OutputTokens = None


class ReadFileInput(_Governed):
    path: _Path = Field(description="The file, relative to the workspace.")
    max_output_tokens: OutputTokens = None


class WriteFileInput(_Governed):
    path: _Path = Field(description="The file, relative to the workspace (directories on the way are made).")
    content: Annotated[str, StringConstraints(max_length=MAX_CONTENT_CHARS)] = Field(
        description="The whole new content (UTF-8)."
    )


class ApplyPatchInput(_Governed):
    patch: Annotated[str, StringConstraints(min_length=1, max_length=MAX_CONTENT_CHARS)] = Field(
        description="A unified or git diff (paths a/… b/…, relative to the workspace); applied whole or not at all."
    )


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: ToolName
    title: str
    description: str
    model: type[_Input]
    read_only: bool

    def input_schema(self) -> dict[str, Any]:
        schema = self.model.model_json_schema()
        extra = getattr(self.model, "schema_extra", None)
        if extra is not None:
            extra(schema)
        return schema


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "run",
        "Run a command",
        "Run one command in a fresh sandbox (no network, read-only root, the workspace mounted) and wait for it: "
        "exit code, stdout, stderr and what it changed in the workspace (counts, sizes). Give argv (run as is) or "
        "command (a shell string)." + REFUSALS,
        RunInput,
        False,
    ),
    ToolSpec(
        "exec_command",
        "Start a command session",
        "Start a command in a sandbox and keep it running (a REPL, a server, a long build): answers with the "
        "output of the first yield_time_ms and, while it runs, a session_id for write_stdin." + REFUSALS,
        ExecCommandInput,
        False,
    ),
    ToolSpec(
        "write_stdin",
        "Write to a session",
        'Send characters to a session\'s stdin (chars "" only polls) and answer with the output produced within '
        "yield_time_ms; exit_code once it ended. SESSION.NOT_FOUND: it ended, or it is not yours.",
        WriteStdinInput,
        False,
    ),
    ToolSpec(
        "read_file",
        "Read a file",
        "Read a file of the workspace (in a sandbox, decided like `cat PATH`)." + REFUSALS,
        ReadFileInput,
        True,
    ),
    ToolSpec(
        "write_file",
        "Write a file",
        "Write a whole file in the workspace (in a sandbox; the policy decides it as file_write on that path)."
        + REFUSALS,
        WriteFileInput,
        False,
    ),
    ToolSpec(
        "apply_patch",
        "Apply a patch",
        "Apply a unified diff to the workspace with git apply (in a sandbox; the policy decides it as apply_patch "
        "on the paths it touches); all hunks or none." + REFUSALS,
        ApplyPatchInput,
        False,
    ),
)
BY_NAME: dict[str, ToolSpec] = {tool.name: tool for tool in TOOLS}
