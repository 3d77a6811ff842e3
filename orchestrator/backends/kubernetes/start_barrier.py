"""A pod's stdio: named pipes the sidecar's ``cat`` relays through exec, exact whatever the volume.

Why not the container's own stdout: the node copies it to log files that rotate (a follower of the log
API loses what was rotated before it read it), and to attached readers through a queue the runtime drops
when the container exits (measured with the test cluster's containerd: the last 75 KiB to 2.6 MiB of a
20 MiB output lost). So the command's stdin, stdout and stderr are named pipes in a small in-memory volume
it shares with the pod's sidecar, and a ``cat`` of each, run by exec in the sidecar (which outlives the
command), streams them: an exec stream ends only once its ``cat`` read its pipe to the end, i.e. once
every writer (the command, and whatever it left behind until the runtime stopped it) closed it.

The barrier: the sidecar makes the pipes as it starts; the command's shell waits for them (its mount of
their volume is read-only: the command gets no writable place from it) and opens them before it execs the
command, and opening a pipe waits for its other end, so the command starts only once the controller's
readers (and, with stdin, its writer) hold them: nothing the command writes can precede them. Without
stdin the command reads /dev/null, as in a Docker sandbox.
"""

from __future__ import annotations

SHELL = "/bin/sh"
#: the sidecar: stdio relay, and in copy mode the workspace's way back
SIDECAR = "sandbox-io"
#: the in-memory volume of the pipes, in the command's container and the sidecar
STDIO_DIR = "/run/sandbox-io"
STDIO_VOLUME = "sandbox-io"
#: the barrier's $0 (how the shell names itself in its messages)
NAME = "sandbox-start"
PIPES = ("stdout", "stderr")
#: a pre-started pod's fourth pipe: its init's status channel (its descriptor 3, see sandbox-init.c)
STATUS = "status"
#: how long the barrier and a relay wait for the pipes to appear (the sidecar makes them as it starts)
PIPE_WAIT_S = 60


def _names(with_stdin: bool, with_status: bool = False) -> list[str]:
    """The pipes in the order the command's side opens them (each open waits for its other end)."""
    return [*PIPES, *([STATUS] if with_status else []), *(["stdin"] if with_stdin else [])]


def _wait_for(paths: str) -> str:
    """Shell: wait until every one of ``paths`` (shell words) is a named pipe, at most PIPE_WAIT_S."""
    return (
        f'n=0; for p in {paths}; do until [ -p "$p" ]; do n=$((n+1)); [ $n -le {PIPE_WAIT_S * 100} ] || exit 125;'
        " sleep 0.01; done; done;"
    )


def sidecar_command(idle_s: int, *, with_stdin: bool, with_status: bool = False) -> list[str]:
    """The sidecar: make the pipes, then idle (the relays and the copy back are exec'd in it)."""
    pipes = " ".join(f"{STDIO_DIR}/{name}" for name in _names(with_stdin, with_status))
    return [SHELL, "-c", f'/usr/bin/mkfifo -m 0600 {pipes} && exec sleep "$1"', SIDECAR, str(idle_s)]


def barrier_command(command: list[str], *, with_stdin: bool) -> list[str]:
    """``command`` behind the barrier: run once its pipes have their other ends."""
    stdin = '<"$d/stdin"' if with_stdin else "</dev/null"
    paths = " ".join(f'"$d/{name}"' for name in _names(with_stdin))
    script = f'd={STDIO_DIR}; {_wait_for(paths)} exec "$@" {stdin} >"$d/stdout" 2>"$d/stderr"'
    return [SHELL, "-c", script, NAME, *command]


def pooled_barrier_command(init: list[str]) -> list[str]:
    """A pre-started pod's command: ``init`` (our sandbox-init, behind ``env -u``/``prlimit``) once its
    pipes have their other ends. stdout, stderr and the status channel first (their relays connect as the
    pod is filled), stdin last: it opens once the launch writer does, and brings the launch message, then
    the command's stdin."""
    paths = " ".join(f'"$d/{name}"' for name in _names(True, True))
    script = f'd={STDIO_DIR}; {_wait_for(paths)} exec "$@" >"$d/stdout" 2>"$d/stderr" 3>"$d/{STATUS}" <"$d/stdin"'
    return [SHELL, "-c", script, NAME, *init]


#: what a reader writes to its own stderr once it runs and its pipe exists (the exec then surely started)
READY_MARKER = b"sandbox-io-ready\n"


def reader_command(stream: str) -> list[str]:
    """Run by exec in the sidecar: READY_MARKER to the exec's stderr, then ``stream``'s pipe to its stdout,
    to its end."""
    ready = "printf 'sandbox-io-ready\\n' >&2;"
    return [SHELL, "-c", _wait_for('"$1"') + f' {ready} exec cat "$1"', "relay-" + stream, f"{STDIO_DIR}/{stream}"]


def writer_command(size: int) -> list[str]:
    """Run by exec in the sidecar: exactly ``size`` bytes of the exec's stdin into the command's stdin pipe,
    then its end (the command reads EOF)."""
    # not exec'd: a head that is the exec's own process saw its stdin end after 32 KiB (measured)
    return [SHELL, "-c", _wait_for('"$1"') + f' head -c {size} >"$1"', "relay-stdin", f"{STDIO_DIR}/stdin"]


# -- a pre-started pod ----------------------------------------------------------------------------------
# Its init waits behind the barrier for the launch message on its stdin pipe. The writer of that pipe is
# exec'd in the sidecar as the pod is filled, so a claim costs no exec: it opens the pipe (which waits for
# the init's side: READY_MARKER then says the init holds it), and at the claim reads a header line
# "<message bytes> <stdin bytes>" from its exec stream, copies the message into the pipe, says
# LAUNCHED_MARKER (a write into a pipe fails once no process holds its other end: the marker means a live
# init has the message), then the command's stdin, then closes the pipe (the command reads EOF). A session's
# stdin has no size ("-"): its input is copied as it comes, until the exec's stdin is closed. It then
# waits for its exec stream to end (the pod's deletion) instead of exiting: its stream never ends while the
# controller may still be reading its marker.
#
# Before it says READY_MARKER it removes the status pipe's name: by then the init's side holds the pipe (the
# barrier opened it before stdin) and so does its reader, and no one else can ever open it (a pipe opens for
# writing even on a read-only mount); the launch message, and so the command, comes after.

#: what the launch writer says once the whole message is in the pipe of a live init
LAUNCHED_MARKER = b"sandbox-io-launched\n"


#: the header's stdin size of a session: its input streams until the exec's stdin is closed
STREAMED = "-"


def launch_header(message_size: int, stdin_size: int | None) -> bytes:
    """``stdin_size`` None: a session's, whose input is copied as it comes until the stream's stdin ends."""
    return f"{message_size} {STREAMED if stdin_size is None else stdin_size}\n".encode()


def launch_writer_command() -> list[str]:
    """Run by exec in a pre-started pod's sidecar as it is filled (see above)."""
    script = _wait_for('"$1"') + (
        ' exec 3>"$1" || exit 125; rm -f "$2" || exit 125; printf \'sandbox-io-ready\\n\' >&2;'
        " read n m || exit 125; head -c \"$n\" >&3 || exit 125; printf 'sandbox-io-launched\\n' >&2;"
        f' if [ "$m" = {STREAMED} ]; then cat >&3; else head -c "$m" >&3; fi; exec 3>&-; cat >/dev/null'
    )
    return [SHELL, "-c", script, "launch-writer", f"{STDIO_DIR}/stdin", f"{STDIO_DIR}/{STATUS}"]


# -- sessions -------------------------------------------------------------------------------------------
# A session's command is not the pod's: the pod's command container idles (with the command's hardening,
# limits and mounts), and the session's command is exec'd into it, its stdio the exec stream itself
# (stdin open for what the session sends, or a terminal the kubelet makes, resized through the stream).
# An exec stream carries its command's output exactly (the relays above rely on it) and ends with its
# exit code; what the barrier does for a one-shot pod, the exec does here: the command starts with its
# stdio already held by the controller.
#
# The container's PID 1 is the idle command, so the session command's end would not end what it left
# behind (in a one-shot pod it would: PID 1 exits, the runtime kills the rest). So the wrapper shell waits
# for the command instead of exec'ing it, then kills every other process of the container's PID namespace
# (kill -1 spares PID 1 and the caller, and reaches no other container's: shareProcessNamespace is off),
# and exits with the command's status: nothing of the session outlives it to hold its stream open or to
# write to the workspace after its end was measured. Its traps are handlers, not ignores (the command
# gets the default dispositions back); they keep the wrapper alive through a Ctrl-C meant for the command.

#: the session's marker, written before its command runs (on the terminal with ``tty``: there the line
#: ends in CR LF)
SESSION_MARKER = b"sandbox-session-ready"
SESSION_NAME = "sandbox-session"


def idle_command(idle_s: int) -> list[str]:
    """The command container of a session's pod: nothing but waiting (the deadline stops it)."""
    return [SHELL, "-c", 'exec sleep "$1"', SESSION_NAME, str(idle_s)]


def session_command(command: list[str]) -> list[str]:
    """Exec'd for the session: its marker on stderr (the stream's proof that the command runs; with a
    terminal, on it), then ``command``; once it ended, whatever it left behind is killed."""
    script = (
        f"printf '{SESSION_MARKER.decode()}\\n' >&2; trap : HUP INT QUIT TERM;"
        ' "$@"; rc=$?; kill -s KILL -- -1 2>/dev/null; exit $rc'
    )
    return [SHELL, "-c", script, SESSION_NAME, *command]


def session_marker(tty: bool) -> bytes:
    """The marker's line as the stream delivers it."""
    return SESSION_MARKER + (b"\r\n" if tty else b"\n")
