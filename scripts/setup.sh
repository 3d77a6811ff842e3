#!/usr/bin/env bash
# Idempotent engine + image setup for the sandbox orchestrator (used by `make setup`).
#
#   scripts/setup.sh            choose/start an engine, record it, build the sandbox images
#   scripts/setup.sh browser    only make sure Debian's chromium is installed (see below)
#
# Engine choice (SANDBOX_ENGINE=auto, the default):
#   1. $DOCKER_HOST, when set and answering;
#   2. the default socket unix:///var/run/docker.sock, when it answers;
#   3. otherwise a project-managed dockerd (root only): Debian's docker.io + gVisor runsc (from
#      Debian trixie), its own socket unix://$SANDBOX_RUN_DIR/docker.sock (default
#      /run/sandbox-orchestrator/docker.sock), data under $SANDBOX_STATE_DIR (default
#      /var/lib/sandbox-orchestrator), no default bridge, runsc registered with --oci-seccomp.
# SANDBOX_ENGINE=managed skips 1 and 2; SANDBOX_ENGINE=external fails instead of doing 3.
#
# The chosen DOCKER_HOST is written to $SANDBOX_STATE_DIR/docker-host; `eval "$(scripts/engine-env.sh)"`
# exports it. Re-running with everything in place is a fast no-op.
#
# The browser tests of the approvals page (tests/api/test_ui_browser.py) drive Debian's `chromium`
# with Playwright; when it is missing and we are root, it is installed here (SANDBOX_SKIP_BROWSER=1
# skips that; without root the tests skip, saying why).
#
# Other knobs: SANDBOX_SKIP_IMAGES=1 (engine only), SANDBOX_ENGINE_TIMEOUT (seconds to wait for
# dockerd, default 60), SANDBOX_REBUILD_IMAGES=1 / SANDBOX_REBUILD_BASE=1 (see build-images.sh).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"

SO_START_TS=$(date +%s.%N)
APT_UPDATED="${SO_APT_UPDATED:-0}"

is_root() { [ "$(id -u)" = 0 ]; }

# One setup at a time (parallel `make` targets, two terminals). fd 9 is closed before dockerd
# starts, so the daemon never holds the lock.
SO_LOCKED=0
take_lock() {
    [ "$SO_LOCKED" = 1 ] && return 0
    mkdir -p "$SO_STATE_DIR" 2>/dev/null || true
    if [ -w "$SO_STATE_DIR" ] && command -v flock >/dev/null 2>&1; then
        exec 9>"$SO_STATE_DIR/setup.lock"
        if ! flock -n 9; then
            so_say "another setup.sh is running; waiting for it (up to 15 min)"
            flock -w 900 9 || so_die "timed out waiting for $SO_STATE_DIR/setup.lock"
        fi
        SO_LOCKED=1
    fi
}

apt_update_once() {
    [ "$APT_UPDATED" = 1 ] && return 0
    so_say "apt-get update"
    if ! DEBIAN_FRONTEND=noninteractive apt-get -q update >/dev/null 2>"$SO_TMP/apt-update.err"; then
        # A broken third-party source must not block us if Debian's own lists came through.
        so_warn "apt-get update reported errors (continuing if the packages are available):"
        sed 's/^/    /' "$SO_TMP/apt-update.err" >&2
    fi
    APT_UPDATED=1
    export SO_APT_UPDATED=1  # build-images.sh skips its own update
}

# apt-get install without prompts and without starting any service the packages ship.
SO_CREATED_POLICY=0
remove_policy_rc() {
    if [ "$SO_CREATED_POLICY" = 1 ]; then rm -f /usr/sbin/policy-rc.d; SO_CREATED_POLICY=0; fi
}
apt_install() {
    local rc=0
    apt_update_once
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\n# temporary, written by sandbox-orchestrator setup.sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        SO_CREATED_POLICY=1
    fi
    so_say "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@" \
        >"$SO_TMP/apt-install.log" 2>&1 || rc=$?
    remove_policy_rc
    if [ "$rc" != 0 ]; then
        tail -n 30 "$SO_TMP/apt-install.log" >&2
        so_die "apt-get install $* failed (exit $rc)"
    fi
}

# --- engine packages -----------------------------------------------------------------------------

install_engine_packages() {
    local pkgs=() fresh_docker=0
    if ! command -v dockerd >/dev/null 2>&1 || ! command -v containerd >/dev/null 2>&1 \
        || ! command -v runc >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
        pkgs+=(docker.io)
        dpkg-query -W -f='${Status}' docker.io 2>/dev/null | grep -q 'install ok installed' || fresh_docker=1
    fi
    # The Debian CLI comes with docker.io; a CLI already on PATH (any version) is fine too.
    # AppArmor-enabled kernels need apparmor_parser for docker's default profile.
    if [ -d /sys/kernel/security/apparmor ] && ! command -v apparmor_parser >/dev/null 2>&1; then
        pkgs+=(apparmor)
    fi
    # the images' sandbox-init (images/init) is a static C program compiled here
    if ! command -v gcc >/dev/null 2>&1 || [ ! -e "$(gcc -print-file-name=libc.a)" ]; then
        pkgs+=(gcc libc6-dev)
    fi
    [ "${#pkgs[@]}" = 0 ] && return 0
    apt_install "${pkgs[@]}"
    if [ "$fresh_docker" = 1 ]; then
        if [ -d /run/systemd/system ]; then
            so_say "systemd is running: disabling the distro docker.service/docker.socket (the project runs its own dockerd)"
            systemctl stop docker.service docker.socket >/dev/null 2>&1 || true
        else
            so_say "systemd is not running (no /run/systemd/system): the distro docker service was not started"
        fi
        # Not enabled for the next boot either: a system dockerd on the default socket would take over.
        if command -v systemctl >/dev/null 2>&1; then
            systemctl disable docker.service docker.socket >/dev/null 2>&1 || true
        fi
        if command -v update-rc.d >/dev/null 2>&1 && [ -e /etc/init.d/docker ]; then
            update-rc.d docker disable >/dev/null 2>&1 || true
        fi
    fi
    command -v dockerd >/dev/null 2>&1 || so_die "dockerd still not found after installing docker.io"
}

# --- runsc (gVisor) from Debian trixie ----------------------------------------------------------

# Prints the release date (YYYYMMDD) a runsc binary reports, e.g. "runsc version 0.0~20240729.0".
runsc_date() {
    "$1" --version 2>/dev/null | sed -n 's/^runsc version [^0-9]*\([0-9.~]*\).*/\1/p' \
        | grep -o '20[0-9]\{6\}' | head -n1
}

install_runsc() {
    local have
    if [ -x "$SO_RUNSC" ]; then
        have="$(runsc_date "$SO_RUNSC" || true)"
        if [ -n "$have" ] && [ "$have" -ge 20240729 ]; then
            return 0
        fi
        if [ -n "${SANDBOX_RUNSC:-}" ]; then
            so_die "SANDBOX_RUNSC=$SANDBOX_RUNSC reports release '${have:-unknown}'; need 20240729 or newer (older releases break stat/ls)"
        fi
        so_say "runsc at $SO_RUNSC is too old or broken ('${have:-unknown}'); replacing it"
    elif [ -n "${SANDBOX_RUNSC:-}" ]; then
        so_die "SANDBOX_RUNSC=$SANDBOX_RUNSC is not an executable"
    fi

    local dl="$SO_TMP/runsc-dl" deb
    deb="$(so_trixie_download runsc "$dl")"
    dpkg-deb -x "$deb" "$dl/x"
    local bin=""
    for bin in "$dl/x/usr/bin/runsc" "$dl/x/usr/sbin/runsc"; do [ -x "$bin" ] && break; done
    [ -x "$bin" ] || so_die "runsc binary not found in $deb"
    have="$(runsc_date "$bin" || true)"
    if [ -z "$have" ] || [ "$have" -lt 20240729 ]; then
        so_die "downloaded runsc reports '${have:-nothing}', expected >= 20240729"
    fi
    mkdir -p "$(dirname "$SO_RUNSC")"
    install -m 0755 "$bin" "$SO_RUNSC.new"
    mv -f "$SO_RUNSC.new" "$SO_RUNSC"
    dpkg-deb -f "$deb" Version >"$SO_RUNSC.deb-version"
    so_say "installed runsc $(cat "$SO_RUNSC.deb-version") at $SO_RUNSC"
}

# --- project-managed dockerd --------------------------------------------------------------------

daemon_json() {
    cat <<EOF
{
  "hosts": ["$SO_DOCKER_HOST"],
  "data-root": "$SO_DATA_ROOT",
  "exec-root": "$SO_EXEC_ROOT",
  "pidfile": "$SO_PIDFILE",
  "bridge": "none",
  "iptables": false,
  "ip-forward": false,
  "ip-masq": false,
  "userland-proxy": false,
  "exec-opts": ["native.cgroupdriver=cgroupfs"],
  "default-runtime": "runc",
  "runtimes": {
    "runsc": {
      "path": "$SO_RUNSC",
      "runtimeArgs": ["--network=none", "--oci-seccomp"]
    }
  }
}
EOF
}

print_log_tail() {
    if [ -r "$SO_LOG" ]; then
        so_say "last lines of $SO_LOG:"
        tail -n "${1:-30}" "$SO_LOG" | sed 's/^/    /' >&2
    fi
}

wait_for_dockerd() {
    local launcher="${1:-}" timeout="${SANDBOX_ENGINE_TIMEOUT:-60}" start now
    start=$(date +%s)
    while :; do
        if SO_DOCKER_TIMEOUT=5 so_engine_answers "$SO_DOCKER_HOST"; then
            return 0
        fi
        if ! so_managed_pid >/dev/null && { [ -z "$launcher" ] || ! kill -0 "$launcher" 2>/dev/null; }; then
            print_log_tail 40
            so_die "dockerd exited during start-up (see $SO_LOG)"
        fi
        now=$(date +%s)
        if [ $((now - start)) -ge "$timeout" ]; then
            print_log_tail 40
            so_die "dockerd did not answer on $SO_DOCKER_HOST within ${timeout}s (see $SO_LOG; stop it with scripts/stop-engine.sh)"
        fi
        sleep 0.2
    done
}

start_managed_engine() {
    local pid
    if pid="$(so_managed_pid)"; then
        so_say "project-managed dockerd (pid $pid) is running but not answering yet; waiting"
        wait_for_dockerd
        return 0
    fi
    # Stale leftovers of a daemon that died (pidfile, socket) would block or confuse a new one.
    if [ -e "$SO_PIDFILE" ]; then
        so_say "removing stale pidfile $SO_PIDFILE"
        rm -f "$SO_PIDFILE"
    fi
    if [ -e "$SO_SOCKET" ]; then
        so_say "removing stale socket $SO_SOCKET"
        rm -f "$SO_SOCKET"
    fi
    mkdir -p "$SO_DATA_ROOT" "$SO_EXEC_ROOT"
    chmod 0711 "$SO_STATE_DIR" "$SO_RUN_DIR" 2>/dev/null || true
    chmod 0710 "$SO_DATA_ROOT" 2>/dev/null || true
    if [ -f "$SO_LOG" ] && [ "$(stat -c %s "$SO_LOG")" -gt $((20 * 1024 * 1024)) ]; then
        mv -f "$SO_LOG" "$SO_LOG.1"
    fi
    so_say "starting project-managed dockerd on $SO_DOCKER_HOST (log: $SO_LOG)"
    printf '\n==== %s setup.sh starting dockerd ====\n' "$(date -Is)" >>"$SO_LOG"
    # Own session, no terminal, output to the log: it outlives this script and `make`.
    # Inherited descriptors other than 0-2 (make's jobserver, a caller's pipes) are closed so that
    # nobody waits for an EOF that the long-lived daemon would hold back.
    (
        for fd in /proc/self/fd/*; do
            fd="${fd##*/}"
            if [ "$fd" -gt 2 ] 2>/dev/null; then eval "exec $fd>&-" 2>/dev/null || true; fi
        done
        exec setsid dockerd --config-file "$SO_DAEMON_JSON" </dev/null >>"$SO_LOG" 2>&1
    ) &
    local launcher=$!
    wait_for_dockerd "$launcher"
    so_say "dockerd is up (pid $(so_managed_pid || echo '?'))"
}

ensure_managed_engine() {
    so_check_socket_len "$SO_SOCKET"
    so_check_socket_len "$SO_EXEC_ROOT/containerd/containerd.sock.ttrpc"

    if so_engine_answers "$SO_DOCKER_HOST"; then
        # Already up: only check that it runs with the configuration we would write.
        if [ -r "$SO_DAEMON_JSON" ] && ! daemon_json | cmp -s - "$SO_DAEMON_JSON"; then
            so_warn "$SO_DAEMON_JSON differs from what this script writes; restart the engine to apply:" \
                "scripts/stop-engine.sh && scripts/setup.sh"
        fi
        so_say "project-managed engine already running on $SO_DOCKER_HOST"
        return 0
    fi

    is_root || so_die "no Docker engine answers (DOCKER_HOST, $SO_DEFAULT_DOCKER_HOST) and starting the project-managed one needs root: run 'sudo make setup'"

    mkdir -p "$SO_STATE_DIR" "$SO_RUN_DIR"
    take_lock
    # Another setup.sh may have started it while we waited for the lock.
    if so_engine_answers "$SO_DOCKER_HOST"; then
        so_say "project-managed engine already running on $SO_DOCKER_HOST"
        return 0
    fi
    install_engine_packages
    install_runsc
    local tmp="$SO_DAEMON_JSON.tmp"
    daemon_json >"$tmp"
    mv -f "$tmp" "$SO_DAEMON_JSON"
    start_managed_engine
}

# --- the browser for the page's tests ------------------------------------------------------------

# Debian's chromium (bookworm's, from bookworm-security): Playwright drives it through
# executable_path; Playwright's own browser download is never used.
install_browser() {
    [ "${SANDBOX_SKIP_BROWSER:-0}" = 1 ] && return 0
    command -v chromium >/dev/null 2>&1 && return 0
    if ! is_root; then
        so_warn "chromium is not installed and installing it needs root: the browser tests will skip ('sudo make setup')"
        return 0
    fi
    take_lock
    command -v chromium >/dev/null 2>&1 && return 0  # another setup.sh installed it while we waited
    apt_install chromium
    command -v chromium >/dev/null 2>&1 || so_die "chromium still not found after installing it"
    so_say "installed $(chromium --version 2>/dev/null || echo chromium)"
}

# --- engine choice -----------------------------------------------------------------------------

choose_engine() {
    local mode="${SANDBOX_ENGINE:-auto}"
    case "$mode" in auto|managed|external) ;; *) so_die "SANDBOX_ENGINE must be auto, managed or external (got '$mode')" ;; esac

    if [ "$mode" != managed ]; then
        if [ -n "${DOCKER_HOST:-}" ]; then
            if so_engine_answers "$DOCKER_HOST"; then
                CHOSEN_HOST="$DOCKER_HOST"
                [ "$DOCKER_HOST" = "$SO_DOCKER_HOST" ] && CHOSEN_KIND=managed || CHOSEN_KIND=external
                so_say "using the engine at DOCKER_HOST=$DOCKER_HOST"
                return 0
            fi
            if [ "$DOCKER_HOST" != "$SO_DOCKER_HOST" ]; then
                so_warn "DOCKER_HOST=$DOCKER_HOST does not answer; ignoring it"
            fi
        fi
        if so_engine_answers "$SO_DEFAULT_DOCKER_HOST"; then
            CHOSEN_HOST="$SO_DEFAULT_DOCKER_HOST"
            CHOSEN_KIND=default
            so_say "using the engine on the default socket $SO_DEFAULT_DOCKER_HOST"
            return 0
        fi
        if [ "$mode" = external ]; then
            so_die "SANDBOX_ENGINE=external but no engine answers (DOCKER_HOST='${DOCKER_HOST:-}', $SO_DEFAULT_DOCKER_HOST)"
        fi
    fi
    ensure_managed_engine
    CHOSEN_HOST="$SO_DOCKER_HOST"
    CHOSEN_KIND=managed
}

record_engine() {
    if ! mkdir -p "$SO_STATE_DIR" 2>/dev/null || [ ! -w "$SO_STATE_DIR" ]; then
        so_warn "cannot write $SO_HOST_FILE (not writable); set SANDBOX_STATE_DIR to a writable directory to record the engine"
        return 0
    fi
    if [ "$(cat "$SO_HOST_FILE" 2>/dev/null || true)" != "$CHOSEN_HOST" ]; then
        printf '%s\n' "$CHOSEN_HOST" >"$SO_HOST_FILE.tmp"
        chmod 0644 "$SO_HOST_FILE.tmp"
        mv -f "$SO_HOST_FILE.tmp" "$SO_HOST_FILE"
        so_say "recorded DOCKER_HOST=$CHOSEN_HOST in $SO_HOST_FILE"
    fi
}

check_runtimes() {
    local runtimes
    # shellcheck disable=SC2016  # a Go template, not a shell expansion
    runtimes="$(so_docker_at "$CHOSEN_HOST" info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}' 2>/dev/null || true)"
    case " $runtimes " in
        *" runsc "*) ;;
        *) so_warn "engine $CHOSEN_HOST has no 'runsc' runtime (runtimes: ${runtimes:-unknown}); gVisor profiles will be unavailable" ;;
    esac
}

main() {
    SO_TMP="$(mktemp -d "${TMPDIR:-/tmp}/sandbox-setup.XXXXXX")"
    trap 'remove_policy_rc; rm -rf "$SO_TMP"' EXIT

    case "${1:-}" in
        "") ;;
        browser) install_browser; return 0 ;;
        *) so_die "unknown argument '$1' (none, or 'browser')" ;;
    esac

    choose_engine
    take_lock
    record_engine
    export DOCKER_HOST="$CHOSEN_HOST"
    [ "$CHOSEN_KIND" = managed ] || check_runtimes
    install_browser

    if [ "${SANDBOX_SKIP_IMAGES:-0}" = 1 ]; then
        so_say "SANDBOX_SKIP_IMAGES=1: not building images"
    else
        "$SCRIPT_DIR/build-images.sh"
    fi

    local end
    end=$(date +%s.%N)
    so_say "done in $(awk -v a="$SO_START_TS" -v b="$end" 'BEGIN {printf "%.1f", b - a}')s; engine: $CHOSEN_HOST ($CHOSEN_KIND)"
    if [ "$CHOSEN_HOST" != "$SO_DEFAULT_DOCKER_HOST" ]; then
        so_say "use it with: eval \"\$(scripts/engine-env.sh)\""
    fi
}

main "$@"
