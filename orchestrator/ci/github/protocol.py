"""The GitHub Actions runner's container-hook protocol, as the runner speaks it.

Read in ``actions/runner`` (``src/Runner.Worker/Container/ContainerHooks/HookInput.cs``: the input's shape, its
camelCase JSON, the command names; ``HookResponse.cs``: ``state``, ``context``, ``isAlpine`` required when there
is a job container; ``ContainerHookManager.cs``: the runner makes the response file empty before it runs the
hook, reads it after, and fails the step when the hook exits non-zero) and ``actions/runner-container-hooks``
(``packages/hooklib/src/interfaces.ts``, ``examples/*.json``).

What reaches the controller is the hook's stdin as the runner wrote it, and a few of the hook's environment
variables (the job's context: ``HOOK_ENV``). The models refuse what they do not know in a container's options
(a future field with a meaning the controller cannot honour must not pass unseen).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Command = Literal["prepare_job", "run_script_step", "run_container_step", "cleanup_job"]

#: the hook's own environment variables it forwards: the job's context (``domain.ci.ci_from_github``), the
#: runner's name, and the deployment's two settings (where the job's workspace and the runner's externals are)
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
)


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
    """``HookContainer``: the job container (prepare_job), a service, or a container step's."""

    image: str | None = None
    dockerfile: str | None = None
    entry_point: str | None = Field(default=None, alias="entryPoint")
    entry_point_args: list[str] = Field(default_factory=list, alias="entryPointArgs")
    working_directory: str | None = Field(default=None, alias="workingDirectory")
    create_options: str | None = Field(default=None, alias="createOptions")
    registry: Registry | None = None
    environment_variables: dict[str, str] = Field(default_factory=dict, alias="environmentVariables")
    port_mappings: list[str] = Field(default_factory=list, alias="portMappings")
    system_mount_volumes: list[Mount] = Field(default_factory=list, alias="systemMountVolumes")
    user_mount_volumes: list[Mount] = Field(default_factory=list, alias="userMountVolumes")
    prepend_path: list[str] = Field(default_factory=list, alias="prependPath")  # container steps

    def __init__(self, **data: Any) -> None:
        # the runner writes null for an empty list or map (Newtonsoft): read as empty
        for key in ("entryPointArgs", "environmentVariables", "portMappings", "systemMountVolumes",
                    "userMountVolumes", "prependPath"):  # fmt: skip
            if key in data and data[key] is None:
                data[key] = [] if key != "environmentVariables" else {}
        super().__init__(**data)


class PrepareJobArgs(_Model):
    container: Container | None = None
    # refused whatever they hold (no sandbox runs services): read only for their names, as written (the
    # hooks repository's example spells a service's "entrypoint" in lower case)
    services: list[dict[str, Any]] = Field(default_factory=list)

    def __init__(self, **data: Any) -> None:
        if data.get("services") is None:
            data["services"] = []
        super().__init__(**data)


class ScriptStepArgs(_Model):
    entry_point: str = Field(alias="entryPoint")
    entry_point_args: list[str] = Field(default_factory=list, alias="entryPointArgs")
    environment_variables: dict[str, str] = Field(default_factory=dict, alias="environmentVariables")
    prepend_path: list[str] = Field(default_factory=list, alias="prependPath")
    working_directory: str | None = Field(default=None, alias="workingDirectory")

    def __init__(self, **data: Any) -> None:
        for key, empty in (("entryPointArgs", []), ("environmentVariables", {}), ("prependPath", [])):
            if key in data and data[key] is None:
                data[key] = empty
        super().__init__(**data)


class HookInput(BaseModel):
    """The hook's stdin. ``args`` and ``state`` are read per command (``hook.py``)."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    command: Command
    response_file: str | None = Field(default=None, alias="responseFile")
    args: dict[str, Any] | None = None
    state: dict[str, Any] | None = None


class HookCall(BaseModel):
    """``POST /v1/ci/github/hook``: what the hook forwards."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: dict[str, Any] = Field(description="The hook's stdin, exactly as the runner wrote it (one JSON object).")
    env: dict[str, str] = Field(
        default_factory=dict, description=f"The hook's own environment, only these names: {', '.join(HOOK_ENV)}."
    )
