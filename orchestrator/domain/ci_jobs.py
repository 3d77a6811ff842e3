"""A CI job as the controller keeps it: the shapes of ``/v1/ci/jobs`` (prepare, steps, cleanup), shared by the
service, the client and the runners' front doors (the GitLab driver calls them; the GitHub hook's protocol,
served by the controller, uses the same jobs).

A job is opened once (its CI context, its image checked against the config's caps, its workspace: the
directory every step of it sees at the profile's mount point), then every step is one governed execution in
a fresh sandbox — an ordinary execution: decided by the gate on its content, asked about in ``/ui`` where the
policy says so, recorded in the evidence with the job's key — and the job is closed, which stops what still
runs and removes the workspace when the job made it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.domain.ci import Action, CiContext, CiRecord, Label
from orchestrator.domain.requests import ImageRef, ProfileName, ScriptFile, Text

__all__ = ["DEFAULT_CI_PROFILE", "WORKSPACE_NAME_PATTERN", "CiJobRequest", "CiJobView", "CiStepRequest"]

#: the profile a job runs with unless it names another (profiles/ci.yaml: sized for build steps)
DEFAULT_CI_PROFILE = "ci"
#: a workspace's name below its tenant's root: one path segment, never "." or ".."
WORKSPACE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_MAX_TIMEOUT_MS = 24 * 3600 * 1000


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class CiJobRequest(_Model):
    """``POST /v1/ci/jobs``: open a job."""

    ci: CiContext = Field(description="The job's CI context, from the runner's variables.")
    workspace: str | None = Field(
        default=None,
        pattern=WORKSPACE_NAME_PATTERN,
        description="The job's workspace: a directory of this name below the tenant's root (the runner's work "
        "directory, on storage both see), made if missing. Default: a new one for this job, removed at cleanup.",
    )
    image: ImageRef | None = Field(
        default=None,
        description="The job container's image; default: the profile's. Another one only where the config's "
        "caps.allowed_images name it; never pulled.",
    )
    profile: ProfileName | None = Field(default=None, description=f"Default: {DEFAULT_CI_PROFILE!r}.")
    tenant: str | None = Field(
        default=None,
        pattern=WORKSPACE_NAME_PATTERN,
        description="The owning tenant (the token's; an admin may name one): it names a directory of workspaces.",
    )
    subject: str | None = Field(default=None, description="Who asks (the token's; an admin may name one).")


class CiStepRequest(_Model):
    """``POST /v1/ci/jobs/{id}/steps``: run one step of the job as a governed execution."""

    step: Label | None = Field(default=None, description="The step's name (GitHub step id, GitLab stage).")
    action: Action | None = Field(default=None, description="GitHub: the uses: action this step runs.")
    argv: list[Text] = Field(min_length=1, description="What runs, as the runner gives it.")
    script: ScriptFile | None = Field(
        default=None, description="The script file the argv runs, with its content (decided on by the gate)."
    )
    env: dict[str, str] = Field(default_factory=dict, description="The step's environment (secret: names only kept).")
    cwd: Text | None = Field(default=None, description="Working directory, inside the workspace mount.")
    image: ImageRef | None = Field(
        default=None, description="A container step's image; default: the job's. Checked like the job's."
    )
    timeout_ms: int | None = Field(default=None, ge=1, le=_MAX_TIMEOUT_MS, description="Wall-clock limit.")
    externals: bool = Field(
        default=False,
        description="The runner's externals, beside the job's workspace (<tenant>/.ci-externals/<workspace>), "
        "read-only at /__e (a GitHub job whose runner set SANDBOX_EXTERNALS=1).",
    )


class CiJobView(_Model):
    """A job: what it is, where its steps run, what ran."""

    job_id: str = Field(description="The job's id (the front door keeps it between calls).")
    state: Literal["open", "closed"] = Field(description="closed after cleanup: no step is taken any more.")
    tenant: str
    subject: str
    ci: CiRecord = Field(description="The job's CI context, with its job_key (the evidence's link).")
    profile: str = Field(description="The profile every step runs with.")
    image: str = Field(description="The image steps run in unless a container step names another.")
    workspace: str = Field(description="The workspace's name below the tenant's root.")
    workspace_created: bool = Field(description="The controller made it for this job (removed at cleanup).")
    container_path: str = Field(description="Where steps see the workspace (the profile's mount point).")
    steps: list[str] = Field(default_factory=list, description="The executions of its steps, in order.")
    created_at: datetime
    closed_at: datetime | None = None
