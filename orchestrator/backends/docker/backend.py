"""``DockerBackend``: the SandboxBackend protocol on a real Docker engine (docker SDK, API ≥ 1.40).

One execution: ``create`` (container + stdio attach, before anything can run) → ``start`` (and stdin,
if any, then EOF) → ``capture`` ‖ ``wait`` → ``inspect`` → ``destroy``. Blocking SDK calls run on a
small dedicated thread pool; calls that block for as long as the sandbox runs (wait, output, stdin,
events) each get their own daemon thread, so a busy host cannot starve the pool and a stuck engine
cannot keep the process from exiting. Errors are always ``SandboxUnavailable`` (the engine cannot
give what is needed: unreachable, image or runtime missing — never pulled, never swapped) or
``SandboxStartFailed`` (the engine refused this sandbox), with the engine's payload in ``details``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import select
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from orchestrator.backends._support.blocking import BlockingCalls
from orchestrator.backends._support.connection import ClientClosed, LazyClient
from orchestrator.backends._support.host_paths import ENGINE_STATE
from orchestrator.backends._support.init_status import InitStatus, forwarded_stop, parse_status, stopped_from_outside
from orchestrator.backends._support.input_feed import InputFeed, send_to
from orchestrator.backends._support.labels import sandbox_name
from orchestrator.backends._support.launch_message import (
    fits_launch,
    init_refusal,
    new_report_token,
    spec_launch_message,
)
from orchestrator.backends._support.output_relay import OutputRelay
from orchestrator.backends._support.stream_sink import StreamSink
from orchestrator.backends._support.threads import ThreadPump, in_daemon_thread
from orchestrator.backends.base import (
    LABEL_EXECUTION_ID,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    BackendInfo,
    Capabilities,
    ExitState,
    LaunchSpec,
    LifecycleEvent,
    ManagedSandbox,
    OutputCallback,
    PreflightCheck,
    ResourceUsage,
    SandboxHandle,
    StreamCapture,
)
from orchestrator.backends.checks import ENGINE_FAILED, DoctorFixes, failed, not_checked
from orchestrator.backends.docker import cgroups, run_cgroup
from orchestrator.backends.docker.capture import FrameDemuxer
from orchestrator.backends.docker.config import container_config
from orchestrator.backends.docker.egress import SandboxEgress, egress_problem
from orchestrator.backends.docker.endpoint import Endpoint, discover_endpoint
from orchestrator.backends.docker.engine import (
    AttachStream,
    EngineClient,
    EngineError,
    JsonObject,
    jlist,
    jobj,
    jstr,
)
from orchestrator.backends.docker.engine_facts import runsc_seccomp_problem, security_options
from orchestrator.backends.docker.events import exit_state, lifecycle_event, managed_sandbox
from orchestrator.backends.docker.exit_watch import ExitWatch
from orchestrator.backends.docker.kernel_counts import with_kernel_counts
from orchestrator.backends.docker.sandbox_etc import etc_directory
from orchestrator.backends.docker.status_pipe import StatusPipe, sweep
from orchestrator.domain.errors import OrchestratorError, SandboxStartFailed, SandboxUnavailable
from orchestrator.domain.statedir import state_dir
from orchestrator.egress import EgressProxy, EgressRoute
from orchestrator.profiles import ResolvedProfile

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

READ_SIZE = 64 * 1024
#: under continuous output, live output reaches the caller at most this often (the first chunk at once)
OUTPUT_PACE_S = 0.01
#: a session's output is an answer someone waits for (an echo, a prompt): paced fifty times finer (1 ms
#: added 1 ms to each round trip), still bounded (a byte-at-a-time writer: at most 5,000 deliveries a second)
INTERACTIVE_PACE_S = 0.0002
POOL_WORKERS = 32
#: events from this long before ``events(execution_id)`` was called are replayed by the engine, so a
#: subscription that is still being set up when the container is created misses nothing
EVENTS_REPLAY_S = 1.0
REMOVAL_IN_PROGRESS_WAIT_S = 10.0
KEPT_USAGE = 256
#: how long confirm_end waits for the engine's account of an end the init reported (it comes ~27 ms later)
CONFIRM_S = 10.0
#: the status pipes' directories, under the state directory (see status_pipe)
STATUS_SUBDIR = "status-pipes"
# a parent cgroup (run_cgroup) whose sandbox is gone is swept once this old: younger ones may be a
# sandbox another controller on this engine is just creating
LEFTOVER_CGROUP_AGE_S = 60.0
#: how long inspect/usage wait for the reading taken at the container's exit (normally already there)
EXIT_READING_WAIT_S = 1.0
#: what fixes what ``sandboxctl doctor`` finds missing on this host's engine (the project's own setup)
DOCTOR_FIXES = DoctorFixes(
    engine="run `make setup` (it starts a project-managed engine when none answers)",
    runtime="run `make setup` (registers runsc with --oci-seccomp) or use a runc profile",
    image="run `make setup` (builds images/*/Dockerfile without a registry)",
    limits="check the engine's cgroup and seccomp support (see docs/setup-notes.md)",
)


@dataclass(eq=False)
class _Sandbox:
    """What this backend holds for one live sandbox it created."""

    handle: SandboxHandle
    attach: AttachStream
    stdin: bytes | None
    tty: bool
    runtime: str
    pids_limit: int
    start_done: asyncio.Event = field(default_factory=asyncio.Event)
    started: bool = False
    capturing: bool = False
    sampler: cgroups.UsageSampler | None = None
    sampler_task: asyncio.Task[None] | None = None
    exit_watch: ExitWatch | None = None
    feed: InputFeed | None = None  # a session's stdin (a SessionLaunch), once started
    pooled: bool = False  # pre-started: its init waits for launch()
    launched: bool = False
    report: str = ""  # the launch's report token: the init's refusal line carries it (launch_message)
    egress: SandboxEgress | None = None  # the proxy serving it (open_egress), closed before it is removed
    init_pidfd: int | None = None  # a pooled sandbox's init, when this process sees its pid
    init_pid: int = 0
    image_id: str | None = None  # the image the engine runs it from (read at start when pooled)
    # its init's status channel (status_pipe), when this process sees its init; read once launched with it
    status: StatusPipe | None = None
    status_read: asyncio.Future[bytes] | None = None
    # the command's end as its init reported it (then wait() did not wait for the engine, whose own wait,
    # still under way, is confirm_end's)
    init_status: InitStatus | None = None
    engine_wait: asyncio.Future[tuple[int, str | None]] | None = None
    killed: bool = False
    cgroup_parent: str = ""  # its own parent cgroup (run_cgroup), or "" for the engine's default
    relay: OutputRelay | None = None  # its live output's, while captured


def _in_container(pid: int, container_id: str) -> bool:
    """Whether process ``pid`` belongs to the container (its cgroup path names the container's id)."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as cgroup:
            return container_id in cgroup.read()
    except OSError:
        return False


def _since(now_ns: int) -> str:
    return f"{now_ns // 1_000_000_000}.{now_ns % 1_000_000_000:09d}"


class DockerBackend:
    """SandboxBackend on a Docker engine. ``base_url=None`` discovers it (see ``endpoint``)."""

    name = "docker"

    def __init__(self, base_url: str | None = None, *, status_channel: bool = True) -> None:
        """``status_channel=False``: a pre-started sandbox's end is always the engine's account (the status
        pipe off: what benchmarks/pool_launch.py compares it with)."""
        self._endpoint: Endpoint = discover_endpoint(base_url)
        self._status_channel = status_channel
        self._calls = BlockingCalls(POOL_WORKERS, "docker-backend")
        self._conn = LazyClient(self._connect, EngineClient.close, self._calls)
        self.capabilities = Capabilities(
            can_pool=True,
            launch_confirmed=False,  # the attach write does not say whether the init read it: the executor checks
            sessions=True,
            lists_images=True,
            own_pids_limit=True,
            fixes=DOCTOR_FIXES,
            # a bind mount hands the sandbox whatever the workspace holds: never the engine's state or socket
            protected_paths=(*ENGINE_STATE, *self._endpoint.socket_directories),
        )
        self._sandboxes: dict[str, _Sandbox] = {}
        self._pumps: set[ThreadPump[JsonObject]] = set()
        self._final_usage: OrderedDict[str, ResourceUsage] = OrderedDict()
        self._runtimes_verified: set[str] = set()
        self._etc_dir: str | None = None
        self._own_cgroups: bool | None = None  # whether sandboxes get a parent cgroup each (run_cgroup)
        self._facts: JsonObject | None = None  # the engine's info, once (_engine_facts)
        self._facts_lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return self._endpoint.url

    # -- plumbing ------------------------------------------------------------------------------------

    def _pool(self) -> ThreadPoolExecutor:
        return self._calls.pool()

    async def _call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """A short blocking engine call, off the event loop."""
        return await self._calls.call(fn, *args, **kwargs)

    def _connect(self) -> EngineClient:
        return EngineClient.connect(self._endpoint.url, tls_from_env=self._endpoint.source == "DOCKER_HOST")

    def prepare(self) -> None:
        """Start connecting (client set-up, API version negotiation) and finding out whether sandboxes
        get parent cgroups of their own (an engine ``info``) on a backend thread now, so that the first
        real call does not wait for them; a failure is left for that call to report."""
        self._conn.prepare((EngineError,), then=self._decide_own_cgroups)

    async def _engine(self) -> EngineClient:
        try:
            return await self._conn.get()
        except ClientClosed:
            raise SandboxUnavailable("the Docker backend is closed", details={"endpoint": self._endpoint.url}) from None
        except EngineError as exc:
            raise self._error(exc, "cannot connect") from exc

    def _error(
        self,
        exc: EngineError,
        message: str,
        *,
        cls: type[OrchestratorError] = SandboxUnavailable,
        **context: object,
    ) -> OrchestratorError:
        details: dict[str, object] = {
            **exc.details(),
            "endpoint": self._endpoint.url,
            "endpoint_source": self._endpoint.source,
            **context,
        }
        if exc.kind == "unreachable":
            return SandboxUnavailable(
                f"the container engine at {self._endpoint.url} does not answer ({exc.reason}); "
                "`make setup` starts the project's engine",
                details=details,
            )
        return cls(message, details=details)

    # -- engine facts -------------------------------------------------------------------------------------

    async def info(self) -> BackendInfo:
        engine = await self._engine()
        try:
            version, info, images = await asyncio.gather(
                self._call(engine.version), self._call(engine.info), self._call(engine.images)
            )
        except EngineError as exc:
            raise self._error(exc, f"the engine did not describe itself: {exc.reason}") from exc
        security = security_options(info)
        security_names = {
            part.removeprefix("name=") for s in security for part in s.split(",") if part.startswith("name=")
        }
        tags = {
            tag
            for image in images
            for tag in jlist(image, "RepoTags")
            if isinstance(tag, str) and tag != "<none>:<none>"
        }
        details = {
            "api_version": engine.api_version,
            "os": jstr(info, "OperatingSystem") or "",
            "kernel": jstr(info, "KernelVersion") or "",
            "cgroup_version": jstr(info, "CgroupVersion") or "",
            "cgroup_driver": jstr(info, "CgroupDriver") or "",
            "security_options": "; ".join(security),
            "seccomp": "yes" if "seccomp" in security_names else "no",
            "apparmor": "yes" if "apparmor" in security_names else "no",
            "selinux": "yes" if "selinux" in security_names else "no",
            "rootless": "yes" if "rootless" in security_names else "no",
            "default_runtime": jstr(info, "DefaultRuntime") or "",
            "storage_driver": jstr(info, "Driver") or "",
            "endpoint_source": self._endpoint.source,
        }
        return BackendInfo(
            name=self.name,
            engine_version=jstr(version, "Version") or "",
            endpoint=self._endpoint.url,
            runtimes=frozenset(jobj(info, "Runtimes")),
            images=frozenset(tags),
            details=details,
        )

    # -- one sandbox -----------------------------------------------------------------------------------

    async def _require_runtime(self, engine: EngineClient, runtime: str) -> None:
        """gVisor applies our seccomp profile only when registered with --oci-seccomp; without it a
        sandboxed process can unshare a user namespace and chroot. Refuse rather than run weaker."""
        if runtime != "runsc" or runtime in self._runtimes_verified:
            return
        problem = runsc_seccomp_problem(await self._call(self._engine_facts, engine))
        if problem is not None:
            raise SandboxUnavailable(problem, details={"runtime": runtime})
        self._runtimes_verified.add(runtime)

    def _sandbox_etc(self) -> str:
        """The sandbox's own /etc/hostname, hosts and resolv.conf (checked once per backend)."""
        if self._etc_dir is None:
            self._etc_dir = etc_directory()
        return self._etc_dir

    def _engine_facts(self, engine: EngineClient) -> JsonObject:
        """The engine's ``info`` (its runtimes' options, its cgroup driver), asked once per backend: by
        prepare() beside the connection, or by the first call that needs it."""
        with self._facts_lock:  # prepare() may be asking right now: once is enough
            if self._facts is None:
                self._facts = engine.info()
            return self._facts

    async def _gives_own_cgroups(self, engine: EngineClient) -> bool:
        """Whether each sandbox gets a parent cgroup of its own: when the engine takes one that this
        process can read and remove (see ``run_cgroup``; decided once per backend, when the engine answers)."""
        if self._own_cgroups is not None:
            return self._own_cgroups
        return await self._call(self._decide_own_cgroups, engine)

    def _decide_own_cgroups(self, engine: EngineClient) -> bool:
        if self._own_cgroups is None:  # (two threads deciding at once reach the same answer)
            self._own_cgroups = self._endpoint.is_local_socket and self._sees_cgroups(engine)
        return bool(self._own_cgroups)

    async def _cgroup_parent(self, engine: EngineClient, name: str) -> str:
        """The sandbox's own parent cgroup, or "" (the engine's default)."""
        if not run_cgroup.is_sandbox_name(name) or not await self._gives_own_cgroups(engine):
            return ""
        return run_cgroup.parent_of(name)

    def _sees_cgroups(self, engine: EngineClient) -> bool | None:
        try:
            driver = jstr(self._engine_facts(engine), "CgroupDriver")
        except EngineError:
            return None  # asked again next time: the engine's own error is the caller's to report
        return driver == "cgroupfs" and run_cgroup.engine_fits(self._endpoint.url.removeprefix("unix://"))

    async def create(self, spec: LaunchSpec) -> SandboxHandle:
        """A fresh container (never reused) with its stdio attached; nothing runs yet."""
        name = sandbox_name(spec.execution_id)
        profile = spec.profile
        engine = await self._engine()
        await self._require_runtime(engine, profile.runtime)
        parent = await self._cgroup_parent(engine, name)
        # made in place, before the try (no await: a cancellation cannot leak it); local engines only
        local = self._status_channel and self._endpoint.is_local_socket
        status = StatusPipe.for_sandbox(spec, Path(state_dir()) / STATUS_SUBDIR, name) if local else None
        try:
            return await self._create(engine, spec, name, parent, status)
        except BaseException:  # never registered (that is _create's last step): the pipe is nobody's
            if status is not None:
                status.close()
            raise

    async def _create(
        self, engine: EngineClient, spec: LaunchSpec, name: str, parent: str, status: StatusPipe | None
    ) -> SandboxHandle:
        profile = spec.profile
        config = container_config(spec, etc_dir=self._sandbox_etc(), cgroup_parent=parent, status=status)
        loop = asyncio.get_running_loop()
        creating = loop.run_in_executor(self._pool(), engine.create, config, name)
        try:
            container_id, warnings = await asyncio.shield(creating)
        except asyncio.CancelledError:
            # the engine may still create it: remove it as soon as it exists
            creating.add_done_callback(functools.partial(self._remove_orphan, engine))
            raise
        except EngineError as exc:
            raise self._create_error(exc, spec, name) from exc
        if warnings:
            log.info("engine warnings creating %s: %s", name, "; ".join(warnings))
        with_stdin = spec.stdin is not None or spec.session or spec.pooled
        attach_call = functools.partial(engine.attach, container_id, stdin=with_stdin)
        attaching = loop.run_in_executor(self._pool(), attach_call)
        try:
            attach = await asyncio.shield(attaching)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                attaching.add_done_callback(_abort_attach)
            await asyncio.shield(self._remove_quietly(engine, container_id))
            if isinstance(exc, EngineError):
                raise self._error(
                    exc,
                    f"could not attach to sandbox {name}: {exc.reason}",
                    cls=SandboxStartFailed,
                    sandbox=name,
                ) from exc
            raise
        handle = SandboxHandle(execution_id=spec.execution_id, sandbox_id=container_id, name=name)
        self._sandboxes[container_id] = _Sandbox(
            handle=handle,
            attach=attach,
            stdin=spec.stdin,
            tty=spec.tty,
            runtime=profile.runtime,
            pids_limit=profile.pids_limit,
            pooled=spec.pooled,
            cgroup_parent=parent,
            status=status,
        )
        if spec.session:  # written from the start on: what comes before the command reads is queued
            self._sandboxes[container_id].feed = InputFeed(name, attach.send, attach.end_input)
        log.debug("created %s (%s, runtime %s)", name, container_id[:12], profile.runtime)
        return handle

    def _create_error(self, exc: EngineError, spec: LaunchSpec, name: str) -> OrchestratorError:
        profile = spec.profile
        context: dict[str, object] = {"sandbox": name, "image": profile.image, "runtime": profile.runtime}
        text = (exc.explanation or exc.reason).lower()
        if exc.kind == "image_not_found":
            return self._error(
                exc,
                f"image {profile.image} is not on the engine (profile {profile.name!r}); images are never pulled "
                "(there is no registry): `make setup` builds the project's images",
                cls=SandboxUnavailable,
                **context,
            )
        if exc.kind in ("bad_request", "server") and "runtime" in text and ("unknown" in text or "not" in text):
            return self._error(
                exc,
                f"the engine has no runtime {profile.runtime!r}, which profile {profile.name!r} needs "
                "(it is never replaced by another): `make setup` registers runsc",
                cls=SandboxUnavailable,
                **context,
            )
        if exc.kind in ("bad_request", "server") and "seccomp" in text:
            return self._error(
                exc,
                f"the engine cannot apply the seccomp profile {profile.seccomp!r}: {exc.reason}",
                cls=SandboxUnavailable,
                **context,
            )
        if exc.kind == "conflict":
            return self._error(
                exc,
                f"a container named {name} already exists; sandboxes are never reused",
                cls=SandboxStartFailed,
                **context,
            )
        return self._error(
            exc, f"the engine refused to create sandbox {name}: {exc.reason}", cls=SandboxStartFailed, **context
        )

    def _remove_orphan(self, engine: EngineClient, created: asyncio.Future[tuple[str, list[str]]]) -> None:
        if created.cancelled() or created.exception() is not None:
            return
        container_id, _ = created.result()
        try:
            self._pool().submit(_remove_ignoring_errors, engine, container_id)
        except RuntimeError:  # the backend was closed meanwhile: the reaper collects it
            log.warning("could not remove abandoned container %s", container_id[:12])

    async def _remove_quietly(self, engine: EngineClient, container_id: str) -> None:
        with contextlib.suppress(EngineError):
            await self._call(engine.remove, container_id)

    async def start(self, handle: SandboxHandle) -> None:
        sandbox = self._sandboxes.get(handle.sandbox_id)
        engine = await self._engine()
        try:
            await self._call(engine.start, handle.sandbox_id)
        except EngineError as exc:
            if sandbox is not None:
                sandbox.attach.abort()  # nothing will be written: let capture() return
            text = (exc.explanation or exc.reason).lower()
            context: dict[str, object] = {"sandbox": handle.name}
            if "executable file not found" in text or "no such file or directory" in text:
                context["command_not_found"] = True
            message = f"the engine could not start sandbox {handle.name}: {exc.reason}"
            raise self._error(exc, message, cls=SandboxStartFailed, **context) from exc
        finally:
            if sandbox is not None:
                sandbox.start_done.set()
        if sandbox is None:
            return
        sandbox.started = True
        if sandbox.stdin is not None:
            data, attach = sandbox.stdin, sandbox.attach
            threading.Thread(target=attach.write_stdin, args=(data,), name=f"stdin-{handle.name}", daemon=True).start()
        if self._endpoint.is_local_socket:
            sandbox.sampler_task = asyncio.create_task(self._sample(sandbox), name=f"usage-{handle.name}")
            if sandbox.pooled:  # pre-started: whether its init still waits is then known here (still_waiting)
                await self._watch_init(sandbox)

    async def _sample(self, sandbox: _Sandbox) -> None:
        try:
            files = cgroups.locate(sandbox.handle.sandbox_id, parent=sandbox.cgroup_parent)
            totals = run_cgroup.totals(sandbox.handle.name) if sandbox.cgroup_parent else None
            if sandbox.cgroup_parent and totals is None and self._own_cgroups:
                # started, yet its parent is nowhere to be seen: the engine's tree is not this one after all
                log.warning(
                    "%s: its parent cgroup is not visible here; sandboxes keep the engine's", sandbox.handle.name
                )
                self._own_cgroups = False
            if files is None and totals is None:
                return
            sampler = cgroups.UsageSampler(files, totals, pids_limit=sandbox.pids_limit)
            sandbox.sampler = sampler
            if not sampler.sample():  # it has exited already: its parent's totals are what it used
                return
            watch = ExitWatch(sampler, sandbox.handle.sandbox_id, sandbox.handle.name)
            if watch.start():
                sandbox.exit_watch = watch
            delay = cgroups.FIRST_INTERVAL_S
            while sampler.sample():
                await asyncio.sleep(delay)
                delay = min(delay * 2, cgroups.MAX_INTERVAL_S)
        except asyncio.CancelledError:
            raise
        except Exception:  # never let usage sampling break an execution; say so
            log.exception("usage sampling of %s failed", sandbox.handle.name)

    async def capture(
        self,
        handle: SandboxHandle,
        stdout_limit: int,
        stderr_limit: int,
        on_output: OutputCallback | None = None,
    ) -> tuple[StreamCapture, StreamCapture]:
        """Read the stream attached at create until the engine closes it (the container exited),
        keeping up to the limits and counting everything; what is kept also goes to ``on_output`` as it
        is read (see the protocol)."""
        sandbox = self._sandboxes.get(handle.sandbox_id)
        if sandbox is None or sandbox.capturing:
            raise SandboxUnavailable(
                f"no output stream for {handle.name}: capture() reads the stream attached by create(), "
                "once, on the backend that created the sandbox",
                details={"sandbox": handle.name},
            )
        sandbox.capturing = True
        attach = sandbox.attach
        relay = None
        if on_output is not None:
            pace = INTERACTIVE_PACE_S if sandbox.feed is not None else OUTPUT_PACE_S
            relay = sandbox.relay = OutputRelay(asyncio.get_running_loop(), on_output, max_chunk=READ_SIZE, pace=pace)
        stdout = StreamSink(stdout_limit, None if relay is None else functools.partial(relay.post, "stdout"))
        stderr = StreamSink(stderr_limit, None if relay is None else functools.partial(relay.post, "stderr"))
        demux = None if sandbox.tty else FrameDemuxer(stdout, stderr)

        def pump() -> None:
            try:
                while chunk := attach.read(READ_SIZE):
                    if demux is None:
                        stdout.write(chunk)
                    else:
                        demux.feed(chunk)
            finally:
                attach.close()

        try:
            await in_daemon_thread(pump, f"output-{handle.name}")
            if relay is not None:
                relay.drain()  # the last chunks, before capture returns
        except asyncio.CancelledError:
            attach.abort()
            raise
        except EngineError as exc:
            attach.abort()
            raise self._error(exc, f"lost the output of {handle.name}: {exc.reason}", sandbox=handle.name) from exc
        finally:
            if relay is not None:
                relay.close()
        if demux is not None and demux.pending and not attach.aborted_by_caller:
            # the engine ends the stream between frames; a cut inside one means the connection broke
            raise SandboxUnavailable(
                f"the output stream of {handle.name} broke off inside a frame",
                details={"sandbox": handle.name, "endpoint": self._endpoint.url},
            )
        captured = stdout.result(), stderr.result()
        refusal = init_refusal(sandbox.report, *captured)
        if refusal is not None:  # a pooled sandbox's init ran nothing: what a cold start's refusal says
            raise SandboxStartFailed(
                f"the engine could not start the command in sandbox {handle.name}: {refusal.reason}",
                details={"sandbox": handle.name, "init_status": refusal.status}
                | ({"command_not_found": True} if refusal.status == 127 else {}),
            )
        return captured

    async def wait(self, handle: SandboxHandle) -> int:
        sandbox = self._sandboxes.get(handle.sandbox_id)
        if sandbox is not None:
            await sandbox.start_done.wait()  # a created container is "not running": do not return early
            if not sandbox.started:
                raise SandboxStartFailed(f"sandbox {handle.name} never started", details={"sandbox": handle.name})
        engine = await self._engine()
        container_id = handle.sandbox_id
        waiting = asyncio.ensure_future(in_daemon_thread(lambda: engine.wait(container_id), f"wait-{handle.name}"))
        if sandbox is not None and sandbox.status_read is not None:
            report = await self._reported_end(sandbox, waiting)
            if report is not None:
                return report.exit_code
        try:
            code, error = await waiting
        except EngineError as exc:
            raise self._error(
                exc, f"lost sandbox {handle.name} while waiting for it: {exc.reason}", sandbox=handle.name
            ) from exc
        if error:
            log.info("engine reported an error waiting for %s: %s", handle.name, error)
        if sandbox is not None and sandbox.status_read is not None and not sandbox.killed:
            # not stopped by us: did its init forward a signal from outside (a `docker stop` by someone else)?
            forwarded = await forwarded_stop(sandbox.status_read, sandbox.report)
            if forwarded:
                raise stopped_from_outside(handle.name, forwarded, code)
        return code

    async def _reported_end(
        self, sandbox: _Sandbox, waiting: asyncio.Future[tuple[int, str | None]]
    ) -> InitStatus | None:
        """The command's end as its init reported it, when that came before the engine's; None (the engine's
        account is the end) when it did not, or is no report under this launch's token, or the sandbox was
        stopped (by us, or from outside: its init forwarded a signal from outside), or its cgroup keeps no
        OOM count."""
        assert sandbox.status_read is not None
        either: list[asyncio.Future[Any]] = [sandbox.status_read, waiting]
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not sandbox.status_read.done() or waiting.done():
            return None
        data = sandbox.status_read.result()
        report = parse_status(data, sandbox.report)
        if report is None and data:
            log.warning("%s: its status pipe carried %d bytes that are no report", sandbox.handle.name, len(data))
        if report is None or report.stopped or report.oom_kills is None or sandbox.killed:
            return None
        sandbox.init_status, sandbox.engine_wait = report, waiting
        return report

    async def kill(self, handle: SandboxHandle, signal: str = "SIGKILL") -> None:
        """Send ``signal``; a sandbox that already stopped or is gone is not an error."""
        sandbox = self._sandboxes.get(handle.sandbox_id)
        if sandbox is not None:
            sandbox.killed = True
        engine = await self._engine()
        try:
            await self._call(engine.kill, handle.sandbox_id, signal)
        except EngineError as exc:
            if exc.kind in ("not_found", "conflict"):
                log.debug("kill %s: %s", handle.name, exc.reason)
                return
            raise self._error(
                exc, f"could not signal sandbox {handle.name}: {exc.reason}", sandbox=handle.name, signal=signal
            ) from exc

    async def inspect(self, handle: SandboxHandle) -> ExitState:
        """The engine's exit state; once stopped, also whether the runtime itself killed the sandbox
        at its pids limit or at its memory limit unseen by the engine (``kernel_counts``). An end its
        init reported: that report (the engine's follows: ``confirm_end``)."""
        sandbox = self._sandboxes.get(handle.sandbox_id)
        if sandbox is not None and sandbox.init_status is not None:
            return dataclasses.replace(sandbox.init_status.exit_state(), image_id=sandbox.image_id)
        return await self._engine_state(handle)

    async def _engine_state(self, handle: SandboxHandle) -> ExitState:
        engine = await self._engine()
        try:
            raw = await self._call(engine.inspect, handle.sandbox_id)
        except EngineError as exc:
            raise self._error(exc, f"cannot inspect sandbox {handle.name}: {exc.reason}", sandbox=handle.name) from exc
        state = exit_state(raw)
        sandbox = self._sandboxes.get(handle.sandbox_id)
        if sandbox is None or not state.exit_code:  # None: it never ran to an exit; 0: nothing to explain
            return state
        usage = await self._usage_now(sandbox)  # the reading its exit triggered included
        oom_kills = sandbox.sampler.oom_kills if sandbox.sampler is not None else None
        return with_kernel_counts(
            state, runtime=sandbox.runtime, usage=usage, oom_kills=oom_kills, pids_limit=sandbox.pids_limit
        )

    async def usage(self, handle: SandboxHandle) -> ResourceUsage:
        """Peak memory, CPU time, peak pids and forks refused at the pids limit, sampled from the
        container's cgroup while it ran and as it exited (see ``cgroups``, ``exit_watch``); ``None``
        fields when unknown."""
        sandbox = self._sandboxes.get(handle.sandbox_id)
        if sandbox is None:
            return self._final_usage.get(handle.sandbox_id, ResourceUsage())
        return await self._usage_now(sandbox)

    async def _usage_now(self, sandbox: _Sandbox) -> ResourceUsage:
        sampler = sandbox.sampler
        if sampler is None and sandbox.cgroup_parent and sandbox.started:  # not sampled (yet): its parent
            sampler = await self._call(run_cgroup.parent_sampler, sandbox.handle.name)
        if sampler is None:
            return ResourceUsage()
        if not sampler.sample() and sandbox.exit_watch is not None:
            # the cgroup is gone, so the container stopped: the reading its exit triggered is in, or
            # being taken
            await self._call(sandbox.exit_watch.finish, EXIT_READING_WAIT_S)
        return sampler.usage()

    async def destroy(self, handle: SandboxHandle) -> None:
        """Remove the container and its anonymous volumes (forced: kills it if running), then its own
        parent cgroup (the last reading taken from it first). Idempotent."""
        sandbox = self._sandboxes.pop(handle.sandbox_id, None)
        if sandbox is not None:
            if sandbox.egress is not None:  # its connections end (and are recorded) before it goes
                egress, sandbox.egress = sandbox.egress, None
                await asyncio.shield(egress.close())
            self._forget(sandbox)
        await self._remove(handle)  # when it fails the container may be there still: so is its parent
        if self._own_cgroups or (sandbox is not None and sandbox.cgroup_parent):
            sampler = sandbox.sampler if sandbox is not None else None
            started = sandbox is not None and bool(sandbox.cgroup_parent) and sandbox.started
            final = await self._call(run_cgroup.release, handle.name, sampler if started else None, started)
            if final is not None:
                self._final_usage[handle.sandbox_id] = final

    async def _remove(self, handle: SandboxHandle) -> None:
        engine = await self._engine()
        try:
            await self._call(engine.remove, handle.sandbox_id)
        except EngineError as exc:
            if exc.kind == "not_found":
                return
            if exc.kind == "conflict" and "in progress" in (exc.explanation or exc.reason):
                await self._await_removal(engine, handle)
                return
            raise self._error(
                exc, f"could not remove sandbox {handle.name}: {exc.reason}", sandbox=handle.name
            ) from exc

    def _forget(self, sandbox: _Sandbox) -> None:
        if sandbox.status is not None:
            sandbox.status.close()
        if sandbox.init_pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(sandbox.init_pidfd)
            sandbox.init_pidfd = None
        if sandbox.feed is not None:
            sandbox.feed.abandon()
        sandbox.attach.abort()
        if sandbox.sampler_task is not None:
            sandbox.sampler_task.cancel()
        if sandbox.exit_watch is not None:
            sandbox.exit_watch.stop()
        if sandbox.sampler is not None:
            sandbox.sampler.sample()
            self._final_usage[sandbox.handle.sandbox_id] = sandbox.sampler.usage()
            while len(self._final_usage) > KEPT_USAGE:
                self._final_usage.popitem(last=False)

    async def _await_removal(self, engine: EngineClient, handle: SandboxHandle) -> None:
        deadline = time.monotonic() + REMOVAL_IN_PROGRESS_WAIT_S
        while time.monotonic() < deadline:
            try:
                await self._call(engine.inspect, handle.sandbox_id)
            except EngineError as exc:
                if exc.kind == "not_found":
                    return
                raise self._error(exc, f"could not remove sandbox {handle.name}: {exc.reason}") from exc
            await asyncio.sleep(0.05)
        raise SandboxUnavailable(
            f"sandbox {handle.name} is still being removed after {REMOVAL_IN_PROGRESS_WAIT_S:g}s",
            details={"sandbox": handle.name},
        )

    # -- sessions --------------------------------------------------------------------------------------

    def _feed(self, handle: SandboxHandle) -> InputFeed:
        sandbox = self._sandboxes.get(handle.sandbox_id)
        if sandbox is None or sandbox.feed is None:
            raise SandboxUnavailable(
                f"{handle.name} takes no input: it is gone, or was not created as a session",
                details={"sandbox": handle.name},
            )
        return sandbox.feed

    async def send_input(self, handle: SandboxHandle, data: bytes) -> None:
        send_to(self._feed(handle), handle.name, data)

    # -- sandboxes started waiting (pre-started, egress) ---------------------------------------------------

    async def _watch_init(self, sandbox: _Sandbox) -> None:
        """A pooled sandbox's init as a pidfd (a local engine, the host's PID namespace): whether it still
        waits is then known here, without a round trip to the engine at claim time."""
        engine = await self._engine()
        try:
            raw = await self._call(engine.inspect, sandbox.handle.sandbox_id)
            pid = jobj(raw, "State").get("Pid")
            if not isinstance(pid, int) or pid <= 0:
                return
            fd = os.pidfd_open(pid)
        except (EngineError, OSError) as exc:
            log.debug("no pidfd for the init of %s: %s", sandbox.handle.name, exc)
            return
        # the pid could have been reused between the inspect and the open: only a process of this very
        # container counts (its cgroup names the container)
        if not _in_container(pid, sandbox.handle.sandbox_id):
            os.close(fd)
            return
        sandbox.init_pidfd, sandbox.init_pid, sandbox.image_id = fd, pid, jstr(raw, "Image") or None

    def end_reported(self, handle: SandboxHandle) -> bool:
        """Whether wait()'s exit came from the sandbox's own init (the engine's account of it follows)."""
        sandbox = self._sandboxes.get(handle.sandbox_id)
        return sandbox is not None and sandbox.init_status is not None

    async def confirm_end(self, handle: SandboxHandle) -> ExitState | None:
        """The engine's own account of an end the init reported, once its wait returns (within CONFIRM_S);
        None if it does not in time."""
        sandbox = self._sandboxes.get(handle.sandbox_id)
        if sandbox is None or sandbox.engine_wait is None:
            return None
        try:
            async with asyncio.timeout(CONFIRM_S):
                await asyncio.shield(sandbox.engine_wait)
            return await self._engine_state(handle)
        except (TimeoutError, EngineError, OrchestratorError) as exc:  # no account: the pipeline notes it
            log.info("no engine account of the end of %s: %s", handle.name, exc)
            return None

    def still_waiting(self, handle: SandboxHandle) -> bool | None:
        sandbox = self._sandboxes.get(handle.sandbox_id)
        if sandbox is None:
            return False
        if sandbox.init_pidfd is None or sandbox.launched:
            return None
        ready, _, _ = select.select([sandbox.init_pidfd], [], [], 0)
        return not ready  # a pidfd is readable once its process exited

    def fits_launch(self, spec: LaunchSpec) -> bool:
        return fits_launch(spec)

    async def launch(self, handle: SandboxHandle, spec: LaunchSpec) -> None:
        """The launch message (then ``spec.stdin``, then EOF) down the attach stream the container's init
        reads: written on a thread of its own, like a cold run's stdin (the command reads it at its pace)."""
        sandbox = self._sandboxes.get(handle.sandbox_id)
        if sandbox is None or not sandbox.pooled or sandbox.launched:
            raise SandboxUnavailable(
                f"{handle.name} takes no launch: it is gone, was not pre-started, or was launched already",
                details={"sandbox": handle.name},
            )
        if spec.tty:  # never a terminal it was not started with
            raise SandboxUnavailable(
                f"{handle.name} was pre-started without a terminal: a command with tty starts cold",
                details={"sandbox": handle.name},
            )
        sandbox.report = new_report_token()
        # the status channel only once its pipe's name is gone with the init holding it (status_pipe)
        status = sandbox.status is not None and sandbox.init_pid > 0 and sandbox.status.seal(sandbox.init_pid)
        message = spec_launch_message(spec, report=sandbox.report, status_channel=status)
        sandbox.launched = True  # exactly once, whatever happens next
        if status and sandbox.status is not None:
            sandbox.status_read = asyncio.ensure_future(in_daemon_thread(sandbox.status.read, f"status-{handle.name}"))
        data, attach = message + (spec.stdin or b""), sandbox.attach
        if spec.session:  # the message first in the session's input, what it sends after it
            if sandbox.relay is not None:  # someone waits for what it echoes
                sandbox.relay.set_pace(INTERACTIVE_PACE_S)
            feed = sandbox.feed = InputFeed(handle.name, attach.send, attach.end_input)
            send_to(feed, handle.name, message)
            return
        threading.Thread(target=attach.write_stdin, args=(data,), name=f"launch-{handle.name}", daemon=True).start()

    # -- egress ----------------------------------------------------------------------------------------

    def egress_problem(self, profile: ResolvedProfile) -> str | None:
        return egress_problem(profile, sees_sandboxes=self._endpoint.is_local_socket)

    async def open_egress(self, handle: SandboxHandle, route: EgressRoute, proxy: EgressProxy) -> str:
        """The proxy on the sandbox's own 127.0.0.1 (see backends/docker/egress.py), before its launch."""
        sandbox = self._sandboxes.get(handle.sandbox_id)
        if sandbox is None or not sandbox.pooled or sandbox.launched or sandbox.egress is not None:
            raise SandboxUnavailable(
                f"{handle.name} takes no egress: it is gone, was not started waiting, or was launched already",
                details={"sandbox": handle.name},
            )
        sandbox.egress = await SandboxEgress.open(handle.name, sandbox.init_pidfd, route, proxy)
        return sandbox.egress.url

    async def end_input(self, handle: SandboxHandle) -> None:
        sandbox = self._sandboxes.get(handle.sandbox_id)
        if sandbox is not None and sandbox.feed is not None:
            sandbox.feed.end()

    async def resize(self, handle: SandboxHandle, rows: int, cols: int) -> None:
        sandbox = self._sandboxes.get(handle.sandbox_id)
        if sandbox is None or not sandbox.tty:
            raise SandboxUnavailable(f"{handle.name} has no terminal to resize", details={"sandbox": handle.name})
        engine = await self._engine()
        try:
            await self._call(engine.resize, handle.sandbox_id, rows, cols)
        except EngineError as exc:
            raise self._error(exc, f"could not resize the terminal of {handle.name}: {exc.reason}") from exc

    # -- observation ---------------------------------------------------------------------------------

    def events(self, execution_id: str | None = None) -> AsyncGenerator[LifecycleEvent, None]:
        """Lifecycle events of our sandboxes (one execution's if given) from the moment of this call:
        the engine replays what happened since then, so subscribing before ``create`` is enough even
        if the first ``__anext__`` comes later. Close with ``aclose()``: the reader thread stops at once."""
        now = time.time_ns()
        if execution_id is not None:
            now -= int(EVENTS_REPLAY_S * 1_000_000_000)
        labels = [f"{LABEL_MANAGED_BY}={MANAGED_BY}"]
        if execution_id is not None:
            labels.append(f"{LABEL_EXECUTION_ID}={execution_id}")
        return self._events({"type": ["container"], "label": labels}, _since(now))

    async def _events(self, filters: dict[str, list[str]], since: str) -> AsyncGenerator[LifecycleEvent, None]:
        engine = await self._engine()
        queue: asyncio.Queue[JsonObject | BaseException | None] = asyncio.Queue()
        pump: ThreadPump[JsonObject] = ThreadPump(
            functools.partial(engine.events, filters, since),
            asyncio.get_running_loop(),
            queue,
            name="docker-events",
            ended_early=lambda: EngineError("unreachable", "events", "the engine ended its event stream"),
        )
        self._pumps.add(pump)
        pump.start()
        try:
            while True:
                item = await queue.get()
                if item is None:
                    return
                if isinstance(item, EngineError):
                    raise self._error(item, f"the engine's event stream failed: {item.reason}")
                if isinstance(item, BaseException):
                    raise item
                event = lifecycle_event(item)
                if event is not None:
                    yield event
        finally:
            pump.close()
            self._pumps.discard(pump)

    async def preflight(self, profile: ResolvedProfile | None = None) -> list[PreflightCheck]:
        """Whether the engine applies seccomp at all (its security options): every profile has one. Skipped
        when the engine does not answer (the doctor's engine check says why)."""
        try:
            engine = await self._engine()
            facts = await self._call(self._engine_facts, engine)
        except (SandboxUnavailable, EngineError):
            return [not_checked("seccomp support", ENGINE_FAILED)]
        security = "; ".join(security_options(facts))
        if "seccomp" not in security:
            return [failed("seccomp support", "DOCTOR.SECCOMP", security, "use an engine built with seccomp support")]
        return [PreflightCheck("seccomp support", True, security)]

    def workspace_root(self) -> str | None:
        return None  # bind mounts reach any directory of this host

    async def list_managed(self) -> list[ManagedSandbox]:
        engine = await self._engine()
        try:
            listed = await self._call(engine.containers, [f"{LABEL_MANAGED_BY}={MANAGED_BY}"])
        except EngineError as exc:
            raise self._error(exc, f"cannot list sandboxes: {exc.reason}") from exc
        managed = [managed_sandbox(item) for item in listed]
        live = {sandbox.name for sandbox in managed}
        if await self._gives_own_cgroups(engine):  # what the reaper lists, it collects: parents left behind too
            await self._call(run_cgroup.sweep, live, older_than_s=LEFTOVER_CGROUP_AGE_S)
        if self._status_channel and self._endpoint.is_local_socket:  # only this host's engine made pipes here
            # and status pipes' directories (this process's own sandboxes are listed: theirs stay)
            await self._call(sweep, Path(state_dir()) / STATUS_SUBDIR, live, older_than_s=LEFTOVER_CGROUP_AGE_S)
        return managed

    async def close(self) -> None:
        """Stop every stream and thread this backend started and close the client. Idempotent."""
        for sandbox in list(self._sandboxes.values()):
            self._forget(sandbox)
        self._sandboxes.clear()
        for pump in list(self._pumps):
            pump.close()
        self._pumps.clear()
        self._conn.close()
        self._calls.shutdown()


def _abort_attach(attaching: asyncio.Future[AttachStream]) -> None:
    if not attaching.cancelled() and attaching.exception() is None:
        attaching.result().abort()


def _remove_ignoring_errors(engine: EngineClient, container_id: str) -> None:
    try:
        engine.remove(container_id)
    except EngineError as exc:
        if exc.kind != "not_found":
            log.warning("could not remove abandoned container %s: %s", container_id[:12], exc)
