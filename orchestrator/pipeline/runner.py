"""The Runner: an authorized request in a fresh sandbox — its profile, the backend, a pre-started sandbox when
the pool has one, its egress route, and its records from the begin record to the end record.

From the begin record on, every way out ends with an end record: ``execution_finished`` when the command
ran to an end (whatever its exit), ``run_failed`` otherwise (with what it changed in the workspace so far).
A grant's reservation is settled before the end record, exactly once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.backends.base import (
    LaunchSpec,
    OutputCallback,
    OutputStream,
    SandboxBackend,
    SandboxHandle,
)
from orchestrator.budgets import cover
from orchestrator.budgets.book import Reservation
from orchestrator.domain.errors import (
    ExecutionCancelled,
    InputInvalid,
    InternalError,
    OrchestratorError,
    SandboxGrantLimit,
    SandboxOutputLimit,
    SandboxRestricted,
    SandboxStartFailed,
    SandboxTimeout,
    SandboxUnavailable,
)
from orchestrator.domain.ids import new_execution_id
from orchestrator.domain.requests import ExecCommandRequest, ShellExecRequest, parse_request
from orchestrator.domain.sanitized import SanitizedRequest
from orchestrator.domain.wire import ErrorBody, RunResult
from orchestrator.egress.runs import Egress, EgressSettings, NameRedactor
from orchestrator.evidence import EventType
from orchestrator.evidence.usage import RunContext, usage_from_end
from orchestrator.pipeline.authorizer import Authorization
from orchestrator.pipeline.config import PoolSettings
from orchestrator.pipeline.confirmations import Confirmations
from orchestrator.pipeline.end_record import failed_cause, failed_side_effects, finished_fields, run_limits
from orchestrator.pipeline.executor import RunOutcome, run_in_sandbox, workspace_changes
from orchestrator.pipeline.governing import Governing, check_workspace, governing_paths
from orchestrator.pipeline.launch import check_session_allowed, launch_spec, refuse_unavailable_escalations
from orchestrator.pipeline.observer import GuardedObserver, Observer
from orchestrator.pipeline.pool import PooledSandbox, PoolKey, SandboxPool
from orchestrator.pipeline.profiles_of import Profiles
from orchestrator.pipeline.recorder import Evidence, ExecutionRecorder
from orchestrator.pipeline.reservations import Reservations
from orchestrator.pipeline.restrictions import restriction
from orchestrator.pipeline.retries import RestrictedRuns
from orchestrator.pipeline.script_file import place_script
from orchestrator.pipeline.tasks import cancel_reason, despite_cancellation
from orchestrator.pipeline.this_process import THIS_PROCESS
from orchestrator.profiles import ResolvedProfile
from orchestrator.results import Redactor, Snapshot, snapshot

log = logging.getLogger(__name__)


class Runner:
    def __init__(
        self,
        *,
        backend: SandboxBackend,
        profiles: Profiles,
        evidence: Evidence,
        reservations: Reservations,
        restricted: RestrictedRuns,
        governing: tuple[Governing, ...] = (),
        pool: PoolSettings | None = None,
        egress: EgressSettings | None = None,
    ) -> None:
        self.backend = backend
        self.profiles = profiles
        self.evidence = evidence
        self.reservations = reservations
        self.restricted = restricted
        self.governing = governing
        self.egress = Egress(egress or EgressSettings())  # the proxy of the runs whose profile reaches hosts
        self.confirmations = Confirmations()  # runs answered from their init's report: their engine's end follows
        # pre-started sandboxes (pipeline/pool.py): when the config enables them and the backend can
        self.pool: SandboxPool | None = None
        if pool is not None and pool.enabled and backend.capabilities.can_pool:
            self.pool = SandboxPool(backend, pool, self._record_pooled)
            for name in sorted(set(pool.profiles) - set(profiles.registry.names())):  # sandboxctl doctor fails it
                log.warning("pool.profiles.%s: no such profile; its min_ready and max_ready apply to no run", name)
        elif pool is not None and pool.enabled:
            log.warning(
                "pool.enabled: the %s cannot pre-start sandboxes as configured; every run starts cold",
                type(backend).__name__,
            )

    async def _record_pooled(self, event: EventType, pool_id: str, *, tenant: str, **fields: Any) -> None:
        await self.evidence.of(pool_id, tenant=tenant, subject="pool").record(event, **fields)

    async def run(
        self,
        auth: Authorization,
        *,
        workspace: Path,
        observer: Observer | None = None,
        on_output: OutputCallback | None = None,
        session: bool = False,
        on_started: Callable[[SandboxHandle, ResolvedProfile], None] | None = None,
        on_capped: Callable[[OutputStream], None] | None = None,
        stopped_by: Callable[[], str | None] | None = None,
    ) -> ExecutionResult:
        """Run an authorized request in a fresh sandbox (see ``Orchestrator.run``, which settles its grant's
        reservation however this ends)."""
        request, gate = auth.request, auth.gate
        execution_id = auth.execution_id
        records = self.evidence.of(execution_id, gate)
        workspace = Path(workspace).resolve()  # the engine takes absolute bind sources only

        async def refused_before_start(err: OrchestratorError) -> OrchestratorError:
            """Nothing ran: what a grant reserved is released, and the refusal is on the record."""
            await self.reservations.charge(auth.reservations, records, None, ran=False)
            return await records.refuse(err)

        try:
            self.check_workspace(workspace)
            refuse_unavailable_escalations(request)
            profile = self.profiles.resolve(request, session=session)
            own_timeout_s = profile.wall_timeout_s
            unbounded = profile
            for reservation in auth.reservations:  # within what each grant (a bound too) reserved for it
                profile = cover.narrowed(profile, reservation)
            spec = launch_spec(execution_id, request, profile, workspace, session=session)
            # the pool's key, and what it fills the key from: the profile before a grant narrowed it (a grant narrows
            # only what this process enforces, the wall time and the output caps, never a sandbox's own settings),
            # so that the steps of a job its grant bounds share one key while the grant's budget goes down; a
            # sandbox filled so has its backstop deadline from the profile's own wall time (never an earlier one)
            pool_spec = (
                spec
                if profile is unbounded
                else launch_spec(execution_id, request, unbounded, workspace, session=session)
            )
            profile = spec.profile  # with the read-only mounts it asked for (a CI job's externals): what launches
            if set(profile.egress_allow) != set(gate.sanitized.egress or ()):
                # the profile changed while its request waited (an approval): never hosts nobody decided about
                raise SandboxUnavailable(
                    f"profile {profile.name!r} now reaches other hosts than its request was decided with; ask again"
                )
            if profile.network == "allowlist":
                self._check_egress(profile, spec)
            if session:
                self._check_session(profile, spec)
        except OrchestratorError as err:
            raise await refused_before_start(err) from None

        began = time.monotonic()
        telemetry = self.evidence.telemetry

        async def record(event: EventType, **fields: Any) -> None:
            if event is EventType.CONTAINER_STARTED:
                telemetry.sandbox_started(time.monotonic() - began)
            elif event is EventType.END_UNCONFIRMED:
                telemetry.end_unconfirmed(profile.name)
            await records.record(event, profile_hash=profile.profile_hash, **fields)

        redactor = Redactor(literals=request.env.values())
        try:
            if isinstance(request, ShellExecRequest) and request.script is not None:
                # exactly the content the gate decided on, where the argv names it (before the snapshot: the
                # run's setup, not one of its side effects)
                await asyncio.to_thread(
                    place_script,
                    workspace,
                    request.script,
                    root=profile.workspace.container_path,
                    workdir=spec.workdir,
                    writable=profile.workspace.mode == "rw",
                )
            before = await asyncio.to_thread(snapshot, workspace)  # the workspace before the sandbox exists
        except OrchestratorError as exc:
            raise await refused_before_start(exc) from None
        except OSError as exc:
            unreadable = InputInvalid(f"workspace {workspace} cannot be read: {exc.strerror or exc}")
            raise await refused_before_start(unreadable) from None
        run_context = RunContext(
            profile=profile.name,
            tenant=gate.sanitized.context.tenant,
            tool=gate.sanitized.tool,
            ci_repository=gate.sanitized.context.ci.repository if gate.sanitized.context.ci is not None else None,
        )

        def measured(end_data: dict[str, Any]) -> None:
            """The end record is on disk: what the run used goes to the service's store and its metrics (a bug
            here is logged, never in the way of the run: its end is on the record already)."""
            try:
                usage = usage_from_end(execution_id, run_context, end_data, ended_at=time.time())
            except Exception as exc:
                log.warning("the usage of %s could not be built: %s", execution_id, type(exc).__name__)
                return
            if usage is not None:
                GuardedObserver(observer).measured(usage)
                telemetry.run_measured(usage)

        failed = functools.partial(
            _failed_while_running,
            records,
            profile=profile,
            before=before,
            workspace=workspace,
            redactor=redactor,
            measured=measured,
        )
        pool_key = self._pool_key(pool_spec, gate.sanitized.context.tenant)
        try:  # a claim never waits for a fill, but may ask the engine whether a ready sandbox still waits
            pooled = None if pool_key is None or self.pool is None else await self.pool.claim(pool_key)
        except asyncio.CancelledError as cancel:  # nothing ran: its end is on the record
            cancelled = ExecutionCancelled(cancel_reason(cancel, "cancelled before its sandbox was ready"))
            await despite_cancellation(self.reservations.charge(auth.reservations, records, None, ran=False))
            await despite_cancellation(records.refuse(cancelled, status="cancelled", profile_hash=profile.profile_hash))
            raise
        handed: PooledSandbox | None = None
        # From the begin record on, every way out ends with an end record: execution_finished below,
        # run_failed here (the begin record too may be interrupted once queued: it is written all the same)
        try:
            # the begin record is on disk before the sandbox is created (or, pooled, used)
            await record(
                EventType.EXECUTION_STARTED,
                durable=True,
                status="starting",
                data={
                    "image": profile.image,
                    "runtime": profile.runtime,
                    "profile": profile.name,
                    "seccomp_sha256": profile.seccomp_sha256,
                    # the limits it runs with: what its usage is held against even if no end record follows
                    # (a controller that died: the abandoned record after it says only that)
                    "limits": run_limits(profile).to_json(),
                    "workdir": spec.workdir,
                    "deadline_unix": round(spec.deadline_unix),
                    "env_keys": sorted(spec.env),
                    **({} if pooled is None else {"pooled": _pooled_fields(pooled)}),
                    **({"egress": list(profile.egress_allow)} if profile.network == "allowlist" else {}),
                    **step_fields(gate.sanitized),
                },
            )
            if pooled is not None and self.pool is not None:
                await self.pool.claimed(pooled, execution_id)
            GuardedObserver(observer).running(execution_id, profile)
            handed, pooled = pooled, None  # from here on run_in_sandbox owns it: its teardown destroys it
            route = None
            names: Callable[[str], str] = str
            if profile.network == "allowlist":  # its connections are recorded from the first one on
                names = NameRedactor(request.env.values())
                route = self.egress.open(execution_id, profile.egress_allow, records.record_nowait, names)
            try:
                with THIS_PROCESS.running(execution_id, workspace):
                    outcome = await run_in_sandbox(
                        self.backend,
                        dataclasses.replace(spec, egress=route),
                        record,
                        redactor=redactor,
                        workspace=workspace,
                        before=before,
                        on_output=on_output,
                        on_started=on_started,
                        on_capped=on_capped,
                        pooled=handed,
                        egress_proxy=None if route is None else self.egress.proxy,
                    )
            finally:
                if route is not None:  # the sandbox is gone, each connection recorded: the totals, before the end
                    self.egress.close(execution_id)
        except asyncio.CancelledError as cancel:
            reason = cancel_reason(cancel, "cancelled while running")
            await despite_cancellation(self.reservations.charge(auth.reservations, records, None, ran=True))
            await despite_cancellation(failed(ExecutionCancelled(reason)))
            raise
        except OrchestratorError as err:
            # a sandbox that never started ran nothing; any other failure may have used all it was allowed
            ran = not isinstance(err, SandboxStartFailed)
            await self.reservations.charge(auth.reservations, records, None, ran=ran)
            raise await failed(err) from None
        except Exception as exc:  # a bug: still an end record, never a silent begin-only execution
            log.warning("execution %s failed unexpectedly: %s: %s", execution_id, type(exc).__name__, exc)
            await self.reservations.charge(auth.reservations, records, None, ran=True)
            raise await failed(InternalError(f"unexpected {type(exc).__name__} while running")) from exc
        except (KeyboardInterrupt, SystemExit):  # leaving the interpreter: the end record first
            await despite_cancellation(failed(InternalError("interrupted while running")))
            raise
        finally:
            if pooled is not None and self.pool is not None:  # claimed, never used: never handed out again
                self.pool.discard(pooled, "unused")
            if handed is not None:  # its run destroyed it
                SandboxPool.release(handed)
            if pool_key is not None and self.pool is not None:
                # the key filled again once this run is over: a fill beside it would slow it down (the
                # engine's work is most of a run), and the next command of an agent comes later than that
                self.pool.want(pool_key, pool_spec)  # the route is the run's own: never in the spec kept

        try:
            error = outcome.error
            limit = _limiting_bound(auth, profile, own_timeout_s)
            if isinstance(error, SandboxTimeout) and limit is not None:
                # stopped where a bound's budget ended, not at its own timeout
                error = SandboxGrantLimit(
                    f"stopped after {profile.wall_timeout_s:g}s: what grant {limit.grant_id} had left for it"
                    f" (its own timeout: {own_timeout_s:g}s)",
                    details={"grant_id": limit.grant_id},
                )
            if error is None:
                error = restriction(outcome, profile, route, execution_id, names)
                if error is not None:  # a retry of it is linked to what it was refused
                    self.restricted.add(execution_id, request.tenant, error)
            if error is None and outcome.truncated:
                error = SandboxOutputLimit("output passed the profile's cap and was truncated")
            used = functools.partial(
                cover.used,
                cpu_seconds=outcome.cpu_seconds,
                output_bytes=outcome.kept_bytes,
                wall_seconds=outcome.duration_ms / 1000,
            )
            await despite_cancellation(self.reservations.charge(auth.reservations, records, used, ran=True))
            # bounded in advance, and never raising: the end record is what makes the run accountable
            end = finished_fields(outcome, profile, error, stopped_by=None if stopped_by is None else stopped_by())
            try:
                await despite_cancellation(record(EventType.EXECUTION_FINISHED, durable=True, **end))
            except asyncio.CancelledError:
                # the command ran to its end and its end record is on disk: a cancel now comes too late
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
            measured(end["data"])
            return ExecutionResult(auth, outcome, error)
        finally:  # its init reported its end: the engine's confirmation and the removal follow the end record
            if outcome.confirm is not None:
                self.confirmations.start(outcome.confirm)

    def _check_egress(self, profile: ResolvedProfile, spec: LaunchSpec) -> None:
        """SANDBOX.UNAVAILABLE when a run that may reach hosts cannot have the proxy as its only route here:
        never a wider network instead, and never the run without what it was allowed. Its command is launched
        into a sandbox started waiting once the proxy is in its reach: a backend that cannot start one so
        (``Capabilities.can_pool``) gives no egress, whatever else it could."""
        if spec.session or spec.tty:
            raise SandboxUnavailable("egress is for one-shot commands without a terminal in this release")
        problem = self.backend.egress_problem(profile)
        if problem is None and not self.backend.capabilities.can_pool:
            problem = f"the {type(self.backend).__name__} cannot start a sandbox waiting for its command, as configured"
        if problem is not None:
            raise SandboxUnavailable(f"profile {profile.name!r} reaches hosts through the egress proxy, but {problem}")

    def _check_session(self, profile: ResolvedProfile, spec: LaunchSpec) -> None:
        """POLICY.DENIED when the profile takes no such session; SANDBOX.UNAVAILABLE when the backend takes none."""
        check_session_allowed(profile, spec.argv)
        if not self.backend.capabilities.sessions:
            raise SandboxUnavailable(
                f"the {type(self.backend).__name__} cannot run interactive sessions (it takes no input "
                "while a sandbox runs): never a session without its input"
            )

    def _pool_key(self, spec: LaunchSpec, tenant: str) -> PoolKey | None:
        """The pool key of this run, when it may take a pre-started sandbox: no terminal, its profile allows
        it, the config's pool is on, and what it runs fits a launch (else it would fail pooled where it runs
        cold). A session's key is its own (its profile, resolved for a session, has the session's lifetime)."""
        if self.pool is None or spec.tty or not spec.profile.pool_enabled:
            return None
        if not self.backend.fits_launch(spec):
            return None
        try:
            found = os.stat(spec.workspace.local_path)
        except OSError:
            return None
        # the directory itself, not only its path: a workspace replaced since a sandbox was filled with it
        # (its bind mount is the old directory) is another key
        workspace_id = (found.st_dev, found.st_ino)
        return PoolKey(spec.profile.name, spec.profile.profile_hash, spec.workspace.local_path, workspace_id, tenant)

    def prestart(self, raw: Any, *, workspace: Path) -> bool:
        """Have the pool start a sandbox for runs like ``raw`` in ``workspace`` now (see Orchestrator.prestart)."""
        if self.pool is None:
            return False
        try:
            request = parse_request(raw)
            workspace = Path(workspace).resolve()
            # what a run would check before anything starts: never a sandbox a run would be refused
            self.check_workspace(workspace)
            refuse_unavailable_escalations(request)
            # an exec_command opens a session: its key is a session's (its profile resolved for a session)
            session = isinstance(request, ExecCommandRequest)
            profile = self.profiles.resolve(request, session=session)
            spec = launch_spec(new_execution_id(), request, profile, workspace, session=session)
            if session:  # a session this profile or backend refuses never gets a sandbox either
                self._check_session(profile, spec)
        except OrchestratorError:
            return False
        key = self._pool_key(spec, request.tenant)
        if key is None:
            return False
        self.pool.want(key, spec, announced=True)
        return True

    def check_workspace(self, workspace: Path) -> None:
        """``governing.check_workspace`` for a run here: what governs runs, and the backend's protected paths."""
        check_workspace(
            workspace, governing=self.governing_paths(), protected=self.backend.capabilities.protected_paths
        )

    def governing_paths(self) -> list[Governing]:
        return governing_paths(
            evidence=self.evidence.writer.path, profile_dirs=self.profiles.registry.search_path, extra=self.governing
        )

    async def aclose(self) -> None:
        await self.confirmations.aclose()
        if self.pool is not None:
            await self.pool.aclose()
        await self.egress.aclose()


async def _failed_while_running(
    records: ExecutionRecorder,
    err: OrchestratorError,
    *,
    profile: ResolvedProfile,
    before: Snapshot,
    workspace: Path,
    redactor: Redactor,
    measured: Callable[[dict[str, Any]], None],
) -> OrchestratorError:
    """The end record of an execution that started but did not finish: its code, and what it changed in the
    workspace so far (the sandbox itself was torn down by the executor; set-id bits it left are removed here
    too); then what it used (its limits, how it ended: nothing of the command's own) is ``measured``."""
    try:
        effects = failed_side_effects(*await workspace_changes(before, workspace, redactor, profile))
    except Exception as exc:  # a bug: never in the way of the end record
        log.warning("side effects of %s unknown: %s", records.execution_id, type(exc).__name__)
        effects = {"error": f"unknown: {type(exc).__name__}", "complete": False}
    data = {"side_effects": effects, "end_cause": failed_cause(err).value, "limits": run_limits(profile).to_json()}
    refused = await records.refuse(
        err,
        status="cancelled" if isinstance(err, ExecutionCancelled) else "error",
        profile_hash=profile.profile_hash,
        data=data,
    )
    measured(data)
    return refused


def step_fields(sanitized: SanitizedRequest) -> dict[str, object]:
    """A CI step's begin record: its job (the CI context and its job_key, the same for every step of the job
    run) and the script it runs (path, size, sha256; never the content)."""
    fields: dict[str, object] = {}
    if sanitized.context.ci is not None:
        fields["ci"] = sanitized.context.ci.model_dump(mode="json", exclude_none=True)
    if sanitized.script is not None:
        fields["script"] = sanitized.script.model_dump(mode="json", exclude_none=True)
    return fields


def _pooled_fields(pooled: PooledSandbox) -> dict[str, object]:
    """What the begin record says of a pre-started sandbox: its own records' id and when it was made."""
    return {
        "pool_id": pooled.pool_id,
        "sandbox_id": pooled.handle.sandbox_id,
        "filled_at": datetime.fromtimestamp(pooled.filled_unix, UTC).isoformat(),
    }


def _error_body(error: OrchestratorError) -> ErrorBody:
    """An execution's error as its result says it: the details only where they are the answer (what a
    restricted run was denied, and the escalation a retry may ask for)."""
    if isinstance(error, SandboxRestricted):
        return ErrorBody.of(error)
    return ErrorBody(code=error.code, message=error.message)


@dataclass(frozen=True, slots=True)
class ExecutionResult:
    authorization: Authorization
    outcome: RunOutcome
    error: OrchestratorError | None

    @property
    def ok(self) -> bool:
        """The command ran to exit 0 within every limit, and the workspace record is complete."""
        o = self.outcome
        return o.exit_code == 0 and not self.sandbox_failed

    @property
    def sandbox_failed(self) -> bool:
        """The run failed for a reason of the sandbox's, not the command's own exit status (CLI: 125)."""
        o = self.outcome
        return (
            o.exit_code is None
            or o.timed_out
            or o.oom_killed
            or o.pids_limit_killed
            or o.over_budget
            or not o.side_effects_complete
        )

    def to_wire(self) -> RunResult:
        o = self.outcome
        return RunResult(
            ok=self.ok,
            execution_id=self.authorization.execution_id,
            decision=self.authorization.gate.decision.decision.value,
            exit_code=o.exit_code,
            stdout=o.stdout.decode("utf-8", "replace"),
            stderr=o.stderr.decode("utf-8", "replace"),
            truncated=o.truncated,
            timed_out=o.timed_out,
            oom_killed=o.oom_killed,
            duration_ms=o.duration_ms,
            side_effects=o.side_effects.summary() if o.side_effects is not None else None,
            error=_error_body(self.error) if self.error else None,
        )

    def to_json(self) -> dict[str, Any]:
        """The `sandboxctl run --json` shape."""
        return self.to_wire().model_dump(mode="json")


def _limiting_bound(auth: Authorization, profile: ResolvedProfile, own_timeout_s: float) -> Reservation | None:
    """The bound whose reservation set the run's timeout, when that is shorter than the run's own (not a
    rounding of the same deadline); None when its own timeout, or a grant that answered its ask, set it."""
    if profile.wall_timeout_s >= own_timeout_s - 0.001:
        return None
    for bound in auth.bounds:
        if bound.timeout_s(profile.cpus) <= profile.wall_timeout_s + 0.001:
            return bound
    return None
