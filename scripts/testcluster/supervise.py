"""Supervision of the cluster's daemons: pid files, start in a session of their own with output to a log,
stop with SIGTERM then SIGKILL, and waiting for a condition. A pid file counts only while it names a live
process of that binary whose command line carries the cluster's directory: a stale pid that something else
reused is never taken for ours.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path

#: a log longer than this is moved to <log>.1 when its daemon starts (one previous log is kept)
LOG_ROTATE_BYTES = 20 * 1024 * 1024


def say(message: str) -> None:
    print(f"k8s-cluster: {message}", file=sys.stderr, flush=True)


def warn(message: str) -> None:
    say(f"warning: {message}")


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # the state follows the command name, which is in parentheses and may itself hold any character
    return stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] != "Z"


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [arg.decode(errors="replace") for arg in raw.split(b"\0")[:-1]]


def read_pid(pid_file: Path) -> int | None:
    try:
        digits = "".join(c for c in pid_file.read_text() if c.isdigit())
    except OSError:
        return None
    return int(digits) if digits else None


def owned_pid(pid_file: Path, name: str, marker: str) -> int | None:
    """The pid in ``pid_file`` when it is a live process whose binary is called ``name`` and whose command
    line contains ``marker`` (the cluster's directory); otherwise None."""
    pid = read_pid(pid_file)
    if pid is None or not process_alive(pid):
        return None
    argv = cmdline(pid)
    if not argv or Path(argv[0]).name != name or not any(marker in arg for arg in argv):
        return None
    return pid


def rotate_log(log: Path, limit: int = LOG_ROTATE_BYTES) -> None:
    try:
        if log.stat().st_size > limit:
            log.replace(log.with_name(log.name + ".1"))
    except FileNotFoundError:
        pass


def start(
    pid_file: Path, log: Path, argv: Sequence[str | Path], env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``argv`` in a session of its own (a Ctrl-C of make or pytest does not reach it), stdin from /dev/null,
    output appended to ``log``, no other descriptor inherited (never the cluster's lock); its pid in
    ``pid_file``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    rotate_log(log)
    with log.open("ab") as out:
        out.write(
            f"--- {datetime.now().astimezone().isoformat(timespec='seconds')} started by k8s-cluster.sh\n".encode()
        )
        out.flush()
        proc = subprocess.Popen(
            [str(a) for a in argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env=dict(env) if env is not None else None,
        )
    pid_file.write_text(f"{proc.pid}\n")
    return proc


def wait_until(seconds: float, condition: Callable[[], bool], interval: float = 0.2) -> bool:
    """Calls ``condition`` every ``interval`` until it is true (True) or ``seconds`` passed (False)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if condition():
                return True
        except Exception:  # a probe that fails is a probe that says no
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def terminate(pid: int, grace: float = 10.0, *, name: str = "", quiet: bool = False) -> None:
    """SIGTERM, then SIGKILL when ``pid`` still runs after ``grace`` seconds (with a warning unless quiet)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if wait_until(grace, lambda: not process_alive(pid), interval=0.1):
        return
    if not quiet:
        warn(f"{name or pid} did not stop in {grace:g} s; killing it")
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    wait_until(5, lambda: not process_alive(pid), interval=0.05)


def stop(pid_file: Path, name: str, marker: str, grace: float = 10.0, *, quiet: bool = False) -> None:
    """Stops our process named in ``pid_file`` (if it runs) and removes the pid file."""
    pid = owned_pid(pid_file, name, marker)
    if pid is not None:
        terminate(pid, grace, name=name, quiet=quiet)
    pid_file.unlink(missing_ok=True)


def pids_matching(needles: Iterable[str], exclude: Iterable[int] = ()) -> list[int]:
    """Processes whose command line contains any of ``needles`` (``pgrep -f`` without pgrep)."""
    wanted = [n for n in needles if n]
    skip = {os.getpid(), *exclude}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        line = " ".join(cmdline(int(entry.name)))
        if any(n in line for n in wanted):
            found.append(int(entry.name))
    return found


def kill(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
