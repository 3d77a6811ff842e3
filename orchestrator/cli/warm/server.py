"""The warm server: a process that has already imported everything `sandboxctl` needs and built its
validators, and forks a worker per command.

A cold `sandboxctl run` spends most of its own time importing pydantic, the docker SDK and our modules;
the engine then takes as long as a whole `docker run`. Here a client hands its argv, environment,
working directory and standard streams (as descriptors) over a Unix socket; a forked child adopts them
and runs the very same `main()` a cold start would, so every command keeps its semantics, its checks
and its evidence. Only the same user is served (SO_PEERCRED); the socket lives in the user's 0700
state directory. A worker refuses (and the client runs cold) when the code on disk, the interpreter
or the Python environment differ from what the server loaded.

    python -m orchestrator.cli.warm.server --socket PATH [--idle-timeout S]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import logging
import os
import pkgutil
import signal
import socket
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orchestrator
from orchestrator.cli.warm.fingerprint import code_fingerprint
from orchestrator.cli.warm.peer import identity, peer_credentials, peer_difference
from orchestrator.cli.warm.protocol import RELAYED_SIGNALS, FrameReader, ProtocolError, send_frame, state_dir_problem
from orchestrator.cli.warm.worker import run_worker

log = logging.getLogger("sandboxctl.warm")
ACCEPT_TICK_S = 1.0
# a client sends its request right after connecting: one that dawdles holds up everyone else
REQUEST_READ_TIMEOUT_S = 1.0


class ServerError(Exception):
    pass


# the server itself, and what only `sandboxctl serve` and HTTP clients (the GitLab driver too) use (aiohttp: ~100 ms,
# ~15 MiB)
_NOT_PRELOADED = (
    "orchestrator.cli.warm",
    "orchestrator.api",
    "orchestrator.client",
    "orchestrator.cli.serve_cmd",
    "orchestrator.ci.gitlab",
    "orchestrator.mcp",  # the MCP server (its SDK, starlette, the client's aiohttp): a process of its own
)


def preload() -> None:
    """Import every module of the package (and so every library it uses), then build the validators
    and caches that do not depend on any file a user may change between commands."""
    # walked by hand: pkgutil.walk_packages imports every package to look inside it, excluded ones too
    pending: list[tuple[Iterable[str], str]] = [(orchestrator.__path__, "orchestrator.")]
    while pending:
        path, prefix = pending.pop()
        for info in pkgutil.iter_modules(path, prefix):
            if info.name.startswith(_NOT_PRELOADED):
                continue
            module = importlib.import_module(info.name)
            if info.ispkg:
                pending.append((module.__path__, info.name + "."))
    try:
        _warm_up()
    except Exception as exc:  # only a warm-up: a command that hits the same problem reports it itself
        log.warning("warm-up incomplete: %s: %s", type(exc).__name__, exc)


def _warm_up() -> None:
    from pydantic import BaseModel

    from orchestrator.domain.requests import parse_request
    from orchestrator.gate.gate import Gate
    from orchestrator.gate.policy import PolicySource
    from orchestrator.pipeline.config import load_config
    from orchestrator.profiles import ProfileRegistry
    from orchestrator.results import Redactor

    for request in (
        {"tool": "shell_exec", "argv": ["true"]},
        {"tool": "shell_command", "command": "echo warm | wc -c"},
    ):
        Gate(PolicySource(None), workspace="/").evaluate(parse_request(request))
    load_config(None)
    ProfileRegistry().resolve("workspace-write")
    Redactor(literals=()).redact(b"warm")
    pending = list(BaseModel.__subclasses__())
    while pending:
        model = pending.pop()
        pending.extend(model.__subclasses__())
        if model.__module__.startswith("orchestrator."):
            with contextlib.suppress(Exception):  # generic models need their parameters
                model.model_rebuild()


# variables read while the interpreter starts (stdio encoding, import paths, hashing, bytecode): a
# worker born from another interpreter start would not be the process a cold start makes
_STARTUP_ENV_PREFIXES = ("PYTHON",)
_STARTUP_ENV = frozenset({"LANG", "LC_ALL", "LC_CTYPE"})


def _startup_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_STARTUP_ENV_PREFIXES) or k in _STARTUP_ENV}


def mismatch(message: dict[str, Any], fds: list[int], *, fingerprint: str) -> str | None:
    """Why this server must not run the client's command (it then runs cold), or None. A reason that
    starts with "stale" means the server must stop too."""
    if len(fds) != 4:
        return "expected 4 descriptors (stdin, stdout, stderr, cwd)"
    env = message.get("env")
    argv = message.get("argv")
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        return "malformed environment"
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return "malformed argv"
    if not isinstance(message.get("umask"), int):
        return "malformed umask"
    ignored = message.get("ignored_signals", [])
    if not isinstance(ignored, list) or not all(s in RELAYED_SIGNALS for s in ignored):
        return "malformed ignored_signals"
    if message.get("executable") != sys.executable:
        return "another interpreter"
    if _startup_env(env) != _startup_env(dict(os.environ)):
        return "another Python start-up environment"
    if code_fingerprint() != fingerprint:
        return "stale: the code on disk changed since the server started"
    return None


def check_state_dir(directory: Path) -> None:
    """The socket's directory: ours and closed to everyone else (or created so)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    problem = state_dir_problem(str(directory))  # what a client checks before it connects
    if problem is not None:
        raise ServerError(problem)


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2.0)
        try:
            probe.connect(str(path))
        except OSError:
            return False
        return True


def bind(path: Path) -> socket.socket:
    check_state_dir(path.parent)
    if path.exists() or path.is_symlink():
        if _answers(path):
            raise ServerError(f"a warm server already answers at {path}")
        path.unlink()  # left by a server that was killed
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(str(path))
    finally:
        os.umask(old)
    listener.listen(64)
    return listener


class Server:
    def __init__(self, listener: socket.socket, path: Path, *, idle_timeout_s: float | None) -> None:
        self.listener = listener
        self.path = path
        self.inode = path.stat().st_ino
        self.idle_timeout_s = idle_timeout_s
        self.fingerprint = code_fingerprint()
        self.identity = identity(os.getpid())
        self.started_unix = time.time()
        self.served = 0  # commands a worker ran (each reports through the pipe once the client said go)
        self.children: set[int] = set()
        self.stopping = False
        self._ran_r, self._ran_w = os.pipe()
        os.set_blocking(self._ran_r, False)

    def status(self) -> dict[str, Any]:
        self._reap()
        return {
            "pid": os.getpid(),
            "socket": str(self.path),
            "started_unix": round(self.started_unix, 3),
            "served": self.served,
            "active": len(self.children),
            "python": sys.executable,
            "idle_timeout_s": self.idle_timeout_s,
        }

    def serve_forever(self) -> None:
        self.listener.settimeout(ACCEPT_TICK_S)
        last_activity = time.monotonic()
        while not self.stopping:
            self._reap()
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                idle = time.monotonic() - last_activity
                if self.idle_timeout_s is not None and not self.children and idle >= self.idle_timeout_s:
                    log.info("idle for %.0f s: stopping", idle)
                    return
                continue
            last_activity = time.monotonic()
            with conn:
                try:
                    self._handle(conn)
                except Exception as exc:  # one bad client must not end the server
                    log.warning("dropped a client: %s: %s", type(exc).__name__, exc)

    def _handle(self, conn: socket.socket) -> None:
        _pid, uid, _gid = peer_credentials(conn)
        if uid != os.getuid():
            log.warning("refused a connection from uid %d", uid)
            return
        # every op, status and stop too: a confined process of this uid gets nothing from here
        refused = peer_difference(conn, self.identity, role="caller")
        if refused is not None:
            log.warning("refused a connection: %s", refused)
            return
        reader = FrameReader(conn)
        try:
            frame = reader.read(within_s=REQUEST_READ_TIMEOUT_S)
        except (OSError, ProtocolError) as exc:
            log.warning("dropped a client: %s", exc)
            return
        if frame is None:
            return
        message, fds = frame
        try:
            op = message.get("op")
            if op == "status":
                send_frame(conn, {"ok": True, **self.status()})
            elif op == "stop":
                send_frame(conn, {"ok": True, "pid": os.getpid()})
                self.stopping = True
            elif op == "run":
                reason = mismatch(message, fds, fingerprint=self.fingerprint)
                if reason is None:
                    self._fork(conn, reader, message, fds)
                else:
                    send_frame(conn, {"refused": reason})
                    log.info("ran nothing: %s", reason)
                    if reason.startswith("stale"):  # clients run cold until `warm start` loads anew
                        self.stopping = True
            else:
                send_frame(conn, {"refused": f"unknown op {op!r}"})
        finally:
            for fd in fds:
                os.close(fd)

    def _fork(self, conn: socket.socket, reader: FrameReader, message: dict[str, Any], fds: list[int]) -> None:
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the server's loop
            code = 125
            try:
                self.listener.close()
                os.close(self._ran_r)
                conn.settimeout(None)
                code = run_worker(conn, reader, message, fds, ran_fd=self._ran_w)
            except BaseException as exc:
                log.warning("a worker failed: %s", type(exc).__name__)
            finally:
                os._exit(code)
        self.children.add(pid)

    def _reap(self) -> None:
        with contextlib.suppress(BlockingIOError):
            self.served += len(os.read(self._ran_r, 4096))
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                done, _status = os.waitpid(pid, os.WNOHANG)
                if done == 0:
                    continue
            self.children.discard(pid)

    def close(self) -> None:
        self.listener.close()
        with contextlib.suppress(OSError):
            if self.path.stat().st_ino == self.inode:  # never remove a successor's socket
                self.path.unlink()

    def wait_for_workers(self) -> None:
        """Running commands finish on their own; the server outlives them so that they are reaped."""
        if self.children:
            log.info("waiting for %d running command(s)", len(self.children))
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            self.children.discard(pid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.cli.warm.server")
    parser.add_argument("--socket", required=True, type=Path)
    parser.add_argument("--idle-timeout", type=float, default=None, metavar="S")
    args = parser.parse_args(argv)
    # on a descriptor of its own: a worker's fd 2 becomes its client's stderr, the log must not follow
    handler = logging.StreamHandler(os.fdopen(os.dup(2), "a", buffering=1))  # the log file, or a terminal
    handler.setFormatter(logging.Formatter("%(asctime)s warm[%(process)d] %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # detached: a closing terminal is not a stop
    started = time.monotonic()
    gc.disable()
    preload()
    try:
        listener = bind(args.socket)
    except (OSError, ServerError) as exc:
        log.error("cannot serve: %s", exc)
        return 1
    server = Server(listener, args.socket, idle_timeout_s=args.idle_timeout)

    def stop(_signum: int, _frame: Any) -> None:
        # a flag, not an exception: the loop notices within a tick and never stops mid-fork
        server.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # what preload built lives as long as the server: frozen, the collector never walks it and the
    # workers' copy-on-write pages stay shared
    gc.freeze()
    gc.enable()
    log.info("serving at %s (preloaded in %.0f ms)", args.socket, (time.monotonic() - started) * 1000)
    try:
        server.serve_forever()
    finally:
        server.close()  # no new command from here on
        server.wait_for_workers()
        server._reap()
        log.info("stopped after %d commands", server.served)
    return 0


if __name__ == "__main__":
    sys.exit(main())
