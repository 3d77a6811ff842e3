"""CI jobs: opened by a runner's front door, each step an ordinary governed execution, closed at cleanup.

A step is submitted to the service's execution manager exactly as ``POST /v1/executions`` would submit it (the
same gate, approvals, grants, evidence and limits: no second path), as a ``shell_exec`` request carrying the
job's CI context (with the step's name), its profile, its image and its workspace. The workspace is the service's
own per-tenant directory named for the job (``Workspaces.path(tenant, name)``: the name is the request's
``session_id``, so "approve for the session" covers the rest of the job; and nothing else: a runner's jobs share
its work directory's name, so the session approvals of that scope are forgotten when a job opens and when it
closes, however it closes).

An open job is kept in the service's state store (``ci_jobs``) as well as here: a controller restarted mid-job
finds it again at start-up (``recover``), so the job's next step runs and its cleanup removes its workspace (a
step that was running when the controller stopped ended with it, abandoned, as every execution then).

A job whose runner is gone without its cleanup (killed; an ephemeral runner never comes back) is closed once it
has been idle for ``idle_s`` — no step running or waiting for an approver, none asked for — as its cleanup would
close it (``expire_idle``, run by the service every ``idle_s / 8``; the close record says why).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.approvals.session import Scope
from orchestrator.domain.ci_jobs import DEFAULT_CI_PROFILE, CiJobRequest, CiJobView, CiStepRequest
from orchestrator.domain.errors import ExecutionNotRunning, Forbidden, InputInvalid, NotFound, OrchestratorError
from orchestrator.domain.ids import new_execution_id
from orchestrator.domain.principal import Principal, Role
from orchestrator.domain.requests import describe_validation_error
from orchestrator.domain.wire import ExecutionView
from orchestrator.evidence import EventType
from orchestrator.pipeline.profiles_of import Profiles
from orchestrator.service.executions import ExecutionManager
from orchestrator.service.workspaces import Workspaces
from orchestrator.state.store import StoredCiJob

log = logging.getLogger(__name__)

#: closed jobs kept for late readers (GET /v1/ci/jobs/{id}) before they are forgotten
_KEEP_CLOSED = 256
#: closed jobs' rows kept in the store this long (the evidence keeps their records)
_KEEP_CLOSED_S = 7 * 24 * 3600.0
#: who closes an expired job (its close record's reason says so)
_CONTROLLER = Principal(subject="controller", role=Role.ADMIN, tenants=frozenset())


def _now() -> datetime:
    return datetime.now(UTC)


def _validated(model: type[CiJobRequest] | type[CiStepRequest], raw: Any) -> Any:
    if not isinstance(raw, dict):
        raise InputInvalid("the body must be a JSON object", details={"fields": ["(root)"]})
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        fields = [".".join(map(str, e["loc"])) or "(root)" for e in err.errors(include_input=False)]
        raise InputInvalid(describe_validation_error(err), details={"fields": fields}) from None


@dataclass
class _Job:
    view: CiJobView
    request: CiJobRequest
    path: Path
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # steps refused before they ran (execution id, code): on the job's close record beside the steps that ran
    refused: list[dict[str, str]] = field(default_factory=list)
    # steps being submitted (the submission may wait for an approver, or for the step's end): a close cancels
    # them too, and a job with one is not idle; their ids once named
    submitting: int = 0
    in_flight: list[str] = field(default_factory=list)


class CiJobs:
    """The open jobs of this controller, and the steps they ran."""

    def __init__(
        self, manager: ExecutionManager, workspaces: Workspaces, profiles: Profiles, *, idle_s: float = 3600.0
    ) -> None:
        self.manager = manager
        self.workspaces = workspaces
        self.profiles = profiles
        self.idle_s = idle_s
        self._jobs: dict[str, _Job] = {}
        self._closed: list[str] = []
        self._on_close: list[Callable[[str], object]] = []

    def on_close(self, forget: Callable[[str], object]) -> None:
        """Call ``forget(job_id)`` whenever a job closes, however (its cleanup, a takeover, its expiry): a front
        door's own facts of the job go with it."""
        self._on_close.append(forget)

    # -- the store -------------------------------------------------------------------------------------
    async def recover(self) -> int:
        """At start-up (after the executions' own recovery): the jobs a previous controller left open, open here
        again. Returns how many. A row that no longer reads as a job is left closed out, logged."""
        rows = await self.manager.store.open_ci_jobs(forget_closed_before=time.time() - _KEEP_CLOSED_S)
        for row in rows:
            try:
                job = _Job(
                    view=CiJobView.model_validate_json(row.view),
                    request=CiJobRequest.model_validate_json(row.request),
                    path=Path(row.path),
                    refused=[dict(item) for item in json.loads(row.refused)],
                )
            except (ValidationError, ValueError, TypeError) as err:
                log.warning("CI job %s in the store does not read back (%s): not resumed", row.job_id, err)
                continue
            self._jobs[job.view.job_id] = job
        if rows:
            log.info("%d open CI job(s) resumed from the store", len(self._jobs))
        return len(rows)

    async def _save(self, job: _Job) -> None:
        await self.manager.store.put_ci_job(
            StoredCiJob(
                job_id=job.view.job_id,
                tenant=job.view.tenant,
                state=job.view.state,
                view=job.view.model_dump_json(),
                request=job.request.model_dump_json(),
                path=str(job.path),
                refused=json.dumps(job.refused),
            )
        )

    # -- opening ---------------------------------------------------------------------------------------
    async def open(self, raw: Any, principal: Principal) -> CiJobView:
        """Open a job: its image checked against the caps now (a refusal before any step runs), its workspace
        made when missing. A workspace another open job of this controller holds is taken over: that job is
        closed first (its runner is gone: a runner runs one job at a time)."""
        if principal.role is Role.APPROVER:
            raise Forbidden("an approver token cannot open CI jobs")
        request: CiJobRequest = _validated(CiJobRequest, raw)
        if request.ci.controller_job is not None:
            raise InputInvalid(
                "ci.controller_job: the controller names its jobs itself", details={"fields": ["ci.controller_job"]}
            )
        asked = {k: v for k, v in (("tenant", request.tenant), ("subject", request.subject)) if v is not None}
        owned = self.manager.owned(asked, principal)
        tenant, subject = owned["tenant"] or "default", owned["subject"]
        profile_name = request.profile or DEFAULT_CI_PROFILE
        profile = self.profiles.named(profile_name, image=request.image)  # POLICY.DENIED for an image not allowed
        job_id = f"job-{new_execution_id()}"
        name = request.workspace or job_id
        path = self.workspaces.path(tenant, name)
        for other in list(self._jobs.values()):
            if other.view.state == "open" and other.path == path:
                log.warning("job %s takes workspace %s over from job %s (closed)", job_id, name, other.view.job_id)
                await self._close(other, principal, ended=f"taken over by job {job_id} (its workspace)")
        # whatever was approved for the session of an earlier job here (its close may not have been seen) is not
        # this job's: it asks again
        self.manager.orchestrator.session_approvals.end_session(Scope(tenant, subject, name))
        created = not path.is_dir()
        await self.workspaces.ensure(tenant, name)
        view = CiJobView(
            job_id=job_id,
            state="open",
            tenant=tenant,
            subject=subject,
            ci=request.ci.recorded(),
            profile=profile_name,
            image=profile.image,
            workspace=name,
            workspace_created=created,
            container_path=profile.workspace.container_path,
            created_at=_now(),
        )
        self._jobs[job_id] = job = _Job(view=view, request=request, path=path)
        await self._save(job)
        await self._record(
            EventType.CI_JOB_OPENED,
            view,
            principal,
            reason=f"opened by {principal.label}",
            data={
                "ci": view.ci.model_dump(mode="json", exclude_none=True),
                "profile": view.profile,
                "image": view.image,
                "workspace": view.workspace,
                "workspace_created": view.workspace_created,
                "container_path": view.container_path,
            },
        )
        # the pool (when on) starts the first step's sandbox now, not when the step comes: nothing is decided,
        # recorded or run by it (each step still goes through the gate, and takes a fresh sandbox)
        like_a_step = {
            "tool": "shell_exec",
            "argv": ["true"],
            "profile": profile_name,
            "image": request.image,
            "ci": request.ci.model_dump(mode="json", exclude_none=True),
            "tenant": tenant,
            "subject": subject,
            "session_id": name,
        }
        self.manager.orchestrator.prestart(like_a_step, workspace=path)
        log.info("CI job %s opened (%s %s, job %s)", job_id, view.ci.provider, view.ci.repository, view.ci.job)
        return view

    def get(self, job_id: str, principal: Principal) -> CiJobView:
        return self._job(job_id, principal).view

    def _job(self, job_id: str, principal: Principal) -> _Job:
        job = self._jobs.get(job_id)
        if job is None or not principal.sees(job.view.tenant):
            raise NotFound(f"no CI job {job_id}")  # another tenant's: indistinguishable
        return job

    # -- steps -----------------------------------------------------------------------------------------
    async def step(self, job_id: str, raw: Any, principal: Principal, *, wait_s: float | None = None) -> ExecutionView:
        """Submit one step as an execution of the job (refusals raise, as for any submission)."""
        job = self._job(job_id, principal)
        step: CiStepRequest = _validated(CiStepRequest, raw)
        if job.view.state != "open":
            raise ExecutionNotRunning(f"CI job {job_id} is closed: it takes no more steps")
        ci = job.request.ci.model_copy(update={"step": step.step, "action": step.action})
        request: dict[str, Any] = {
            "tool": "shell_exec",
            "argv": step.argv,
            "env": step.env,
            "cwd": step.cwd,
            "timeout_ms": step.timeout_ms,
            "profile": job.view.profile,
            "image": step.image or job.request.image,
            "externals": step.externals or None,
            "ci": ci.model_dump(mode="json", exclude_none=True),
            "tenant": job.view.tenant,
            "subject": job.view.subject,
            "session_id": job.view.workspace,
        }
        if step.script is not None:
            request["script"] = step.script.model_dump(mode="json")
        request = {k: v for k, v in request.items() if v is not None}
        if step.image is not None:
            self.profiles.named(job.view.profile, image=step.image)  # refused now, before anything is asked
        named: list[str] = []

        def in_flight(execution_id: str) -> None:
            named.append(execution_id)
            job.in_flight.append(execution_id)

        job.submitting += 1
        try:
            view = await self.manager.submit(request, principal, wait_s=wait_s, ci_job=job.view.job_id, on_id=in_flight)
        except OrchestratorError as err:
            refused = err.details.get("execution_id")
            if isinstance(refused, str) and job.view.state == "open":  # decided and refused (on the record): the
                job.refused.append({"execution_id": refused, "error_code": err.code})  # close record names it
                await self._save(job)
            raise
        finally:
            job.submitting -= 1
            job.in_flight[:] = [e for e in job.in_flight if e not in named]
        if job.view.state != "open":  # closed while this was submitted: never runs on (the close cancelled it)
            with contextlib.suppress(ExecutionNotRunning, NotFound):
                await self.manager.cancel(view.execution_id, principal)
            raise ExecutionNotRunning(f"CI job {job_id} was closed while this step was submitted: it was cancelled")
        job.view = job.view.model_copy(update={"steps": [*job.view.steps, view.execution_id]})
        await self._save(job)
        return view

    def workspace_of(self, job_id: str) -> Path:
        """Where the job's workspace is on this host (the controller's side of the mount)."""
        return self._jobs[job_id].path

    # -- closing ---------------------------------------------------------------------------------------
    async def close(self, job_id: str, principal: Principal) -> CiJobView:
        """Close the job: steps still running are cancelled (their sandboxes removed), the workspace removed
        when the job made it. Closing again answers the closed job."""
        job = self._job(job_id, principal)
        await self._close(job, principal, ended=f"closed by {principal.label}")
        return job.view

    async def _close(self, job: _Job, principal: Principal, *, ended: str) -> None:
        async with job.lock:
            if job.view.state == "closed":
                return
            # a step still being submitted is one of its steps too (cancelled below, on its close record)
            steps = [*job.view.steps, *(e for e in job.in_flight if e not in job.view.steps)]
            job.view = job.view.model_copy(update={"state": "closed", "closed_at": _now(), "steps": steps})
            cancelled = []
            for execution_id in job.view.steps:  # what still runs is stopped, its sandbox removed
                with contextlib.suppress(ExecutionNotRunning, NotFound):
                    await self.manager.cancel(execution_id, principal)
                    cancelled.append(execution_id)
                    with contextlib.suppress(OrchestratorError, TimeoutError):
                        await self.manager.wait(execution_id, principal, 30.0)
            # what was approved for the job's session ends with it (the next job on this workspace asks again)
            self.manager.orchestrator.session_approvals.end_session(
                Scope(job.view.tenant, job.view.subject, job.view.workspace)
            )
            # no pre-started sandbox outlives the job, whoever made its workspace (a runner's work directory stays
            # the runner's, but a pod waiting on it would hold its node's CPU until its TTL; ephemeral runners
            # never come back to it): the next job there fills anew
            self.manager.orchestrator.retire_workspace(job.path)
            if job.view.workspace_created:
                # rmtree never follows a link the workspace holds (fd-based on Linux)
                await asyncio.to_thread(shutil.rmtree, job.path, True)
            await self._record(
                EventType.CI_JOB_CLOSED,
                job.view,
                principal,
                reason=ended,
                status="closed",
                data={
                    "ci": job.view.ci.model_dump(mode="json", exclude_none=True),
                    "steps": [await self._step_end(e, principal) for e in job.view.steps],
                    "refused": list(job.refused),
                    "cancelled": cancelled,
                    "workspace": job.view.workspace,
                    "workspace_removed": job.view.workspace_created,
                },
            )
            await self._save(job)
            for forget in self._on_close:
                forget(job.view.job_id)
            self._closed.append(job.view.job_id)
            while len(self._closed) > _KEEP_CLOSED:
                self._jobs.pop(self._closed.pop(0), None)
        log.info("CI job %s closed", job.view.job_id)

    # -- expiry ----------------------------------------------------------------------------------------
    async def expire_idle(self, now: datetime | None = None) -> list[str]:
        """Close every open job idle for ``idle_s`` (nothing of it running or waiting, nothing asked for since);
        returns their ids."""
        now = now or _now()
        expired = []
        for job in [j for j in self._jobs.values() if j.view.state == "open"]:
            since = await self._idle_since(job)
            if since is not None and (now - since).total_seconds() >= self.idle_s:
                idle = round((now - since).total_seconds())
                await self._close(job, _CONTROLLER, ended=f"expired: idle for {idle}s (its runner never cleaned up)")
                expired.append(job.view.job_id)
        return expired

    async def _idle_since(self, job: _Job) -> datetime | None:
        """When the job last did anything (opened, a step asked for or ended); None while a step is under way (or
        being submitted)."""
        if job.submitting:
            return None
        last = job.view.created_at
        for execution_id in job.view.steps[-8:]:  # the latest steps: a job's steps come one after another
            try:
                step = await self.manager.get(execution_id, _CONTROLLER)
            except NotFound:
                continue
            if not step.state.final:
                return None
            last = max(last, step.updated_at)
        return last

    async def expire_forever(self) -> None:
        """``expire_idle`` every ``idle_s / 8`` until cancelled (the service's lifetime)."""
        while True:
            await asyncio.sleep(self.idle_s / 8)
            try:
                await self.expire_idle()
            except Exception:  # never let the sweep die with one job; say so
                log.exception("expiring idle CI jobs failed")

    # -- evidence --------------------------------------------------------------------------------------
    async def _record(
        self, event: EventType, view: CiJobView, principal: Principal, *, data: dict[str, Any], **fields: Any
    ) -> None:
        """One durable record of the job, under its id: who (the job's tenant and subject; who acted, in the
        reason), never a secret (the CI context, names and ids only)."""
        await self.manager.orchestrator.evidence.append(
            {
                "event": event,
                "execution_id": view.job_id,
                "tenant": view.tenant,
                "subject": view.subject,
                "data": data,
                **fields,
            },
            durable=True,
        )

    async def _step_end(self, execution_id: str, principal: Principal) -> dict[str, Any]:
        """How a step of the job ended, as its close record says it: its state, exit code and error code."""
        try:
            step = await self.manager.get(execution_id, principal)
        except NotFound:
            return {"execution_id": execution_id, "state": "unknown"}
        error = step.error or (step.result.error if step.result is not None else None)
        out: dict[str, Any] = {"execution_id": execution_id, "state": step.state.value}
        if step.result is not None and step.result.exit_code is not None:
            out["exit_code"] = step.result.exit_code
        if error is not None:
            out["error_code"] = error.code
        return out
