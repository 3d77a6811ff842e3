"""The contract every sandbox backend (Docker, Kubernetes) fulfils: one protocol, capabilities as data.

A backend only launches and observes: it never decides. The service drives one execution as
create → start → (output ‖ wait with deadline) → inspect → destroy, with the engine's own
lifecycle events streamed beside it. Blocking client libraries run off the event loop.

Every backend has every method (sessions' input, pre-started sandboxes' launch, egress); what it can do as
configured is said by its ``capabilities`` (and ``egress_problem`` for one profile), which the pipeline reads
instead of asking for the backend's type or name. What a launch is (a one-shot command, a session, a sandbox
started waiting) is a small sum of kinds (``LaunchKind``): a combination no backend runs cannot be built.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

from orchestrator.backends._support.labels import (
    LABEL_DEADLINE,
    LABEL_EXECUTION_ID,
    LABEL_MANAGED_BY,
    LABEL_OWNER,
    LABEL_PROFILE_HASH,
    MANAGED_BY,
    sandbox_labels,
)
from orchestrator.backends.checks import DoctorFixes, PreflightCheck
from orchestrator.domain.errors import InputInvalid
from orchestrator.egress import EgressProxy, EgressRoute
from orchestrator.profiles import ResolvedProfile

__all__ = [
    "INPUT_BACKLOG_BYTES",
    "LABEL_DEADLINE",
    "LABEL_EXECUTION_ID",
    "LABEL_MANAGED_BY",
    "LABEL_OWNER",
    "LABEL_PROFILE_HASH",
    "MANAGED_BY",
    "BackendInfo",
    "Capabilities",
    "CommandLaunch",
    "DoctorFixes",
    "ExitState",
    "LaunchKind",
    "LaunchSpec",
    "LifecycleEvent",
    "LifecycleKind",
    "ManagedSandbox",
    "OutputCallback",
    "OutputStream",
    "PooledLaunch",
    "PreflightCheck",
    "ResourceUsage",
    "SandboxBackend",
    "SandboxHandle",
    "SessionLaunch",
    "StreamCapture",
    "Workspace",
]

LifecycleKind = Literal["create", "schedule", "start", "die", "oom", "kill", "destroy"]
OutputStream = Literal["stdout", "stderr"]
OutputCallback = Callable[[OutputStream, bytes], None]
"""Receives output as it is produced: ``(stream, chunk)``, on the event loop's thread, in order."""


@dataclass(frozen=True, slots=True)
class Workspace:
    """The execution's workspace: a directory the controller sees (``local_path``, where the side effects
    are measured). How it reaches the sandbox is the backend's: Docker bind-mounts it; Kubernetes mounts
    the same storage's sub-path (a claim) or copies it in and the changes back out."""

    local_path: str


@dataclass(frozen=True, slots=True)
class CommandLaunch:
    """A one-shot command: ``argv`` runs as the sandbox starts. ``stdin``: bytes it reads, then EOF (None: no
    stdin at all); ``tty``: a terminal (stdout and stderr merged), never with stdin bytes (a terminal echoes
    its input, and the engine ends a terminal's output when its input ends: piped bytes cannot keep their
    meaning there). A backend may still refuse a terminal for a one-shot command (Kubernetes does)."""

    stdin: bytes | None = None
    tty: bool = False

    def __post_init__(self) -> None:
        if self.stdin is not None and self.tty:
            raise InputInvalid("stdin cannot be combined with tty or a session", details={"field": "stdin"})


@dataclass(frozen=True, slots=True)
class SessionLaunch:
    """A session: the command's stdin stays open for what ``send_input`` brings while it runs (with ``tty``,
    the command's terminal); never stdin bytes up front."""

    tty: bool = False


@dataclass(frozen=True, slots=True)
class PooledLaunch:
    """A sandbox started waiting: its command is our init (``images/init/sandbox-init.c``), waiting on a
    channel only its backend holds for one ``launch``, which brings argv, env, working directory and stdin
    (the spec's own argv, env and workdir are unused: everything else is the sandbox's). What pre-started
    sandboxes are made as, and an egress run's sandbox before its proxy is in reach. No terminal, no stdin of
    its own."""


LaunchKind = CommandLaunch | SessionLaunch | PooledLaunch


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """Everything needed to launch one execution. ``argv`` runs exactly as asked."""

    execution_id: str
    argv: tuple[str, ...]
    profile: ResolvedProfile
    workspace: Workspace
    workdir: str  # absolute path inside the container, inside the workspace mount
    env: Mapping[str, str]  # final environment: profile defaults + allowed request values (secret)
    owner: str  # the controller that owns the sandbox (its LABEL_OWNER; "" for none: an orphan once seen)
    deadline_unix: float
    kind: LaunchKind = CommandLaunch()
    # the run's egress, when its profile allows some (a one-shot command's): served from open_egress() to destroy()
    egress: EgressRoute | None = None

    @property
    def labels(self) -> dict[str, str]:
        """The sandbox's labels (``_support.labels``: one set, whatever the backend)."""
        return sandbox_labels(
            self.execution_id,
            owner=self.owner,
            deadline_unix=self.deadline_unix,
            profile_hash=self.profile.profile_hash,
        )

    @property
    def stdin(self) -> bytes | None:
        """A one-shot command's stdin bytes (None: none, or another kind)."""
        return self.kind.stdin if isinstance(self.kind, CommandLaunch) else None

    @property
    def tty(self) -> bool:
        return not isinstance(self.kind, PooledLaunch) and self.kind.tty

    @property
    def session(self) -> bool:
        return isinstance(self.kind, SessionLaunch)

    @property
    def pooled(self) -> bool:
        return isinstance(self.kind, PooledLaunch)


@dataclass(frozen=True, slots=True)
class SandboxHandle:
    execution_id: str
    sandbox_id: str  # container id / pod uid
    name: str


@dataclass(frozen=True, slots=True)
class LifecycleEvent:
    """One event as the engine reported it, with the engine's timestamp."""

    kind: LifecycleKind
    sandbox_id: str
    execution_id: str | None
    engine_ts: datetime
    exit_code: int | None = None
    signal: str | None = None
    attributes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StreamCapture:
    """One output stream as produced (not yet redacted): the first ``limit`` bytes kept, the whole
    stream counted. Never hashed: it may hold secrets (the service redacts, then caps, then hashes)."""

    data: bytes
    total_bytes: int
    truncated: bool  # the stream was longer than what was kept


@dataclass(frozen=True, slots=True)
class ExitState:
    exit_code: int | None  # None when the sandbox never ran to an exit
    oom_killed: bool  # from the engine's state or the kernel's OOM-kill count, never guessed from 137
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None = None  # the engine's own error text, if any
    image_id: str | None = None  # the image the engine actually ran (content id), for evidence
    # the runtime itself stopped the sandbox when it reached its pids limit (gVisor: its own threads
    # count against the limit, and its kernel dies when it cannot create one), from the kernel's counter
    pids_limit_killed: bool = False


@dataclass(frozen=True, slots=True)
class ResourceUsage:
    """What the engine reports; any field may be unknown."""

    memory_peak_bytes: int | None = None
    cpu_total_ns: int | None = None
    pids_peak: int | None = None
    # process (or thread) creations refused at the pids limit; a lower bound when the sandbox ended before
    # its cgroup could be read once more (the runtime removes it within milliseconds)
    pids_limit_hits: int | None = None
    # who read the figures: "cgroup" (the controller, from the sandbox's cgroup on the engine's host) or "init"
    # (the sandbox's own init, at its command's end); None when nothing was read
    source: str | None = None


@dataclass(frozen=True, slots=True)
class ManagedSandbox:
    """A sandbox carrying our labels, as listed by the engine (for orphan collection)."""

    sandbox_id: str
    name: str
    execution_id: str | None
    owner: str | None
    deadline_unix: float | None
    state: str
    # whether the owner still runs, where the backend knows (Kubernetes: the owner's Lease); None: the
    # reaper asks the host (a process on this host) or goes by the deadline alone
    owner_alive: bool | None = None


@dataclass(frozen=True, slots=True)
class BackendInfo:
    name: str  # "docker" / "kubernetes"
    engine_version: str
    endpoint: str
    runtimes: frozenset[str]
    images: frozenset[str]  # locally available image references (repo:tag)
    details: Mapping[str, str] = field(default_factory=dict)  # cgroup version/driver, seccomp support, ...


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend, as configured, can do and asks of its callers: data the pipeline reads, never the
    backend's type or name. Fixed for the backend's life (its configuration and endpoint are)."""

    # starts sandboxes waiting (PooledLaunch) and launches a command into one: what pre-started sandboxes
    # need, and egress runs too (their command is launched once the proxy is in the sandbox's reach)
    can_pool: bool
    # True: ``launch`` returns only once a live init holds the message (else SANDBOX.UNAVAILABLE), so the
    # sandbox's end is its command's. False: the caller compares the end's time with the launch's (a sandbox
    # that ended before it was launched ran nothing)
    launch_confirmed: bool
    # takes input while a sandbox runs (SessionLaunch: send_input, end_input, resize); without it, no session
    # runs (never one without its input)
    sessions: bool
    # ``info().images`` lists every image the engine has (the doctor checks each profile's, and probes only
    # those present); False: the images are not the controller's to list (a cluster's nodes)
    lists_images: bool
    # a sandbox has a pids limit of its own (the doctor's probe compares it with the profile's); False: the
    # node's applies (shown, not compared)
    own_pids_limit: bool
    # the fixes of what the doctor's generic checks find missing (the engine, a runtime, an image, the limits)
    fixes: DoctorFixes
    # host paths (and everything below them) never given to a sandbox as its workspace, nor a directory that
    # contains one: the engine's state and socket (the pipeline protects the host's system directories itself)
    protected_paths: tuple[str, ...] = ()


@runtime_checkable
class SandboxBackend(Protocol):
    """Async; every method may raise SandboxUnavailable / SandboxStartFailed (with the engine's payload
    in ``details``), never a client library's own exception."""

    @property
    def capabilities(self) -> Capabilities:
        """What this backend, as configured, can do (see ``Capabilities``)."""
        ...

    def prepare(self) -> None:
        """Begin connecting to the engine in the background (a speed-up only: never raises; what
        fails is reported by the first real call)."""

    async def info(self) -> BackendInfo: ...

    def events(self, execution_id: str | None = None) -> AsyncGenerator[LifecycleEvent, None]:
        """Lifecycle events of sandboxes with our labels (one execution if given), from now on,
        until closed with ``aclose()``."""
        ...

    async def create(self, spec: LaunchSpec) -> SandboxHandle: ...

    async def start(self, handle: SandboxHandle) -> None: ...

    async def capture(
        self,
        handle: SandboxHandle,
        stdout_limit: int,
        stderr_limit: int,
        on_output: OutputCallback | None = None,
    ) -> tuple[StreamCapture, StreamCapture]:
        """Stream stdout and stderr until the sandbox closes them; keep up to the limits.

        ``on_output`` gets what is kept, raw (the caller redacts), as it arrives: chunks of at most the
        backend's read size, called on the event loop's thread (never the reader's), in order, never after
        ``capture`` returns. Nothing past the limits reaches it, so chunks waiting for a busy loop never hold more
        than the limits. If it raises, that is logged (the exception's type only: the data may hold
        secrets) and it is not called again; the capture goes on."""
        ...

    async def wait(self, handle: SandboxHandle) -> int:
        """The exit code, once the sandbox exits (after ``start``; the caller enforces the deadline)."""
        ...

    async def kill(self, handle: SandboxHandle, signal: str = "SIGKILL") -> None: ...

    async def inspect(self, handle: SandboxHandle) -> ExitState: ...

    async def usage(self, handle: SandboxHandle) -> ResourceUsage: ...

    async def destroy(self, handle: SandboxHandle) -> None:
        """Remove the sandbox and its anonymous volumes; idempotent; safe on every path. A sandbox with
        egress has its route closed first (every connection's record emitted)."""
        ...

    async def list_managed(self) -> list[ManagedSandbox]: ...

    async def preflight(self, profile: ResolvedProfile | None = None) -> list[PreflightCheck]:
        """Backend-specific checks for ``sandboxctl doctor`` (beyond engine facts, profiles and probes). A backend
        that tests its cluster by dry runs sends the sandbox of ``profile`` (the doctor's default profile, as runs
        under its config get it; None: the built-in default's), so that what it admits is what runs get."""
        ...

    def workspace_root(self) -> str | None:
        """Where workspaces must live for this backend to reach them (None: anywhere on this host)."""
        ...

    async def close(self) -> None: ...

    # -- sessions (a SessionLaunch; Capabilities.sessions) --------------------------------------------------
    # Its output comes through ``capture(on_output=...)`` like any other.

    async def send_input(self, handle: SandboxHandle, data: bytes) -> None:
        """Queue ``data`` for the command's stdin, in order; returns at once (a command that does not
        read is not the caller's wait). Raises SandboxUnavailable once the input is closed or too much
        waits unread (INPUT_BACKLOG_BYTES)."""
        ...

    async def end_input(self, handle: SandboxHandle) -> None:
        """Close the command's stdin after what is queued (EOF); idempotent."""
        ...

    async def resize(self, handle: SandboxHandle, rows: int, cols: int) -> None:
        """Set the terminal's window size (a session with ``tty``): the command gets SIGWINCH."""
        ...

    # -- sandboxes started waiting (a PooledLaunch; Capabilities.can_pool) ----------------------------------
    # One created (and started) so runs our init, waiting for its command on a channel only this backend
    # holds; ``launch`` sends it, once: the command replaces the init in a sandbox no one has used. From then
    # on the sandbox is driven like any other (capture, wait, inspect, destroy).

    def fits_launch(self, spec: LaunchSpec) -> bool:
        """Whether ``spec``'s command can be launched into a waiting sandbox (a one-shot command or a
        session's, without a terminal, within what a launch carries): a run that does not starts cold."""
        ...

    async def launch(self, handle: SandboxHandle, spec: LaunchSpec) -> None:
        """Hand the waiting sandbox ``spec``'s argv, env, workdir and stdin (its other settings must be the
        sandbox's: the caller's pool key guarantees it). SANDBOX.UNAVAILABLE if it cannot take it."""
        ...

    def still_waiting(self, handle: SandboxHandle) -> bool | None:
        """Whether the waiting sandbox's init still waits, when this process can tell without asking the
        engine (its pid, watched); None when it cannot (the caller inspects)."""
        ...

    # -- an end the sandbox's own init reported ------------------------------------------------------------
    # A launched sandbox's init may report its command's end itself, on a channel the command cannot write
    # (sandbox-init.c's status channel), before the engine notices it (a kubelet relists once a second). Then
    # wait() returns at the report, inspect() and usage() give the report's figures, every process of the
    # sandbox is gone (the init killed them), and the engine's own account is only the confirmation: the
    # caller records the end first and asks ``confirm_end`` after (then compares, then destroys).

    def end_reported(self, handle: SandboxHandle) -> bool:
        """Whether wait()'s exit came from the sandbox's own init."""
        ...

    async def confirm_end(self, handle: SandboxHandle) -> ExitState | None:
        """The engine's own account of an end the init reported, once the engine has it (bounded by the
        backend); None when it did not come in time."""
        ...

    # -- egress (``ResolvedProfile.network`` allowlist) -----------------------------------------------------
    # The egress proxy becomes the sandbox's only route. The sandbox is made started waiting (PooledLaunch),
    # ``open_egress`` puts the proxy in its reach, then ``launch`` runs the command. The route is served until
    # ``destroy``, which closes it (every connection's record emitted) first.

    def egress_problem(self, profile: ResolvedProfile) -> str | None:
        """Why this backend, as configured, cannot give sandboxes of ``profile`` the proxy as their one route
        (None: it can). Never a weaker network instead: the caller answers SANDBOX.UNAVAILABLE."""
        ...

    async def open_egress(self, handle: SandboxHandle, route: EgressRoute, proxy: EgressProxy) -> str:
        """Serve ``route`` to the started, still waiting sandbox through ``proxy``; returns the proxy's URL as
        the command must be given it (``HTTP_PROXY``). SANDBOX.UNAVAILABLE if it cannot."""
        ...


#: input a session may have queued and not yet read by its command: past it, send_input refuses
INPUT_BACKLOG_BYTES = 4 * 1024 * 1024
