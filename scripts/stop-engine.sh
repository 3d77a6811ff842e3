#!/usr/bin/env bash
# Stops the project-managed dockerd started by scripts/setup.sh (never any other engine).
# dockerd gets SIGTERM and shuts its containers and its containerd down; after
# SANDBOX_STOP_TIMEOUT seconds (default 60) it is killed. Stale pidfile/socket are removed.
# Running it when the daemon is not running is fine (exit 0).
set -euo pipefail
SO_LOG_PREFIX=stop-engine
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"

timeout_s="${SANDBOX_STOP_TIMEOUT:-60}"
containerd_pidfile="$SO_EXEC_ROOT/containerd/containerd.pid"

containerd_pid() {
    # The containerd that our dockerd supervises (its pidfile lives under our exec root).
    local pid
    [ -r "$containerd_pidfile" ] || return 1
    pid="$(tr -dc '0-9' <"$containerd_pidfile")"
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$SO_EXEC_ROOT/containerd" || return 1
    printf '%s\n' "$pid"
}

wait_gone() {
    local pid="$1" secs="$2" i=0
    while [ -d "/proc/$pid" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]; do
        [ "$i" -ge $((secs * 5)) ] && return 1
        sleep 0.2
        i=$((i + 1))
    done
    return 0
}

if pid="$(so_managed_pid)"; then
    so_say "stopping project-managed dockerd (pid $pid)"
    kill -TERM "$pid"
    if ! wait_gone "$pid" "$timeout_s"; then
        so_warn "dockerd (pid $pid) still running after ${timeout_s}s; killing it"
        kill -KILL "$pid" 2>/dev/null || true
        wait_gone "$pid" 10 || so_die "dockerd (pid $pid) did not exit"
    fi
    so_say "dockerd stopped"
else
    so_say "project-managed dockerd is not running"
fi

# dockerd stops its containerd itself; one left behind (dockerd killed hard) is stopped here.
if cpid="$(containerd_pid)"; then
    so_say "stopping leftover containerd (pid $cpid)"
    kill -TERM "$cpid" 2>/dev/null || true
    wait_gone "$cpid" 20 || { kill -KILL "$cpid" 2>/dev/null || true; }
fi

rm -f "$SO_PIDFILE"
if [ -S "$SO_SOCKET" ] || [ -e "$SO_SOCKET" ]; then rm -f "$SO_SOCKET"; fi

# Shims of containers that outlived a hard-killed dockerd: reported, not killed (the next
# setup.sh start of dockerd reaps them).
for p in /proc/[0-9]*; do
    cmd="$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null || true)"
    case "$cmd" in
        *containerd-shim*"$SO_EXEC_ROOT/containerd/"*)
            so_warn "container shim still running (pid ${p#/proc/}); it is cleaned up on the next engine start" ;;
    esac
done

# dockerd leaves its own bind mounts behind (data root on itself, exec-root/netns/default);
# with the daemon gone they only keep the directories busy.
awk -v a="$SO_DATA_ROOT" -v b="$SO_EXEC_ROOT" '
    $2 == a || index($2, a "/") == 1 || $2 == b || index($2, b "/") == 1 {print $2}' /proc/mounts \
    | sort -r | while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || so_warn "could not unmount $m"
    done
