"""The GitHub Actions runner's container-hook protocol, as the runner speaks it.

Read in ``actions/runner`` (``src/Runner.Worker/Container/ContainerHooks/HookInput.cs``: the input's shape, its
camelCase JSON, the command names; ``HookResponse.cs``: ``state``, ``context``, ``isAlpine`` required when there
is a job container; ``ContainerHookManager.cs``: the runner makes the response file empty before it runs the
hook, reads it after, and fails the step when the hook exits non-zero) and ``actions/runner-container-hooks``
(``packages/hooklib/src/interfaces.ts``, ``examples/*.json``).

What reaches the controller is the hook's stdin as the runner wrote it, and a few of the hook's environment
variables (the job's context: ``HOOK_ENV``). The models say exactly what the controller takes — one shape per
command, the job's context typed as the CI context is, no NUL where a value reaches the kernel — so the API's
document is as strict as the controller (``tests/api/test_openapi_conformance.py``). They refuse what they do
not know in a container's options (a future field with a meaning the controller cannot honour must not pass
unseen); the runner's ``null`` for an empty list or map reads as empty (Newtonsoft writes it so).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    RootModel,
    StringConstraints,
    Tag,
    ValidationError,
)

from orchestrator.domain.ci import ACTION_REF, ACTION_REPOSITORY, Actor, Event, Label, Ref, Repository, RunId
from orchestrator.domain.ci_jobs import WORKSPACE_NAME_PATTERN
from orchestrator.domain.errors import InputInvalid
from orchestrator.domain.images import IMAGE_MAX, IMAGE_PATTERN
from orchestrator.domain.requests import ENV_NAME, MAX_ARG_BYTES, MAX_PATH_BYTES, ProfileName

Command = Literal["prepare_job", "run_script_step", "run_container_step", "cleanup_job"]

#: the hook's own environment variables it forwards: the job's context (``domain.ci.ci_from_github``), the
#: runner's name, and the deployment's settings (where the job's workspace is, whether the runner's externals are
#: beside it, the job's profile). The runner gives its hook its own process environment and the github and runner
#: contexts, never a workflow's ``env:`` (actions/runner ``ScriptHandler.cs``): SANDBOX_* are the runner pod's,
#: not the job's.
HOOK_ENV: tuple[str, ...] = (
    "GITHUB_REPOSITORY",
    "GITHUB_WORKFLOW",
    "GITHUB_JOB",
    "GITHUB_ACTION",
    "GITHUB_ACTION_REPOSITORY",
    "GITHUB_ACTION_REF",
    "GITHUB_RUN_ID",
    "GITHUB_RUN_ATTEMPT",
    "GITHUB_REF",
    "GITHUB_EVENT_NAME",
    "GITHUB_ACTOR",
    "RUNNER_NAME",
    "SANDBOX_WORKSPACE",
    "SANDBOX_EXTERNALS",
    "SANDBOX_PROFILE",
)

_NO_NUL = "^[^\\x00]*$"
#: a word handed to the kernel (argv, an environment value)
Word = Annotated[str, StringConstraints(max_length=MAX_ARG_BYTES, pattern=_NO_NUL)]
#: a path inside the job container
PathWord = Annotated[str, StringConstraints(max_length=MAX_PATH_BYTES, pattern=_NO_NUL)]
Image = Annotated[str, StringConstraints(min_length=1, max_length=IMAGE_MAX, pattern=IMAGE_PATTERN)]
WorkspaceName = Annotated[str, StringConstraints(pattern=WORKSPACE_NAME_PATTERN)]


def _empty(kind: type[list[Any]] | type[dict[str, Any]]) -> BeforeValidator:
    return BeforeValidator(lambda value: kind() if value is None else value)


def _env_names(env: dict[str, str]) -> dict[str, str]:
    for number, name in enumerate(env, start=1):
        if ENV_NAME.fullmatch(name) is None:
            raise ValueError(f"variable #{number} is not a valid name ([A-Za-z_][A-Za-z0-9_-]*)")  # never its text
    return env


#: environment variables: names a shell takes, values without NUL (the runner writes null for none)
Env = Annotated[
    dict[str, Word],
    _empty(dict),
    AfterValidator(_env_names),
    Field(json_schema_extra={"propertyNames": {"pattern": ENV_NAME.pattern}}),
]
Words = Annotated[list[Word], _empty(list)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Mount(_Model):
    source: str = Field(alias="sourceVolumePath")
    target: str = Field(alias="targetVolumePath")
    read_only: bool = Field(default=False, alias="readOnly")


class Registry(_Model):
    username: str | None = None
    password: str | None = None  # never kept, never logged
    server_url: str | None = Field(default=None, alias="serverUrl")


class Container(_Model):
    """``HookContainer``: the job container (prepare_job), or a container step's."""

    image: Image | None = None
    dockerfile: str | None = None
    entry_point: PathWord | None = Field(default=None, alias="entryPoint")
    entry_point_args: Words = Field(default_factory=list, alias="entryPointArgs")
    working_directory: PathWord | None = Field(default=None, alias="workingDirectory")
    create_options: str | None = Field(default=None, alias="createOptions")
    registry: Registry | None = None
    environment_variables: Env = Field(default_factory=dict, alias="environmentVariables")
    port_mappings: Annotated[list[str], _empty(list)] = Field(default_factory=list, alias="portMappings")
    system_mount_volumes: Annotated[list[Mount], _empty(list)] = Field(default_factory=list, alias="systemMountVolumes")
    user_mount_volumes: Annotated[list[Mount], _empty(list)] = Field(default_factory=list, alias="userMountVolumes")
    prepend_path: Annotated[list[PathWord], _empty(list)] = Field(default_factory=list, alias="prependPath")


class PrepareJobArgs(_Model):
    container: Container | None = None
    # refused whatever they hold (no sandbox runs services): read only for their names, as written (the
    # hooks repository's example spells a service's "entrypoint" in lower case)
    services: Annotated[list[dict[str, Any]], _empty(list)] = Field(default_factory=list)


class ScriptStepArgs(_Model):
    entry_point: PathWord = Field(alias="entryPoint")
    entry_point_args: Words = Field(default_factory=list, alias="entryPointArgs")
    environment_variables: Env = Field(default_factory=dict, alias="environmentVariables")
    prepend_path: Annotated[list[PathWord], _empty(list)] = Field(default_factory=list, alias="prependPath")
    working_directory: PathWord | None = Field(default=None, alias="workingDirectory")


class JobState(BaseModel):
    """The state prepare_job answered, handed back by the runner on every later command: the job's id, and what
    the steps need of prepare_job's input (its path map, the job container's environment, whether the runner's
    externals are mounted), so that a controller restarted since prepare_job takes the job's next step. Signed by
    the controller (``mac``): a restarted controller rebuilds a job only from a state it made, for that job
    (another runner of the tenant cannot hand it other paths or another environment for the job), and still
    checks the job is the caller's, every sandbox path inside its workspace, and the runner's externals again.
    /__e is never one of its paths: it is rebuilt from ``externals``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    job: str = Field(min_length=1, max_length=128, description="The CI job's id (job-...).")
    paths: list[tuple[PathWord, PathWord]] | None = Field(
        default=None, max_length=64, description="The runner's paths and the job's sandbox paths they map onto."
    )
    missing: list[PathWord] = Field(default_factory=list, max_length=16, description="Runner paths no step has.")
    env: Env = Field(default_factory=dict, description="The job container's environment (prepare_job's).")
    externals: bool = Field(
        default=False, description="The runner's externals (beside its work directory): /__e in every step."
    )
    mac: str | None = Field(
        default=None,
        pattern="^[0-9a-f]{64}$",
        description="HMAC-SHA256 of the rest (job, paths, missing, env, externals) under the controller's key.",
    )


class _Input(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    response_file: str | None = Field(default=None, alias="responseFile")


class PrepareJobInput(_Input):
    command: Literal["prepare_job"]
    args: PrepareJobArgs
    state: dict[str, Any] | None = None


class ScriptStepInput(_Input):
    command: Literal["run_script_step"]
    args: ScriptStepArgs
    state: JobState


class ContainerStepInput(_Input):
    command: Literal["run_container_step"]
    args: Container
    state: JobState


class CleanupJobInput(_Input):
    command: Literal["cleanup_job"]
    args: dict[str, Any] | None = None
    state: dict[str, Any] | None = None  # a job prepare_job never opened: nothing to clean up


def _text(pattern: str, length: int) -> Any:
    return Annotated[str, StringConstraints(min_length=1, max_length=length, pattern=pattern)]


class HookEnv(BaseModel):
    """The hook's own variables, typed as the CI context takes them (``domain.ci``); an empty one is not sent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    GITHUB_REPOSITORY: Repository | None = None
    GITHUB_WORKFLOW: Label | None = None
    GITHUB_JOB: Label | None = None
    GITHUB_ACTION: Label | None = None
    GITHUB_ACTION_REPOSITORY: _text(f"^{ACTION_REPOSITORY}$", 255) | None = None  # type: ignore[valid-type]
    GITHUB_ACTION_REF: _text(f"^{ACTION_REF}$", 255) | None = None  # type: ignore[valid-type]
    GITHUB_RUN_ID: RunId | None = None
    GITHUB_RUN_ATTEMPT: _text("^(?:[1-9][0-9]{0,3}|10000)$", 5) | None = None  # type: ignore[valid-type]
    GITHUB_REF: Ref | None = None
    GITHUB_EVENT_NAME: Event | None = None
    GITHUB_ACTOR: Actor | None = None
    RUNNER_NAME: WorkspaceName | None = Field(
        default=None, description="The runner's name: the job's workspace unless SANDBOX_WORKSPACE names it."
    )
    SANDBOX_WORKSPACE: WorkspaceName | None = None
    SANDBOX_EXTERNALS: Annotated[str, StringConstraints(max_length=128, pattern=_NO_NUL)] | None = Field(
        default=None,
        description="1 (or true) when the deployment copied the runner's externals to"
        " <workspaces>/<tenant>/.ci-externals/<workspace>: read-only at /__e in every step.",
    )
    SANDBOX_PROFILE: ProfileName | None = Field(
        default=None, description="The job's profile (default: ci): a runner set's, e.g. one with egress to the forge."
    )

    def given(self) -> dict[str, str]:
        """The variables as the CI context reads them (``ci_from_github``)."""
        return {name: value for name, value in self.model_dump().items() if value is not None}


class _PrepareEnv(HookEnv):
    """prepare_job opens the job: its context and its workspace are needed."""

    GITHUB_REPOSITORY: Repository
    GITHUB_JOB: Label
    GITHUB_RUN_ID: RunId
    RUNNER_NAME: WorkspaceName


class _Call(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    env: HookEnv = Field(
        default_factory=HookEnv, description=f"The hook's own environment, only these names: {', '.join(HOOK_ENV)}."
    )


class PrepareJobCall(_Call):
    input: PrepareJobInput = Field(description="The hook's stdin, exactly as the runner wrote it.")
    env: _PrepareEnv = Field(description="The hook's own environment: the job's context and the runner's name.")


class ScriptStepCall(_Call):
    input: ScriptStepInput = Field(description="The hook's stdin, exactly as the runner wrote it.")


class ContainerStepCall(_Call):
    input: ContainerStepInput = Field(description="The hook's stdin, exactly as the runner wrote it.")


class CleanupJobCall(_Call):
    input: CleanupJobInput = Field(description="The hook's stdin, exactly as the runner wrote it.")


def _command(value: Any) -> Any:
    """Which call this is: the runner's command (the calls differ in what they need)."""
    inner = value.get("input") if isinstance(value, dict) else getattr(value, "input", None)
    return inner.get("command") if isinstance(inner, dict) else getattr(inner, "command", None)


class HookCall(
    RootModel[
        Annotated[
            Annotated[PrepareJobCall, Tag("prepare_job")]
            | Annotated[ScriptStepCall, Tag("run_script_step")]
            | Annotated[ContainerStepCall, Tag("run_container_step")]
            | Annotated[CleanupJobCall, Tag("cleanup_job")],
            Discriminator(
                _command,
                custom_error_type="command",
                custom_error_message="input.command: one of "
                "prepare_job, run_script_step, run_container_step, cleanup_job",
            ),
        ]
    ]
):
    """``POST /v1/ci/github/hook``: what the hook forwards — the runner's stdin (``input``) and the hook's own
    variables (``env``), one shape per command."""

    model_config = ConfigDict(frozen=True)


_COMMANDS = ("prepare_job", "run_script_step", "run_container_step", "cleanup_job")


def refusal(err: ValidationError) -> InputInvalid:
    """INPUT.INVALID naming each field as the hook's body has it (``input.args.entryPoint``, not under the name
    of the command's shape), with pydantic's message but never the value (it may be a secret)."""
    fields, problems = [], []
    for item in err.errors(include_input=False, include_url=False):
        loc = item["loc"][1:] if item["loc"] and item["loc"][0] in _COMMANDS else item["loc"]
        path = ".".join(str(p) for p in loc) or "(root)"
        fields.append(path)
        problems.append(item["msg"] if item["type"] == "command" else f"{path}: {item['msg']}")
    return InputInvalid("; ".join(problems), details={"fields": fields})
