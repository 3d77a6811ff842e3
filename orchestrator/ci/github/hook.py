"""The container-hook protocol answered by the controller: each command of the runner becomes CI job operations.

``prepare_job`` opens a CI job (``ci.jobs``): its image checked against the caps, what no sandbox is given
refused (``CI.UNSUPPORTED``: services, port mappings, user volumes, create options), the runner's paths inside
the job container (``systemMountVolumes``: ``/__w`` is the runner's work directory, ``/github/home`` its
``_temp/_github_home`` …) mapped onto the job's workspace. ``run_script_step`` and ``run_container_step`` are
each one governed execution in a fresh sandbox: the runner's script is read from the workspace (the runner
wrote it there) and decided on by its content; what the gate cannot read (a JavaScript action's program, a
container step's image) is allowed only by a rule on CI context. ``cleanup_job`` closes the job.

Values the runner sets that change which code runs (``PATH`` from ``prependPath``, ``HOME`` …: never a request's
environment) are written as ``export`` lines at the head of the script the step runs, where the gate reads them
with the rest; a step that has no shell script gets a small one that exports them and ``exec``s its program.

The answer streams: the step's output as produced, then its end (exit code, and the response file's content).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import logging
import posixpath
import re
import shlex
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from orchestrator.ci.github.protocol import (
    CleanupJobCall,
    Container,
    ContainerStepCall,
    HookCall,
    JobState,
    Mount,
    PrepareJobCall,
    ScriptStepCall,
)
from orchestrator.ci.jobs import CiJobs
from orchestrator.domain.ci import ci_from_github
from orchestrator.domain.ci_jobs import CiJobView
from orchestrator.domain.errors import CiUnsupported, InputInvalid, NotFound, OrchestratorError, SandboxUnavailable
from orchestrator.domain.principal import Principal
from orchestrator.domain.requests import MAX_SCRIPT_BYTES, ScriptFile
from orchestrator.domain.wire import ExecutionState, ExecutionView, OutputChunk
from orchestrator.pipeline import externals
from orchestrator.pipeline.script_file import read_workspace_file
from orchestrator.profiles.models import is_code_loading_env

#: the runner's work directory inside job containers (``ContainerInfo.cs``: /__w)
RUNNER_WORK = "/__w"
RUNNER_EXTERNALS = "/__e"
ENGINE_SOCKET = "/var/run/docker.sock"
#: shells whose scripts the gate reads, and that read ``export`` lines
_SHELLS = frozenset({"bash", "sh"})
#: SANDBOX_EXTERNALS: the deployment put the runner's externals beside the work directory (``pipeline.externals``)
_ON, _OFF = frozenset({"1", "true", "yes"}), frozenset({"", "0", "false", "no"})
#: what the MAC of a job's state is keyed with: the evidence's input key, for this use only (never its digests')
_STATE_KEY_LABEL = b"sandbox-orchestrator/ci/github/job-state/v1"

log = logging.getLogger(__name__)

Event = dict[str, Any]


def _clean(path: str) -> str:
    # the runner may write "//Users/…" (examples/run-container-step.json); POSIX keeps a leading "//"
    return posixpath.normpath(re.sub("/+", "/", path)) if path else path


@dataclass(frozen=True)
class PathMap:
    """The runner's paths inside a job container, onto the job's workspace: (runner path, sandbox path),
    longest first, and the runner paths no sandbox has (reached only by a refusal)."""

    pairs: tuple[tuple[str, str], ...]
    missing: tuple[str, ...] = ()

    def __call__(self, value: str, what: str) -> str:
        for missing in self.missing:
            if value == missing or value.startswith(missing + "/"):
                raise CiUnsupported(
                    f"{what} uses {missing}, which no sandbox of this job has"
                    + (
                        " (the runner's externals: the deployment copies them to <service.workspaces>/<tenant>/"
                        ".ci-externals/<workspace> and sets SANDBOX_EXTERNALS=1 on the runner, docs/ci.md)"
                        if missing == RUNNER_EXTERNALS
                        else ""
                    ),
                    details={"fields": [what]},
                )
        for runner, sandbox in self.pairs:
            if value == runner or value.startswith(runner + "/"):
                return sandbox + value[len(runner) :]
        return value

    def words(self, values: list[str], what: str) -> list[str]:
        return [self(v, what) for v in values]


def path_map(mounts: list[Mount], *, root: str, externals: bool, notices: list[str]) -> PathMap:
    """The map of a job's ``systemMountVolumes``: the runner's work directory (the mount at /__w) is the job's
    workspace at ``root``; a mount of a directory below it is that directory there; the runner's externals are
    at /__e when the deployment put them beside the work directory (``externals``: mounted read-only there,
    ``pipeline.externals``), or missing; the engine's socket is never given."""
    work = next((_clean(m.source) for m in mounts if _clean(m.target) == RUNNER_WORK), None)
    pairs: dict[str, str] = {RUNNER_WORK: root}
    missing: list[str] = []
    for mount in mounts:
        source, target = _clean(mount.source), _clean(mount.target)
        if target == RUNNER_WORK:
            continue
        if work is not None and (source == work or source.startswith(work + "/")):
            pairs[target] = root + source[len(work) :]
        elif target == ENGINE_SOCKET:
            notices.append(f"the engine's socket ({ENGINE_SOCKET}) is never given to a sandbox: not mounted")
        elif target == RUNNER_EXTERNALS and externals:
            pairs[target] = RUNNER_EXTERNALS
        else:
            missing.append(target)
            notices.append(f"{target} (the runner's {source}) is not on the job's storage: a step using it is refused")
    ordered = tuple(sorted(pairs.items(), key=lambda kv: -len(kv[0])))
    return PathMap(ordered, tuple(missing))


def work_file(mounts: list[Mount], path: str | None) -> list[str] | None:
    """A file of the runner's work directory (the source of the mount at /__w) as parts below it, where the job's
    workspace holds it when the two are the same storage; None when ``path`` is not in that directory."""
    work = next((_clean(m.source) for m in mounts if _clean(m.target) == RUNNER_WORK), None)
    if work is None or not path:
        return None
    path, prefix = _clean(path), work.rstrip("/") + "/"
    if not path.startswith(prefix) or len(path) == len(prefix):
        return None
    return path[len(prefix) :].split("/")


def _command_line(entry: str, words: list[str]) -> list[str]:
    """The argv the runner means: it splits its argument string at spaces (``ContainerHookManager.cs``:
    ``entryPointArgs.Split(' ')``) and quotes a JavaScript action's path (``NodeScriptActionHandler.cs``:
    ``"\"{0}\""``), so the words are joined and split again as a shell would, as the hooks repository's own docker
    hook does (``fixArgs``: ``shlex.split(args.join(' '))``)."""
    try:
        argv = shlex.split(" ".join([entry, *words]))
    except ValueError as err:
        raise InputInvalid(
            f"args.entryPointArgs: not a command line ({err})", details={"fields": ["args.entryPointArgs"]}
        ) from None
    if not argv:
        raise InputInvalid("args.entryPoint: nothing to run", details={"fields": ["args.entryPoint"]})
    return argv


def _inside(path: str, root: str) -> str:
    """A directory of the workspace as the request names it: relative to the mount (the gate reads an absolute
    working directory as one that may leave the workspace)."""
    if path == root:
        return "."
    if path.startswith(root + "/"):
        return path[len(root) + 1 :]
    raise CiUnsupported(f"args.workingDirectory {path!r} is not in the job's workspace ({root})")


def _refuse_options(container: Container, what: str) -> None:
    """CI.UNSUPPORTED for each container option no sandbox is given (never silently dropped)."""
    refused = []
    if container.port_mappings:
        refused.append(f"{what}.portMappings (a sandbox has no network to publish)")
    if container.user_mount_volumes:
        refused.append(f"{what}.userMountVolumes (a sandbox sees its workspace only)")
    if container.create_options and container.create_options.strip():
        options = container.create_options.strip()[:80]
        refused.append(f"{what}.createOptions ({options!r}: limits come from the profile)")
    if container.dockerfile:
        refused.append(f"{what}.dockerfile (nothing is built: name an image the config allows)")
    if refused:
        raise CiUnsupported("not given to a sandbox: " + "; ".join(refused), details={"fields": [what]})


@dataclass
class _HookJob:
    """What the protocol keeps of a job between commands (also handed back by the runner in its state: JobState)."""

    job: CiJobView
    paths: PathMap
    env: dict[str, str]
    #: the profile's own environment: a runner value equal to it (HOME) is no change
    fixed: dict[str, str]
    #: the runner's externals (beside the work directory, checked): every step has them read-only at /__e
    externals: bool = False


def _externals_flag(value: str | None) -> bool:
    """SANDBOX_EXTERNALS: 1/true when the deployment put the runner's externals beside its work directory
    (``pipeline.externals``). The old value, a directory of the work directory, is refused: any step of any job
    can write there, so a later job would run a planted node as the trusted one."""
    if value is None or value.strip().lower() in _OFF:
        return False
    if value.strip().lower() in _ON:
        return True
    raise CiUnsupported(
        f"SANDBOX_EXTERNALS={value[:64]!r}: the runner's externals are never taken from the work directory (any"
        " step can write it). Copy them to <service.workspaces>/<tenant>/.ci-externals/<workspace>, beside the work"
        " directory where no sandbox reaches, and set SANDBOX_EXTERNALS=1 (docs/ci.md)",
        details={"fields": ["env.SANDBOX_EXTERNALS"]},
    )


def _prelude(code_loading: dict[str, str], prepend: list[str]) -> str:
    """export lines for the values a request's environment never carries (read by the gate with the script)."""
    lines = [f"export {name}={shlex.quote(value)}" for name, value in sorted(code_loading.items())]
    if prepend:
        lines.append(f'export PATH={shlex.quote(":".join(prepend))}"${{PATH:+:$PATH}}"')
    return "".join(line + "\n" for line in lines)


class GithubHook:
    """Answers the hook's commands for a principal (the runner's token)."""

    def __init__(self, jobs: CiJobs) -> None:
        self.jobs = jobs
        self._jobs: dict[str, _HookJob] = {}
        jobs.on_close(lambda job_id: self._jobs.pop(job_id, None))  # closed however: nothing more of it is kept

    async def invoke(self, call: HookCall, principal: Principal) -> AsyncIterator[Event]:
        """The events of one hook command: ``{"stream", "data"}`` as produced, then ``{"exit_code", "response"}``.
        A refusal before anything ran raises (the caller answers it as an error)."""
        command = call.root
        events = (
            self._prepare(command, principal)
            if isinstance(command, PrepareJobCall)
            else self._cleanup(command, principal)
            if isinstance(command, CleanupJobCall)
            else self._step(command, principal)
        )
        async for event in events:
            yield event

    # -- prepare_job / cleanup_job ---------------------------------------------------------------------
    async def _prepare(self, call: PrepareJobCall, principal: Principal) -> AsyncIterator[Event]:
        args, env = call.input.args, call.env
        if args.container is None or not args.container.image:
            raise CiUnsupported(
                "the job has no container: its steps would run on the runner itself, outside any sandbox (give the"
                " job a container:, and set ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER=true on the runner)",
                details={"fields": ["args.container"]},
            )
        if args.services:
            names = ", ".join(str(s.get("contextName") or s.get("image") or "?")[:64] for s in args.services)
            raise CiUnsupported(
                f"services: ({names}) are not run: a sandbox has no network to reach them",
                details={"fields": ["args.services"]},
            )
        container = args.container
        _refuse_options(container, "args.container")
        workspace = env.SANDBOX_WORKSPACE or env.RUNNER_NAME
        ci = ci_from_github(env.given(), job_id=env.RUNNER_NAME)
        notices: list[str] = []
        if container.registry is not None:
            notices.append("the job container's registry credentials are not used: nothing is ever pulled")
        opened: dict[str, object] = {"ci": ci.model_dump(mode="json", exclude_none=True), "workspace": workspace}
        opened.update(image=container.image, profile=env.SANDBOX_PROFILE)
        wants_externals = _externals_flag(env.SANDBOX_EXTERNALS)  # before the job is opened: nothing to undo
        job = await self.jobs.open(opened, principal)  # a job it took the workspace over from is forgotten (on_close)
        try:
            await self._check_shared(call, job)
            if wants_externals:
                await asyncio.to_thread(externals.check, self.jobs.workspace_of(job.job_id))
            paths = path_map(
                container.system_mount_volumes, root=job.container_path, externals=wants_externals, notices=notices
            )
            fixed = self.jobs.profiles.named(job.profile).env
            kept = _HookJob(job, paths, dict(container.environment_variables), fixed, wants_externals)
            state = self._signed(kept)
            self._jobs[job.job_id] = kept
        except BaseException:
            # refused or failed however (CI.UNSUPPORTED, SANDBOX.UNAVAILABLE, an OSError, a state that does not
            # validate, the caller gone): no job is left open; the workspace, when it made one, goes with it
            self._jobs.pop(job.job_id, None)
            try:
                await asyncio.shield(self.jobs.close(job.job_id, principal))
            except Exception:
                log.exception("closing CI job %s after its prepare_job failed", job.job_id)
            raise
        for notice in notices:
            yield {"stream": "stderr", "data": f"sandbox: {notice}\n"}
        yield {
            "stream": "stdout",
            "data": f"sandbox: job {job.job_id}: image {job.image}, profile {job.profile}, workspace {job.workspace}"
            f" at {job.container_path}\n",
        }
        response = {
            "state": state.model_dump(mode="json"),
            "context": {"container": {"id": job.job_id, "network": "none"}, "services": []},
            # the images this controller runs are glibc-based (Debian): the runner picks its node build by this
            "isAlpine": False,
        }
        yield {"exit_code": 0, "response": response}

    def _signed(self, kept: _HookJob) -> JobState:
        """The state handed to the runner: what the steps need of prepare_job's input, without /__e (rebuilt from
        ``externals``, checked again), MAC'd with a key only this controller has (``_mac``)."""
        state = JobState(
            job=kept.job.job_id,
            paths=[(runner, sandbox) for runner, sandbox in kept.paths.pairs if runner != RUNNER_EXTERNALS],
            missing=list(kept.paths.missing),
            env=dict(kept.env),
            externals=kept.externals,
        )
        return state.model_copy(update={"mac": self._mac(state)})

    def _mac(self, state: JobState) -> str:
        """HMAC-SHA256 of the state's canonical JSON (job, paths, missing, env, externals) under a key derived from
        the evidence's input key (kept beside the evidence, 0600: the controller's alone, the same after a
        restart)."""
        input_key = self.jobs.manager.orchestrator.gate.input_key
        if input_key is None:  # the service always has one (Authorizer): never a state nobody can check
            raise SandboxUnavailable("the controller has no input key to sign a CI job's state with")
        key = hmac.new(input_key(), _STATE_KEY_LABEL, hashlib.sha256).digest()
        body = state.model_dump(mode="json", include={"job", "paths", "missing", "env", "externals"})
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hmac.new(key, canonical.encode("ascii"), hashlib.sha256).hexdigest()

    async def _check_shared(self, call: PrepareJobCall, job: CiJobView) -> None:
        """CI.UNSUPPORTED unless the runner's work directory is the job's workspace: the runner made the (empty)
        response file in it just before it ran the hook, so the workspace holds that file when both are the same
        storage. Otherwise (a runner's volume that is not the workspace claim, another sub-path of it) no step
        would find the script the runner wrote, and the runner would never see what steps write for it
        (GITHUB_ENV, GITHUB_OUTPUT): refused at prepare_job, never run with a half-shared job."""
        container = call.input.args.container
        assert container is not None
        mounts, response = container.system_mount_volumes, call.input.response_file
        parts = work_file(mounts, response)
        place = f"{job.tenant}/{job.workspace} of the controller's workspaces"
        if parts is None:
            raise CiUnsupported(
                f"the runner's work directory cannot be matched with the job's workspace ({place}): the response file"
                " is not in the directory the runner mounts at /__w",
                details={"fields": ["input.responseFile"]},
            )
        try:
            await asyncio.to_thread(read_workspace_file, self.jobs.workspace_of(job.job_id), parts, limit=1 << 16)
        except InputInvalid:
            raise CiUnsupported(
                f"the runner's work directory is not the job's workspace ({place}): the response file the runner"
                f" made in it ({'/'.join(parts)}) is not there. The runner's _work must be that directory on"
                " storage the controller sees too (Kubernetes: the workspace claim, mounted in the runner pod with"
                " subPathExpr <tenant>/$(POD_NAME) and SANDBOX_WORKSPACE=$(POD_NAME); docs/ci.md)",
                details={"fields": ["input.responseFile"]},
            ) from None

    async def _job_of(self, state: JobState, principal: Principal) -> _HookJob:
        """The job's facts: kept since prepare_job, or (a controller restarted since) rebuilt from the state the
        runner handed back, checked: the job is the caller's and open, every sandbox path inside its workspace."""
        view = self.jobs.get(state.job, principal)  # NOT_FOUND for another tenant's job, or one never opened
        kept = self._jobs.get(state.job)
        if kept is not None:
            return kept
        if state.paths is None:
            raise NotFound(f"no CI job {state.job} here (prepared by an older controller that kept its facts itself)")
        if state.mac is None or not hmac.compare_digest(state.mac, self._mac(state)):
            raise InputInvalid(
                "input.state: the state was not made by this controller (its job, paths, environment or externals"
                " differ from what prepare_job answered)",
                details={"fields": ["input.state"]},
            )
        root = view.container_path
        pairs = list(state.paths)
        for runner_path, sandbox_path in pairs:
            inside = posixpath.normpath(sandbox_path)
            if inside != root and not inside.startswith(root.rstrip("/") + "/"):
                raise InputInvalid(
                    f"input.state.paths: {sandbox_path!r} (for {runner_path!r}) is outside the job's workspace {root}",
                    details={"fields": ["input.state.paths"]},
                )
        if state.externals:  # never a path of the state: rebuilt here, the directory checked again
            await asyncio.to_thread(externals.check, self.jobs.workspace_of(state.job))
            pairs.append((RUNNER_EXTERNALS, RUNNER_EXTERNALS))
        kept = _HookJob(
            view,
            PathMap(tuple(sorted(pairs, key=lambda pair: -len(pair[0]))), tuple(state.missing)),
            dict(state.env),
            self.jobs.profiles.named(view.profile).env,
            state.externals,
        )
        if view.state == "open":
            self._jobs[state.job] = kept
        return kept

    async def _cleanup(self, call: CleanupJobCall, principal: Principal) -> AsyncIterator[Event]:
        job_id = (call.input.state or {}).get("job")
        if not isinstance(job_id, str):
            yield {"stream": "stderr", "data": "sandbox: no job to clean up (prepare_job did not open one)\n"}
            yield {"exit_code": 0, "response": None}
            return
        self._jobs.pop(job_id, None)
        with contextlib.suppress(NotFound):
            view = await self.jobs.close(job_id, principal)
            yield {"stream": "stdout", "data": f"sandbox: job {job_id} closed after {len(view.steps)} step(s)\n"}
        yield {"exit_code": 0, "response": None}

    # -- steps ---------------------------------------------------------------------------------------------
    async def _step_request(self, call: ScriptStepCall | ContainerStepCall, kept: _HookJob) -> dict[str, Any]:
        """The job step's request (``CiStepRequest``) for a run_script_step or run_container_step."""
        paths = kept.paths
        root = kept.job.container_path
        image: str | None = None
        args = call.input.args
        if isinstance(args, Container):
            _refuse_options(args, "args")
            if not args.image:
                raise CiUnsupported("args.image: a container step without an image", details={"fields": ["args.image"]})
            if not args.entry_point:
                raise CiUnsupported(
                    "args.entryPoint: a container step must name its entrypoint (the image's own is not read)",
                    details={"fields": ["args.entryPoint"]},
                )
            image, entry = args.image, args.entry_point
            step_env = args.environment_variables
        else:
            entry = args.entry_point
            step_env = {**kept.env, **args.environment_variables}
        words, prepend, workdir = args.entry_point_args, args.prepend_path, args.working_directory
        program, *rest = _command_line(entry, words)
        argv = [paths(program, "args.entryPoint"), *paths.words(rest, "args.entryPointArgs")]
        mapped_env = {k: paths(v, f"args.environmentVariables.{k}") for k, v in step_env.items()}
        plain = {k: v for k, v in mapped_env.items() if not is_code_loading_env(k)}
        code_loading = {k: v for k, v in mapped_env.items() if is_code_loading_env(k) and kept.fixed.get(k) != v}
        prelude = _prelude(code_loading, paths.words(prepend, "args.prependPath"))
        script = await self._script(argv, kept, root, prelude)
        if script is None and prelude:
            wrapper = f"{root}/_temp/_sandbox/{uuid.uuid4().hex}.sh"
            content = prelude + "exec " + shlex.join(argv) + "\n"
            script = ScriptFile.of(wrapper, content)
            argv = ["bash", "--noprofile", "--norc", "-e", wrapper]
        env = call.env
        ci_step = env.GITHUB_ACTION
        repository, ref = env.GITHUB_ACTION_REPOSITORY, env.GITHUB_ACTION_REF
        action = None if not repository else f"{repository}@{ref}" if ref else repository
        request: dict[str, Any] = {
            "step": ci_step,
            "action": action,
            "argv": argv,
            "env": plain,
            "cwd": _inside(paths(workdir, "args.workingDirectory"), root) if workdir else None,
            "image": image,
            "externals": kept.externals or None,
        }
        if script is not None:
            request["script"] = script.model_dump(mode="json")
        return {k: v for k, v in request.items() if v is not None}

    async def _script(self, argv: list[str], kept: _HookJob, root: str, prelude: str) -> ScriptFile | None:
        """The script a shell step runs (the runner wrote it into the workspace), with the prelude at its head;
        None when the argv runs no file of the workspace's _temp (or runs one with a program that is no shell
        while a prelude is needed: it then gets a wrapper)."""
        temp = f"{root}/_temp/"
        candidates = [w for w in argv[1:] if w.startswith(temp) and not w.startswith("-")]
        if not candidates:
            return None
        path = candidates[-1]
        shell = posixpath.basename(argv[0]) in _SHELLS
        if prelude and not shell:
            return None
        job_path = self.jobs.workspace_of(kept.job.job_id)
        parts = posixpath.relpath(path, root).split("/")
        content = await asyncio.to_thread(read_workspace_file, job_path, parts, limit=MAX_SCRIPT_BYTES - len(prelude))
        return ScriptFile(path=path, content_base64=base64.b64encode(prelude.encode() + content).decode("ascii"))

    async def _step(self, call: ScriptStepCall | ContainerStepCall, principal: Principal) -> AsyncIterator[Event]:
        kept = await self._job_of(call.input.state, principal)
        request = await self._step_request(call, kept)
        view = await self.jobs.step(kept.job.job_id, request, principal)
        yield {"execution_id": view.execution_id}  # the hook skips it: the answer starts once the step is taken
        async for event in self.follow(view, principal):
            yield event

    async def follow(self, view: ExecutionView, principal: Principal) -> AsyncIterator[Event]:
        """The execution's output as produced, then its end; the execution is cancelled when the caller goes
        away before it ended (the runner's SIGINT on a step's timeout ends the hook, and its connection)."""
        manager = self.jobs.manager
        if view.state is ExecutionState.PENDING_APPROVAL:
            reason = view.reason or ""
            yield {
                "stream": "stderr",
                "data": f"sandbox: waiting for approval of execution {view.execution_id}: {reason}\n",
            }
        ended = False
        try:
            async for index, item in manager.output(view.execution_id, principal, -1):
                if isinstance(item, OutputChunk):
                    yield {"stream": item.stream, "data": item.data}
                elif index < 0 and isinstance(item, ExecutionView):
                    ended = True
                    for event in _end(item):
                        yield event
                    return
        finally:
            if not ended:
                with contextlib.suppress(OrchestratorError):
                    await asyncio.shield(manager.cancel(view.execution_id, principal))


def _end(view: ExecutionView) -> list[Event]:
    """A step's end as the runner reads it: its exit code (1 when it never ran to one, or ran to 0 but failed a
    limit), and why in the log."""
    events: list[Event] = []
    error = view.error or (view.result.error if view.result is not None else None)
    if error is not None:
        events.append({"stream": "stderr", "data": f"sandbox: {error.code}: {error.message}\n"})
    code = view.result.exit_code if view.result is not None else None
    if view.state is not ExecutionState.SUCCEEDED:
        events.append({"stream": "stderr", "data": f"sandbox: execution {view.execution_id} {view.state.value}\n"})
        code = code or 1
    events.append({"exit_code": code or 0, "response": None, "execution_id": view.execution_id})
    return events
