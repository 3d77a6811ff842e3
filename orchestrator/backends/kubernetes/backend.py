"""``KubernetesBackend``: the SandboxBackend protocol as one pod per execution, through the API server.

One execution: ``create`` (the pod, admitted by the API server: PodSecurity, RuntimeClass) → ``start``
(until the kubelet runs the container, or says it never will; the command waits behind a barrier until
the sidecar's relays hold its stdio: ``start_barrier``) → ``capture`` (the relayed stdout and stderr)
‖ ``wait`` (the watch) → ``inspect`` → ``destroy`` (the
pod deleted, only that pod: its uid is a precondition). Lifecycle events come from one shared pod watch
(``watch.py``) with the API server's timestamps. Blocking client calls run on a small thread pool; the
watch, the lease renewal and each pod's stdio on daemon threads of their own.

Errors: ``SandboxUnavailable`` when the cluster cannot give what the profile needs (unreachable, the
namespace without its default-deny NetworkPolicy, a RuntimeClass or an image missing, our seccomp profile
not on the node) — never run weaker instead; ``SandboxStartFailed`` when the cluster refused this pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncGenerator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import ParamSpec, TypeVar

from orchestrator.backends._support.blocking import BlockingCalls
from orchestrator.backends._support.connection import ClientClosed, LazyClient
from orchestrator.backends._support.host_paths import ENGINE_STATE
from orchestrator.backends._support.init_status import InitStatus, parse_status, stopped_from_outside
from orchestrator.backends._support.input_feed import send_to
from orchestrator.backends._support.launch_message import (
    fits_launch,
    init_refusal,
    new_report_token,
    spec_launch_message,
)
from orchestrator.backends._support.output_relay import OutputRelay
from orchestrator.backends._support.stream_sink import StreamSink
from orchestrator.backends.base import (
    LABEL_MANAGED_BY,
    LABEL_OWNER,
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
from orchestrator.backends.kubernetes import lifecycle as pods
from orchestrator.backends.kubernetes.channels import ChannelError
from orchestrator.backends.kubernetes.egress import PodEgress
from orchestrator.backends.kubernetes.kube import JsonObject, KubeClient, KubeError
from orchestrator.backends.kubernetes.manifest import (
    COPY_IN_CONTAINER,
    pod_manifest,
    sandbox_argv,
)
from orchestrator.backends.kubernetes.owners import OwnerLease, owners_alive, shared_lease
from orchestrator.backends.kubernetes.pod_copy import PodCopy
from orchestrator.backends.kubernetes.pod_session import PodSession
from orchestrator.backends.kubernetes.pod_stdio import PodStdio
from orchestrator.backends.kubernetes.preflight import (
    cluster_checks,
    network_policy_problem,
    refusal,
    runtime_class_use,
    unchecked,
)
from orchestrator.backends.kubernetes.remedies import DOCTOR_FIXES
from orchestrator.backends.kubernetes.settings import KubernetesSettings
from orchestrator.backends.kubernetes.watch import PodWatch
from orchestrator.domain.errors import (
    OrchestratorError,
    SandboxStartFailed,
    SandboxUnavailable,
)
from orchestrator.egress import EgressProxy, EgressRoute
from orchestrator.profiles import ResolvedProfile

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

POOL_WORKERS = 16
READ_SIZE = 64 * 1024
OUTPUT_PACE_S = 0.01
#: a session's output goes out as it comes: someone waits for the echo of what they typed
INTERACTIVE_PACE_S = 0.0002
SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
#: how long the network-policy check holds (a policy deleted meanwhile is seen within this)
POLICY_CHECK_TTL_S = 30.0
SYNC_TIMEOUT_S = 30.0
#: how long wait() gives the kubelet to report the end of a pod stopped by kill() (it sends SIGTERM and
#: waits at least 2 s: ~7 s measured), after which the pod is deleted outright
KILL_REPORT_S = 30.0
#: how often a wait looks whether its pod was stopped meanwhile (then its bound applies)
WAIT_RECHECK_S = 2.0
#: how long the kubelet's account of an end the init reported is waited for (it relists once a second); the pod
#: holds its cpu until then (at 30 s a test suite's pooled fill found no room on the 2-core node, most likely
#: for that; at 10 s, 6 of 60 runs at 20 at a time were end_unconfirmed: the account came later under that load)
CONFIRM_S = 10.0
#: how soon the stdio relays are tried again while the pod cannot run them yet (each try is a round trip, and
#: an exec the kubelet refuses leaks a descriptor in the API server: kubernetes/kubernetes#135245), doubling
#: up to STDIO_RETRY_MAX_S
STDIO_RETRY_S = 0.05
STDIO_RETRY_MAX_S = 0.2
#: why a pod is pending when the cluster recorded no Warning event for it
NO_WARNINGS = "no warning events"


@dataclass(eq=False)
class _Pod:
    handle: SandboxHandle
    started: asyncio.Event
    workspace: str  # the controller's copy (copy mode: where the pod's workspace comes back to)
    container_path: str
    stdin: bytes | None = None
    session_argv: list[str] | None = None  # a terminal session's command, exec'd once the pod runs (pod_session)
    tty: bool = False
    start_error: OrchestratorError | None = None
    # attached once the container runs (None: it ended before that); a session's is its exec stream
    stdio: PodStdio | PodSession | None = None
    session_exit: int | None = None  # the exit code a session's exec stream reported
    session_ended_at: datetime | None = None
    capturing: bool = False
    # monotonic time of the first kill(): wait() is bounded from then; its workspace is not copied back
    killed_at: float | None = None
    copy_error: str | None = None
    pooled: bool = False  # pre-started: its init waits for launch()
    launched: bool = False
    interactive: bool = False  # launched as a session: someone waits for what it echoes
    report: str = ""  # the launch's token: the init's status line is under it
    init_status: InitStatus | None = None  # the command's end as its init reported it (wait() did not wait)
    usage_report: InitStatus | None = None  # its report, kept for its usage even where it does not end the run
    # a one-shot command started through the init: launched by start() once the pod's stdio is held
    launch_at_start: LaunchSpec | None = None
    egress_ip: str | None = None  # served by the egress proxy at this address (open_egress), until destroy
    relay: OutputRelay | None = None  # its live output's, while captured


class KubernetesBackend:
    """SandboxBackend on a Kubernetes cluster (``settings``: the config's ``backend.kubernetes``)."""

    name = "kubernetes"

    def __init__(self, settings: KubernetesSettings | None = None) -> None:
        self.settings = settings or KubernetesSettings()
        self._namespace = self.settings.namespace
        self._calls = BlockingCalls(POOL_WORKERS, "k8s-backend")
        self._conn = LazyClient(self._connect, KubeClient.close, self._calls)
        self.capabilities = Capabilities(
            # pvc mode only: in copy mode a pod's workspace is copied in as it starts, long before a claim
            can_pool=self.settings.workspace.mode == "pvc",
            launch_confirmed=True,  # launch() returns once its writer put the message into the pipe of a live init
            sessions=True,
            lists_images=False,  # the nodes' images are not the controller's to list: the probe pods show them
            own_pids_limit=False,  # no per-pod field: the node's podPidsLimit applies
            fixes=DOCTOR_FIXES,
            protected_paths=ENGINE_STATE,
        )
        self._watch: PodWatch | None = None
        self._pods: dict[str, _Pod] = {}
        # the profile whose pod the dry runs send (info()'s RuntimeClass probe, a missing namespace): the doctor's
        # once preflight() was given one, else the built-in default's (preflight.PROBE_PROFILE)
        self._probe_profile: ResolvedProfile | None = None
        self._leases: dict[str, OwnerLease] = {}
        self._policy_checked_at = 0.0
        # pods get pod-level cpu and memory (manifest.pod_resources) until the cluster is seen to drop them
        self._pod_level = True
        self._egress = PodEgress(self.settings.egress)

    @property
    def endpoint(self) -> str:
        kube = self._conn.current
        return kube.server if kube is not None else f"kubernetes:{self.settings.kubeconfig or 'default'}"

    # -- plumbing ------------------------------------------------------------------------------------

    def _pool(self) -> ThreadPoolExecutor:
        return self._calls.pool()

    async def _call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._calls.call(fn, *args, **kwargs)

    def _connect(self) -> KubeClient:
        return KubeClient.connect(self.settings.kubeconfig, self.settings.context)

    def prepare(self) -> None:
        self._conn.prepare((KubeError,))

    async def _client(self) -> KubeClient:
        try:
            return await self._conn.get()
        except ClientClosed:
            raise SandboxUnavailable("the Kubernetes backend is closed") from None
        except KubeError as exc:
            raise self._error(exc, "cannot connect") from exc

    async def _pod_watch(self) -> PodWatch:
        if self._watch is None:
            kube = await self._client()
            self._watch = PodWatch(kube, self._namespace, SELECTOR)
            self._watch.start()
        try:
            await self._watch.synced(SYNC_TIMEOUT_S)
        except TimeoutError as exc:
            raise SandboxUnavailable(
                f"could not list the pods of namespace {self._namespace} within {SYNC_TIMEOUT_S:g}s",
                details={"namespace": self._namespace, "endpoint": self.endpoint},
            ) from exc
        return self._watch

    def _error(
        self, exc: KubeError, message: str, *, cls: type[OrchestratorError] = SandboxUnavailable, **context: object
    ) -> OrchestratorError:
        details: dict[str, object] = {
            **exc.details(),
            "endpoint": self.endpoint,
            "namespace": self._namespace,
            **context,
        }
        if exc.kind == "unreachable":
            return SandboxUnavailable(f"the Kubernetes API server does not answer ({exc.message})", details=details)
        if exc.kind in ("unauthorized", "forbidden") and cls is not SandboxStartFailed:
            return SandboxUnavailable(f"{message}: the API server refused: {exc.message}", details=details)
        return cls(f"{message}: {exc.message}", details=details)

    # -- cluster facts --------------------------------------------------------------------------------

    async def info(self) -> BackendInfo:
        kube = await self._client()
        try:
            version = await self._call(kube.version)
        except KubeError as exc:
            raise self._error(exc, "the API server did not describe itself") from exc
        runtimes = {"runc"}
        for runtime, klass in self.settings.runtime_classes.items():
            if await self._call(self._runtime_class_present, kube, klass):
                runtimes.add(runtime)
        return BackendInfo(
            name=self.name,
            engine_version=str(version.get("gitVersion") or ""),
            endpoint=kube.server,
            runtimes=frozenset(runtimes),
            images=frozenset(),  # the nodes' images are not the controller's to list
            details={
                "namespace": self._namespace,
                "platform": str(version.get("platform") or ""),
                "seccomp": self.settings.seccomp,
                "workspace_mode": self.settings.workspace.mode,
            },
        )

    def _runtime_class_present(self, kube: KubeClient, klass: str) -> bool:
        """Read where allowed; cluster-scoped, so the controller's Role may not: then a pod naming it admitted
        (dry run) shows it is there, as the doctor's own check does."""
        try:
            kube.get_runtime_class(klass)
        except KubeError as exc:
            use = runtime_class_use(klass)
            return exc.kind == "forbidden" and refusal(kube, self.settings, self._probe_profile, use) is None
        return True

    async def _require_network_policy(self, kube: KubeClient) -> None:
        """Profiles ask for no network; on a cluster only a default-deny NetworkPolicy (every pod, both
        directions) says so. Without one, refuse rather than run pods that can reach the network."""
        if not self.settings.require_network_policy:
            return
        now = time.monotonic()
        if now - self._policy_checked_at < POLICY_CHECK_TTL_S:
            return
        try:
            problem = await self._call(network_policy_problem, kube, self.settings, self._probe_profile)
        except KubeError as exc:
            raise self._error(exc, f"cannot read the NetworkPolicies of namespace {self._namespace}") from exc
        if problem is not None:
            raise problem
        self._policy_checked_at = now

    async def _hold_lease(self, kube: KubeClient, owner: str) -> None:
        lease = self._leases.get(owner)
        if lease is None:
            lease = self._leases[owner] = shared_lease(self.endpoint, self._namespace, owner)
        if lease.held_by(kube):
            return
        try:
            await self._call(lease.hold, kube)
        except KubeError as exc:
            raise self._error(exc, "cannot take the controller's lease (orphan collection needs it)") from exc

    # -- one sandbox ------------------------------------------------------------------------------------

    async def create(self, spec: LaunchSpec) -> SandboxHandle:
        """The pod, admitted by the API server; it starts as soon as the scheduler places it. A command the
        init can carry (a one-shot's or a session's, without a terminal) starts as a pre-started pod does,
        and is launched into it as soon as its stdio is held (start()): its init then reports its end, its
        OOM kills and its usage (see ``_reported_end``), as on every other path. A terminal is the kubelet's
        to make: such a session is exec'd into its pod (``pod_session``), the pod's end then the kubelet's."""
        through_init = not spec.pooled and not spec.tty and fits_launch(spec)
        manifest = pod_manifest(spec, self.settings, waiting=through_init, pod_level=self._pod_level)
        name = manifest["metadata"]["name"]
        kube = await self._client()
        await self._require_network_policy(kube)
        owner = spec.labels.get(LABEL_OWNER, "")
        if owner:
            await self._hold_lease(kube, owner)
        await self._pod_watch()  # listed before the pod exists: none of its events can be missed
        creating = asyncio.ensure_future(self._call(kube.create_pod, self._namespace, manifest))
        try:
            created = await asyncio.shield(creating)
        except asyncio.CancelledError:
            creating.add_done_callback(functools.partial(self._delete_abandoned, kube, name))
            raise
        except KubeError as exc:
            raise self._create_error(exc, spec, name) from exc
        if self._pod_level and not (created.get("spec") or {}).get("resources"):
            # the API server dropped the pod-level resources (PodLevelResources off): never a pod whose cpu
            # bound went with them; from now on the sidecar's share comes out of the command's, as before
            log.warning("the cluster drops pod-level resources: the stdio sidecar gets a cpu limit of its own")
            self._pod_level = False
            await self._call(kube.delete_pod_quietly, self._namespace, name, pods.pod_uid(created))
            return await self.create(spec)
        handle = SandboxHandle(execution_id=spec.execution_id, sandbox_id=pods.pod_uid(created), name=name)
        self._pods[name] = _Pod(
            handle=handle,
            started=asyncio.Event(),
            workspace=spec.workspace.local_path,
            container_path=spec.profile.workspace.container_path,
            stdin=None if through_init else spec.stdin,  # through the init: after the launch message
            session_argv=sandbox_argv(spec) if spec.session and not through_init else None,
            tty=spec.tty,
            pooled=spec.pooled or through_init,
            launch_at_start=spec if through_init else None,
        )
        log.debug("created pod %s (%s)", name, handle.sandbox_id)
        return handle

    def _create_error(self, exc: KubeError, spec: LaunchSpec, name: str) -> OrchestratorError:
        profile = spec.profile
        context: dict[str, object] = {"sandbox": name, "image": profile.image, "runtime": profile.runtime}
        text = exc.message.lower()
        if exc.kind == "forbidden" and "runtimeclass" in text:
            return SandboxUnavailable(
                f"the cluster has no RuntimeClass for runtime {profile.runtime!r}, which profile {profile.name!r}"
                f" needs (it is never replaced by another): {exc.message}",
                details={**exc.details(), **context},
            )
        if exc.kind == "forbidden" and "podsecurity" in text.replace(" ", "").replace("-", ""):
            return SandboxStartFailed(
                f"the API server's PodSecurity admission refused pod {name}: {exc.message}",
                details={**exc.details(), **context},
            )
        if exc.kind == "conflict":
            return SandboxStartFailed(
                f"a pod named {name} already exists; sandboxes are never reused", details={**exc.details(), **context}
            )
        return self._error(exc, f"the API server refused pod {name}", cls=SandboxStartFailed, **context)

    def _delete_abandoned(self, kube: KubeClient, name: str, created: asyncio.Future[JsonObject]) -> None:
        if created.cancelled() or created.exception() is not None:
            return
        uid = pods.pod_uid(created.result())
        try:
            self._pool().submit(kube.delete_pod_quietly, self._namespace, name, uid)
        except RuntimeError:
            log.warning("could not delete abandoned pod %s; the reaper collects it", name)

    async def start(self, handle: SandboxHandle) -> None:
        """Until the kubelet runs the container (or it already ended); a pod the cluster will never run
        (image or seccomp profile missing, unschedulable past the start timeout) fails here."""
        pod = self._pods.get(handle.name)
        watch = await self._pod_watch()
        if self.settings.workspace.mode == "copy" and pod is not None:
            try:
                await self._copy_in(pod, watch)
            except OrchestratorError as failed:
                self._fail_start(pod, failed)
                raise

        def decided(last: JsonObject | None, gone: bool) -> bool:
            if gone:
                return True
            if last is None:
                return False
            if pods.running(last) is not None or pods.terminated(last) is not None:
                return True
            return pods.fatal(last) or pods.phase(last) in ("Failed", "Succeeded")

        if pod is not None:
            # the relays first: the command starts as soon as they hold its pipes, without waiting for the
            # kubelet to report the pod running (its status lags up to a second: PLEG's relist period)
            try:
                await self._open_stdio(pod, watch)
                if pod.launch_at_start is not None and pod.stdio is not None:
                    # its init holds the launch pipe, so its container runs: no need to wait for the kubelet
                    # to say so (its status lags up to a second); the command is launched at once
                    spec, pod.launch_at_start = pod.launch_at_start, None
                    await self.launch(handle, spec)
                    pod.started.set()
                    return
            except OrchestratorError as failed:
                self._fail_start(pod, failed)
                raise
        try:
            await watch.until(handle.name, decided, self.settings.start_timeout_s)
        except TimeoutError as exc:
            error: OrchestratorError = SandboxUnavailable(
                f"pod {handle.name} did not start within {self.settings.start_timeout_s:g}s"
                f" ({await self._warnings(handle, NO_WARNINGS)})",
                details={"sandbox": handle.name, "namespace": self._namespace},
            )
            self._fail_start(pod, error)
            raise error from exc
        except KubeError as exc:
            error = self._error(exc, f"lost the watch of pod {handle.name}")
            self._fail_start(pod, error)
            raise error from exc
        last = watch.last(handle.name)
        problem = (
            None if last is None else pods.start_problem(handle.name, self._namespace, last, watch.gone(handle.name))
        )
        if problem is not None:
            self._fail_start(pod, problem)
            raise problem
        if pod is not None:
            pod.started.set()

    async def _open_stdio(self, pod: _Pod, watch: PodWatch) -> None:
        """Connect the command's stdio: the sidecar's relays (``start_barrier``), or a session's exec
        stream (``pod_session``). From then on the command runs, and every byte it writes reaches
        ``capture()``. Tried from the moment the pod exists, again every STDIO_RETRY_S while it cannot
        run yet (not scheduled, the container not started); given up when the pod ends or is stuck
        (start() then says why) or after the start timeout."""
        name = pod.handle.name
        kube = await self._client()
        deadline = time.monotonic() + self.settings.start_timeout_s
        stdio: PodStdio | PodSession
        if pod.session_argv is not None:
            session = stdio = PodSession(kube, self._namespace, name, pod.session_argv, tty=pod.tty)

            async def connect() -> None:
                await self._call(session.open, max(1.0, deadline - time.monotonic()))
                session.start_reading()

        else:
            relays = stdio = PodStdio(kube, self._namespace, name, with_status=pod.pooled)

            async def connect() -> None:
                await relays.open(pod.stdin, max(1.0, deadline - time.monotonic()))
                if pod.pooled:  # the init's stdin pipe held by our writer: a claim sends the message on it
                    await self._call(relays.open_launcher, max(1.0, deadline - time.monotonic()))

        retry_s = STDIO_RETRY_S
        try:
            while True:
                last, gone = watch.last(name), watch.gone(name)
                if gone or (last is not None and (pods.ended(last) or pods.fatal(last))):
                    stdio.close()
                    return  # never to run: start() reports why
                try:
                    await connect()
                except KubeError as exc:
                    if exc.kind in ("forbidden", "unauthorized"):
                        raise self._error(exc, f"cannot relay the stdio of pod {name}", sandbox=name) from exc
                    if time.monotonic() >= deadline:
                        raise SandboxUnavailable(
                            f"the stdio of pod {name} could not be relayed within"
                            f" {self.settings.start_timeout_s:g}s ({await self._warnings(pod.handle, NO_WARNINGS)}):"
                            f" {exc.message[:300]}",
                            details={"sandbox": name},
                        ) from exc
                    await asyncio.sleep(retry_s)
                    retry_s = min(retry_s * 2, STDIO_RETRY_MAX_S)  # each refused exec costs the API server
                    continue
                pod.stdio = stdio
                return
        except BaseException:
            stdio.close()
            raise

    async def _copy_in(self, pod: _Pod, watch: PodWatch) -> None:
        """Copy mode: once the init container runs, the workspace goes in (see ``workspace_copy``)."""
        name = pod.handle.name

        def ready(last: JsonObject | None, gone: bool) -> bool:
            if gone or last is None:
                return gone
            state = pods.init_state(last, COPY_IN_CONTAINER)
            stuck = state.get("waiting") or {}
            return bool(state.get("running") or state.get("terminated") or stuck.get("reason") in pods.FATAL_WAITING)

        try:
            await watch.until(name, ready, self.settings.start_timeout_s)
        except TimeoutError as exc:
            raise SandboxUnavailable(
                f"pod {name} did not start its workspace copy within {self.settings.start_timeout_s:g}s"
                f" ({await self._warnings(pod.handle, NO_WARNINGS)})",
                details={"sandbox": name},
            ) from exc
        last = watch.last(name) or {}
        if not pods.init_state(last, COPY_IN_CONTAINER).get("running"):
            problem = pods.start_problem(name, self._namespace, last, watch.gone(name))
            raise problem or SandboxStartFailed(f"pod {name} ended before its workspace was copied in")
        pod_copy = PodCopy(await self._client(), self._namespace, name, self.settings.workspace.copy_max_bytes)
        await self._call(pod_copy.copy_in, Path(pod.workspace), pod.container_path)

    async def _copy_out(self, pod: _Pod) -> None:
        """Copy mode, after the command exited on its own: its workspace back onto the controller's copy."""
        name = pod.handle.name
        pod_copy = PodCopy(await self._client(), self._namespace, name, self.settings.workspace.copy_max_bytes)
        applied = await self._call(pod_copy.copy_out, Path(pod.workspace), pod.container_path)
        log.debug("copied back %s: %s", name, applied)

    def _fail_start(self, pod: _Pod | None, error: OrchestratorError) -> None:
        if pod is not None:
            pod.start_error = error
            pod.started.set()

    async def _warnings(self, handle: SandboxHandle, none: str = "") -> str:
        """The last few Warning events the cluster recorded for the pod (``events`` of its namespace: why it
        is pending, unschedulable, ...), or ``none``."""
        kube = await self._client()
        try:
            events = await self._call(kube.list_events, self._namespace, handle.name)
        except KubeError:
            return "its events could not be read"
        warnings = [f"{e.get('reason')}: {e.get('message')}" for e in events if e.get("type") == "Warning"]
        return "; ".join(warnings[-3:]) or none

    async def capture(
        self,
        handle: SandboxHandle,
        stdout_limit: int,
        stderr_limit: int,
        on_output: OutputCallback | None = None,
    ) -> tuple[StreamCapture, StreamCapture]:
        """The command's output as the runtime hands it over (attach), stdout and stderr apart, until the
        container ends; every byte counted, the first ``*_limit`` kept."""
        pod = self._pods.get(handle.name)
        if pod is None or pod.capturing:
            raise SandboxUnavailable(
                f"no output stream for {handle.name}: capture() reads a pod this backend created, once",
                details={"sandbox": handle.name},
            )
        pod.capturing = True
        await pod.started.wait()
        stdio = pod.stdio
        if pod.start_error is not None or stdio is None:
            return StreamSink(0).result(), StreamSink(0).result()
        relay = None
        if on_output is not None:
            pace = INTERACTIVE_PACE_S if isinstance(stdio, PodSession) or pod.interactive else OUTPUT_PACE_S
            relay = pod.relay = OutputRelay(asyncio.get_running_loop(), on_output, max_chunk=READ_SIZE, pace=pace)
        stdout = StreamSink(stdout_limit, None if relay is None else functools.partial(relay.post, "stdout"))
        stderr = StreamSink(stderr_limit, None if relay is None else functools.partial(relay.post, "stderr"))
        stdio.deliver_to(stdout.write, stderr.write)
        try:
            await asyncio.shield(stdio.until_done())
            if relay is not None:
                relay.drain()
        except asyncio.CancelledError:
            stdio.close()
            raise
        except ChannelError as exc:
            stdio.close()
            raise SandboxUnavailable(
                f"lost the output of {handle.name}: {exc}", details={"sandbox": handle.name}
            ) from exc
        finally:
            if relay is not None:
                relay.close()
        captured = stdout.result(), stderr.result()
        refusal = init_refusal(pod.report, *captured)
        if refusal is not None:  # its init ran nothing: what a cold start's refusal says (as on Docker)
            raise SandboxStartFailed(
                f"the kubelet's container could not start the command in pod {handle.name}: {refusal.reason}",
                details={"sandbox": handle.name, "init_status": refusal.status}
                | ({"command_not_found": True} if refusal.status == 127 else {}),
            )
        return captured

    async def wait(self, handle: SandboxHandle) -> int:
        pod = self._pods.get(handle.name)
        if pod is not None:
            await pod.started.wait()
            if pod.start_error is not None:
                raise SandboxStartFailed(f"pod {handle.name} never started", details={"sandbox": handle.name})
        watch = await self._pod_watch()
        if pod is not None and isinstance(pod.stdio, PodSession):
            code = await self._session_exit(pod, pod.stdio, watch)
            if code is not None:
                return code
        if pod is not None and pod.report and isinstance(pod.stdio, PodStdio):
            status = await self._reported_end(handle, pod, pod.stdio, watch)
            if status is not None:
                await self._close_egress(pod)
                if self.settings.workspace.mode == "copy" and pod.copy_error is None:
                    await self._copy_out(pod)  # every process of the command is gone: its workspace is settled
                return status.exit_code
        await self._until_ended(handle, pod, watch)
        if pod is not None:
            await self._close_egress(pod)
        last = watch.last(handle.name)
        state = None if last is None else pods.exit_state(last)
        ours = pod is None or pod.killed_at is not None  # stopped by us (a deadline, a cancel, a close)
        # its init saw who stopped it: the signal it forwarded came from outside the sandbox, not from us
        forwarded = None if ours or pod is None or pod.usage_report is None else pod.usage_report.stopped
        if last is None or state is None or state.exit_code is None:
            raise pods.no_exit_code(handle.name, state, forwarded)
        if not ours and pods.deadline_exceeded(last):
            raise pods.past_deadline(handle.name, state.exit_code)
        if not ours and (forwarded or pods.deleted_before_its_end(last)):
            raise stopped_from_outside(handle.name, forwarded, state.exit_code)
        if self.settings.workspace.mode == "copy" and pod is not None:
            if pod.killed_at is not None or (last is not None and pods.deadline_exceeded(last)):
                pod.copy_error = "the sandbox was stopped: its workspace changes were not copied back"
            elif pod.copy_error is None:
                await self._copy_out(pod)
        return state.exit_code

    async def _close_egress(self, pod: _Pod) -> None:
        if pod.egress_ip is not None:  # its address may go to another pod from now on
            ip, pod.egress_ip = pod.egress_ip, None
            await asyncio.shield(self._egress.close(ip))

    async def _reported_end(
        self, handle: SandboxHandle, pod: _Pod, stdio: PodStdio, watch: PodWatch
    ) -> InitStatus | None:
        """The command's end as its init reported it, as soon as it did; None when the init's pipe ended
        without a report under this launch's token (the init was killed, the pod stopped or evicted, the
        node lost) -- then the pod's end as the kubelet reports it says, as for any pod."""
        if pod.init_status is not None:
            return pod.init_status
        reported = asyncio.ensure_future(stdio.status())
        ended = asyncio.ensure_future(self._until_ended(handle, pod, watch))
        try:
            await asyncio.wait({reported, ended}, return_when=asyncio.FIRST_COMPLETED)
            if not reported.done():  # the pod ended first: its pipe ends with it (its reader sees the end)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(WAIT_RECHECK_S):
                        await asyncio.shield(reported)
            data = reported.result() if reported.done() and not reported.cancelled() else b""
        finally:
            reported.cancel()
            if not ended.done():
                ended.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await ended
        report = parse_status(data, pod.report)
        if report is None and data:
            log.warning(
                "pod %s: its status pipe carried %d bytes that are no report of its init", handle.name, len(data)
            )
        pod.usage_report = report
        if pod.killed_at is not None or (report is not None and report.stopped):
            # stopped by us or from outside (a deadline, an eviction, a deletion): the kubelet's account says
            # how it ended, never the command's answer to the SIGTERM its init forwarded
            return None
        if report is not None and report.oom_kills is None:
            # its cgroup keeps no OOM count (gVisor's): only the kubelet can say whether it was an OOM kill
            return None
        pod.init_status = report
        return report

    def end_reported(self, handle: SandboxHandle) -> bool:
        """Whether wait()'s exit came from the sandbox's own init (the kubelet's account of it follows)."""
        pod = self._pods.get(handle.name)
        return pod is not None and pod.init_status is not None

    async def confirm_end(self, handle: SandboxHandle) -> ExitState | None:
        """The kubelet's own account of an end the init reported, once it reports it (within CONFIRM_S:
        it relists once a second); None if it does not in time."""
        watch = await self._pod_watch()

        def terminated(last: JsonObject | None, gone: bool) -> bool:
            return gone or (last is not None and pods.terminated(last) is not None)

        try:
            await watch.until(handle.name, terminated, CONFIRM_S)
        except (TimeoutError, KubeError):
            return None
        last = watch.last(handle.name)
        if last is None or pods.terminated(last) is None:
            return None
        return pods.exit_state(last)

    async def _session_exit(self, pod: _Pod, session: PodSession, watch: PodWatch) -> int | None:
        """A session's exit code as its exec stream reported it (its workspace copied back in copy mode);
        None when the pod was stopped (then the pod's end says). A stream that ended without an exit code
        while the pod runs is no exit: the pod is stopped and the run is SANDBOX.UNAVAILABLE."""
        name = pod.handle.name
        await self._until_stream_ends(pod, session)
        last = watch.last(name)
        stopped = (
            pod.killed_at is not None
            or watch.gone(name)
            or (last is not None and (pods.ended(last) or pods.deadline_exceeded(last) or pods.deleting(last)))
        )
        if stopped:
            return None
        if session.exit_code is None:
            await self.kill(pod.handle)
            raise SandboxUnavailable(
                f"the session stream of pod {name} ended without its command's exit code (the connection to the"
                " API server was lost); the pod was stopped",
                details={"sandbox": name},
            )
        pod.session_exit, pod.session_ended_at = session.exit_code, session.ended_at
        if self.settings.workspace.mode == "copy" and pod.copy_error is None:
            await self._copy_out(pod)
        return session.exit_code

    async def _until_stream_ends(self, pod: _Pod, session: PodSession) -> None:
        """Until the session's stream ended; once the pod was stopped, at most KILL_REPORT_S more (a wedged
        stream is closed then, and the pod's own end is awaited, bounded too)."""
        reader = session.reader
        while reader is not None and not reader.done():
            await asyncio.wait({reader}, timeout=WAIT_RECHECK_S)
            if pod.killed_at is not None and time.monotonic() >= pod.killed_at + KILL_REPORT_S:
                session.close()
                return

    async def _until_ended(self, handle: SandboxHandle, pod: _Pod | None, watch: PodWatch) -> None:
        """Until the kubelet reports the end; once the pod was stopped, at most ``KILL_REPORT_S`` more: a
        pod that does not stop then (a wedged runtime) is deleted outright and the run ends unavailable."""

        def ended(last: JsonObject | None, gone: bool) -> bool:
            return gone or (last is not None and pods.ended(last))

        while True:
            try:
                await watch.until(handle.name, ended, WAIT_RECHECK_S)
                return
            except TimeoutError:
                if pod is None or pod.killed_at is None or time.monotonic() < pod.killed_at + KILL_REPORT_S:
                    continue
            except KubeError as exc:
                raise self._error(exc, f"lost pod {handle.name} while waiting for it", sandbox=handle.name) from exc
            kube = await self._client()
            with contextlib.suppress(KubeError):
                await self._call(kube.delete_pod, self._namespace, handle.name, grace_seconds=0, uid=handle.sandbox_id)
            raise SandboxUnavailable(
                f"pod {handle.name} did not stop within {KILL_REPORT_S:g}s of being stopped; it was deleted",
                details={"sandbox": handle.name},
            )

    async def kill(self, handle: SandboxHandle, signal: str = "SIGKILL") -> None:
        """Stop the pod now, keeping it for inspection: its ``activeDeadlineSeconds`` is cut to 1, so the
        kubelet kills it (grace 0) and reports the end. A pod that already ended or is gone is no error."""
        del signal  # the kubelet decides the signal: SIGKILL, as the pod has no grace period
        pod = self._pods.get(handle.name)
        if pod is not None and pod.killed_at is None:
            pod.killed_at = time.monotonic()
        kube = await self._client()
        try:
            await self._call(kube.patch_pod, self._namespace, handle.name, {"spec": {"activeDeadlineSeconds": 1}})
        except KubeError as exc:
            if exc.kind in ("not_found", "invalid", "conflict"):
                log.debug("kill %s: %s", handle.name, exc.message)
                return
            raise self._error(exc, f"could not stop pod {handle.name}", sandbox=handle.name) from exc

    async def inspect(self, handle: SandboxHandle) -> ExitState:
        watch = await self._pod_watch()
        last = watch.last(handle.name)
        if last is None:
            kube = await self._client()
            try:
                last = await self._call(kube.get_pod, self._namespace, handle.name)
            except KubeError as exc:
                raise self._error(exc, f"cannot inspect pod {handle.name}", sandbox=handle.name) from exc
        state = pods.exit_state(last)
        pod = self._pods.get(handle.name)
        if pod is not None and pod.init_status is not None:  # its init's report; the kubelet's follows
            reported = pod.init_status.exit_state()
            return dataclasses.replace(reported, image_id=state.image_id, error=pod.copy_error)
        if pod is not None and pod.session_exit is not None:  # the session's command, not the idle container
            state = dataclasses.replace(state, exit_code=pod.session_exit, finished_at=pod.session_ended_at)
        notes = [state.error]
        if state.exit_code is None or state.error:  # the pod's Warning events say why (evicted, failed, ...)
            notes.append(await self._warnings(handle))
        if pod is not None:
            notes.append(pod.copy_error)
        error = "; ".join(note for note in notes if note) or None
        return dataclasses.replace(state, error=error) if error != state.error else state

    async def usage(self, handle: SandboxHandle) -> ResourceUsage:
        """What the init read from the pod's own cgroup at the command's end; unknown without its report (the
        kubelet's figures are node-scoped: the controller has no node access)."""
        pod = self._pods.get(handle.name)
        if pod is not None and pod.usage_report is not None:
            return pod.usage_report.usage()
        return ResourceUsage()

    async def destroy(self, handle: SandboxHandle) -> None:
        """Delete the pod (that pod: its uid is a precondition). Idempotent. A pod whose init reported its
        command's end is deleted once the kubelet reported that end too (within CONFIRM_S): its lifecycle
        on the record is whole, as for any pod (start and die as the kubelet saw them)."""
        reported = self._pods.get(handle.name)
        if reported is not None and reported.init_status is not None and reported.killed_at is None:
            await self.confirm_end(handle)
        pod = self._pods.pop(handle.name, None)
        if pod is not None and pod.egress_ip is not None:  # its connections end (and are recorded) before it goes
            await asyncio.shield(self._egress.close(pod.egress_ip))
        if pod is not None and pod.stdio is not None:
            pod.stdio.close()
        kube = await self._client()
        try:
            await self._call(
                kube.delete_pod, self._namespace, handle.name, grace_seconds=0, uid=handle.sandbox_id or None
            )
        except KubeError as exc:
            if exc.kind not in ("not_found", "conflict"):  # conflict: the uid differs, that pod is gone
                raise self._error(exc, f"could not delete pod {handle.name}", sandbox=handle.name) from exc

    # -- sessions ---------------------------------------------------------------------------------------

    def _session(self, handle: SandboxHandle) -> PodSession | PodStdio:
        """A session's stdio: its init's relays (it was launched as a session), or a terminal's exec stream."""
        pod = self._pods.get(handle.name)
        if pod is None or pod.stdio is None or pod.stdio.feed is None:
            raise SandboxUnavailable(
                f"{handle.name} takes no input: it is gone, or was not created as a session",
                details={"sandbox": handle.name},
            )
        return pod.stdio

    async def send_input(self, handle: SandboxHandle, data: bytes) -> None:
        session = self._session(handle)
        assert session.feed is not None
        send_to(session.feed, handle.name, data)

    async def end_input(self, handle: SandboxHandle) -> None:
        session = self._session(handle)
        if not session.can_end_input:
            raise SandboxUnavailable(
                f"{handle.name}: the API server cannot close an exec's stdin alone (v5.channel.k8s.io, Kubernetes"
                " 1.30 or later); end the session instead",
                details={"sandbox": handle.name},
            )
        assert session.feed is not None
        session.feed.end()

    async def resize(self, handle: SandboxHandle, rows: int, cols: int) -> None:
        session = self._session(handle)
        if not isinstance(session, PodSession) or not session.tty:
            raise SandboxUnavailable(f"{handle.name} has no terminal to resize", details={"sandbox": handle.name})
        try:  # not on the backend's pool: a resize may wait behind input the command does not read
            await asyncio.to_thread(session.resize, rows, cols)
        except ChannelError as exc:
            raise SandboxUnavailable(
                f"could not resize the terminal of {handle.name}: {exc}", details={"sandbox": handle.name}
            ) from exc

    # -- pods started waiting (pre-started, egress) ------------------------------------------------------

    def still_waiting(self, handle: SandboxHandle) -> bool | None:
        """From the pod watch (no round trip): its container runs (the init waits), or it ended."""
        pod = self._pods.get(handle.name)
        if pod is None or self._watch is None:
            return False if pod is None else None
        if pod.launched:
            return None
        last = self._watch.last(handle.name)
        if pods.gone_or_ended(last, self._watch.gone(handle.name)):
            return False
        return None if last is None else pods.running(last) is not None

    def fits_launch(self, spec: LaunchSpec) -> bool:
        return fits_launch(spec)

    async def launch(self, handle: SandboxHandle, spec: LaunchSpec) -> None:
        """The launch message (then ``spec.stdin``, then EOF) into the init's stdin pipe, through the writer
        exec'd in the sidecar when the pod was filled (``start_barrier``): no exec at claim time. Returns
        once the whole message is in the pipe of a live init; SANDBOX.UNAVAILABLE if its init is gone."""
        pod = self._pods.get(handle.name)
        if pod is None or not pod.pooled or pod.launched or not isinstance(pod.stdio, PodStdio):
            raise SandboxUnavailable(
                f"{handle.name} takes no launch: it is gone, was not pre-started, or was launched already",
                details={"sandbox": handle.name},
            )
        if spec.tty:  # a terminal is the kubelet's to make, for an exec: never one without it
            raise SandboxUnavailable(
                f"{handle.name} was pre-started without a terminal: a command with tty starts cold",
                details={"sandbox": handle.name},
            )
        pod.report = new_report_token()
        message = spec_launch_message(spec, report=pod.report, status_channel=True)
        pod.launched, pod.interactive = True, spec.session  # launched exactly once, whatever happens next
        if spec.session and pod.relay is not None:  # captured already (a pooled pod's): paced from now on
            pod.relay.set_pace(INTERACTIVE_PACE_S)
        launch = functools.partial(pod.stdio.launch, session=spec.session)
        await self._call(launch, message, spec.stdin, self.settings.start_timeout_s)

    # -- egress -----------------------------------------------------------------------------------------

    def egress_problem(self, profile: ResolvedProfile) -> str | None:
        if self.settings.workspace.mode != "pvc":  # the command is launched into a waiting pod (as a pooled one)
            return "egress needs the workspace mounted (backend.kubernetes.workspace.mode: pvc) in this release"
        return self._egress.problem()

    async def open_egress(self, handle: SandboxHandle, route: EgressRoute, proxy: EgressProxy) -> str:
        """The proxy's route for the pod's IP (see kubernetes/egress.py), before its launch."""
        pod = self._pods.get(handle.name)
        if pod is None or not pod.pooled or pod.launched or pod.egress_ip is not None:
            raise SandboxUnavailable(
                f"{handle.name} takes no egress: it is gone, was not started waiting, or was launched already",
                details={"sandbox": handle.name},
            )
        watch = await self._pod_watch()

        def addressed(last: JsonObject | None, gone: bool) -> bool:
            return gone or bool(pods.ip(last))

        try:
            await watch.until(handle.name, addressed, self.settings.start_timeout_s)
        except TimeoutError as exc:
            raise SandboxUnavailable(f"pod {handle.name} got no address", details={"sandbox": handle.name}) from exc
        ip = pods.ip(watch.last(handle.name))
        if ip is None:
            raise SandboxUnavailable(
                f"pod {handle.name} ended before it had an address", details={"sandbox": handle.name}
            )
        url = await self._egress.open(proxy, handle.name, ip, route)
        pod.egress_ip = ip
        return url

    # -- observation ------------------------------------------------------------------------------------

    def events(self, execution_id: str | None = None) -> AsyncGenerator[LifecycleEvent, None]:
        return self._events(execution_id)

    async def _events(self, execution_id: str | None) -> AsyncGenerator[LifecycleEvent, None]:
        watch = await self._pod_watch()
        queue = watch.subscribe(execution_id)
        try:
            while True:
                item = await queue.get()
                if isinstance(item, KubeError):
                    raise self._error(item, "the pod watch failed")
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            watch.unsubscribe(execution_id, queue)

    async def preflight(self, profile: ResolvedProfile | None = None) -> list[PreflightCheck]:
        """The cluster as the controller sees it: namespace, PodSecurity, NetworkPolicy, RuntimeClasses,
        permissions (see ``preflight``), each dry run sending the pod a run of ``profile`` gets (kept for info()'s
        dry runs too). Each skipped when the API server does not answer (the engine check says why)."""
        if profile is not None:
            self._probe_profile = profile
        try:
            kube = await self._client()
        except SandboxUnavailable:
            return unchecked(self.settings)  # the doctor's engine check says why (info() connects the same way)
        return await self._call(cluster_checks, kube, self.settings, self._probe_profile)

    def workspace_root(self) -> str | None:
        """pvc mode: workspaces must be below the claim's root; copy mode: anywhere."""
        return self.settings.workspace.root if self.settings.workspace.mode == "pvc" else None

    async def list_managed(self) -> list[ManagedSandbox]:
        kube = await self._client()
        try:
            listed, _ = await self._call(kube.list_pods, self._namespace, SELECTOR)
            leases = await self._call(kube.list_leases, self._namespace, SELECTOR)
        except KubeError as exc:
            raise self._error(exc, "cannot list sandbox pods") from exc
        alive = owners_alive(leases, datetime.now(UTC))
        return [pods.managed_sandbox(pod, alive) for pod in listed]

    async def close(self) -> None:
        kube = self._conn.detach()  # closed last: the leases are released with it
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        for lease in self._leases.values():
            if kube is not None:
                with contextlib.suppress(Exception):
                    await asyncio.get_running_loop().run_in_executor(self._pool(), lease.release, kube)
        self._leases.clear()
        self._pods.clear()
        if kube is not None:
            kube.close()
        self._calls.shutdown()
