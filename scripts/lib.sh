# shellcheck shell=bash
# shellcheck disable=SC2034  # the settings below are used by the scripts that source this file
# Shared settings and helpers for the engine/image setup scripts.
# Sourced by setup.sh, build-images.sh, engine-env.sh, stop-engine.sh and verify-engine.sh;
# not meant to be run on its own.
#
# Environment (all optional):
#   SANDBOX_STATE_DIR   persistent state (engine data root, daemon.json, log, runsc, docker-host file)
#                       default /var/lib/sandbox-orchestrator
#   SANDBOX_RUN_DIR     runtime dir (socket, pidfile, exec root); default /run/sandbox-orchestrator,
#                       or $SANDBOX_STATE_DIR/run when only SANDBOX_STATE_DIR is set
#   SANDBOX_ENGINE      auto (default) | managed | external
#   SANDBOX_DEBIAN_MIRROR / SANDBOX_DEBIAN_SECURITY_MIRROR
#                       override the Debian mirrors otherwise read from the host's apt sources
#   SANDBOX_RUNSC       use this runsc binary (>= release 20240729) instead of fetching trixie's

export PATH="${PATH:-/usr/bin:/bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

SO_LOG_PREFIX="${SO_LOG_PREFIX:-setup}"

so_say()  { printf '%s: %s\n' "$SO_LOG_PREFIX" "$*" >&2; }
so_warn() { printf '%s: warning: %s\n' "$SO_LOG_PREFIX" "$*" >&2; }
so_die()  { printf '%s: error: %s\n' "$SO_LOG_PREFIX" "$*" >&2; exit 1; }

so_abspath() {
    # Absolute, normalised path without requiring it to exist.
    case "$1" in
        /*) realpath -m -- "$1" ;;
        *)  realpath -m -- "$PWD/$1" ;;
    esac
}

SO_STATE_DIR="$(so_abspath "${SANDBOX_STATE_DIR:-/var/lib/sandbox-orchestrator}")"
if [ -n "${SANDBOX_RUN_DIR:-}" ]; then
    SO_RUN_DIR="$(so_abspath "$SANDBOX_RUN_DIR")"
elif [ -n "${SANDBOX_STATE_DIR:-}" ]; then
    SO_RUN_DIR="$SO_STATE_DIR/run"
else
    SO_RUN_DIR=/run/sandbox-orchestrator
fi

SO_SOCKET="$SO_RUN_DIR/docker.sock"
SO_DOCKER_HOST="unix://$SO_SOCKET"
SO_PIDFILE="$SO_RUN_DIR/dockerd.pid"
SO_EXEC_ROOT="$SO_RUN_DIR/exec"
SO_DATA_ROOT="$SO_STATE_DIR/docker"
SO_LOG="$SO_STATE_DIR/dockerd.log"
SO_DAEMON_JSON="$SO_STATE_DIR/daemon.json"
SO_HOST_FILE="$SO_STATE_DIR/docker-host"
SO_RUNSC="${SANDBOX_RUNSC:-$SO_STATE_DIR/bin/runsc}"
SO_DEFAULT_DOCKER_HOST="unix:///var/run/docker.sock"

SO_IMAGE_PREFIX="sandbox-orchestrator"
SO_BASE_IMAGE="$SO_IMAGE_PREFIX/base:bookworm"
SO_LABEL_NS="org.sandbox-orchestrator"

# `docker` against an explicit engine, bounded so a wedged socket cannot hang the script.
so_docker_at() {
    local host="$1"; shift
    DOCKER_HOST="$host" timeout "${SO_DOCKER_TIMEOUT:-20}" docker "$@"
}

# True when the engine at $1 answers (server part of `docker version` succeeds).
so_engine_answers() {
    command -v docker >/dev/null 2>&1 || return 1
    case "$1" in
        unix://*) [ -S "${1#unix://}" ] || return 1 ;;
    esac
    so_docker_at "$1" version --format '{{.Server.Version}}' >/dev/null 2>&1
}

# Pid of the project-managed dockerd if the pidfile names a live dockerd, else nothing.
so_managed_pid() {
    local pid
    [ -r "$SO_PIDFILE" ] || return 1
    pid="$(tr -dc '0-9' <"$SO_PIDFILE")"
    [ -n "$pid" ] || return 1
    [ -r "/proc/$pid/cmdline" ] || return 1
    # Only our dockerd: the binary is dockerd and it was started with our config file.
    local argv0
    argv0="$(tr '\0' '\n' <"/proc/$pid/cmdline" | head -n1)"
    [ "${argv0##*/}" = dockerd ] || return 1
    if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "--config-file $SO_DAEMON_JSON"; then
        printf '%s\n' "$pid"
        return 0
    fi
    return 1
}

# --- Debian mirrors, read from the host's apt sources (never hard-coded) ---------------------
#
# Prints "uri<TAB>suite" for every enabled `deb` entry of the host, one-line and deb822 formats.
so_apt_entries() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        awk '
            /^[[:space:]]*deb[[:space:]]/ {
                line = $0; sub(/#.*/, "", line)
                sub(/^[[:space:]]*deb[[:space:]]+/, "", line)
                if (line ~ /^\[/) { sub(/^\[[^]]*\][[:space:]]*/, "", line) }
                n = split(line, w, /[[:space:]]+/)
                if (n >= 2) print w[1] "\t" w[2]
            }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        awk '
            function flush(   i, j, nu, ns, u, s) {
                if (types ~ /(^|[[:space:]])deb([[:space:]]|$)/ && enabled !~ /^[[:space:]]*no/) {
                    nu = split(uris, u, /[[:space:]]+/); ns = split(suites, s, /[[:space:]]+/)
                    for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++)
                        if (u[i] != "" && s[j] != "") print u[i] "\t" s[j]
                }
                types = ""; uris = ""; suites = ""; enabled = ""; key = ""
            }
            /^#/ { next }
            /^[[:space:]]*$/ { flush(); next }
            /^[A-Za-z-]+:/ {
                key = tolower($0); sub(/:.*/, "", key)
                val = $0; sub(/^[^:]*:[[:space:]]*/, "", val)
                if (key == "types") types = val
                else if (key == "uris") uris = val
                else if (key == "suites") suites = val
                else if (key == "enabled") enabled = tolower(val)
                next
            }
            /^[[:space:]]/ {
                val = $0; sub(/^[[:space:]]+/, "", val)
                if (key == "types") types = types " " val
                else if (key == "uris") uris = uris " " val
                else if (key == "suites") suites = suites " " val
                next
            }
            END { flush() }' "$f"
    done
}

# The Debian archive mirror (serves bookworm and trixie).
so_debian_mirror() {
    if [ -n "${SANDBOX_DEBIAN_MIRROR:-}" ]; then printf '%s\n' "${SANDBOX_DEBIAN_MIRROR%/}"; return 0; fi
    local entries uri
    entries="$(so_apt_entries)"
    # Prefer an entry that serves bookworm itself, then any Debian release suite.
    uri="$(printf '%s\n' "$entries" | awk -F'\t' '$2 == "bookworm" {print $1; exit}')"
    if [ -z "$uri" ]; then
        uri="$(printf '%s\n' "$entries" | awk -F'\t' '
            $2 ~ /^(bookworm|trixie|forky|sid|stable|testing|unstable|oldstable|bullseye)$/ &&
            $1 !~ /security/ {print $1; exit}')"
    fi
    [ -n "$uri" ] || return 1
    printf '%s\n' "${uri%/}"
}

# Downloads package $1 from Debian trixie into directory $2 (created) and prints the .deb's path. A
# private apt state under $SO_STATE_DIR/apt-trixie: the host's lists, caches and sources stay untouched,
# and nothing is installed. Needs $SO_TMP for its log.
so_trixie_download() {
    local package="$1" dest="$2" mirror apt_dir
    command -v dpkg-deb >/dev/null 2>&1 || so_die "dpkg-deb not found (needed to unpack $package)"
    mirror="$(so_debian_mirror)" || so_die "no Debian mirror found in /etc/apt/sources.list{,.d}; set SANDBOX_DEBIAN_MIRROR"
    apt_dir="$SO_STATE_DIR/apt-trixie"
    mkdir -p "$apt_dir/state/lists/partial" "$apt_dir/cache/archives/partial" \
        "$apt_dir/sources.list.d" "$apt_dir/preferences.d" "$dest"
    local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    [ -r "$keyring" ] || so_die "$keyring missing (apt-get install debian-archive-keyring)"
    printf 'deb [signed-by=%s] %s trixie main\n' "$keyring" "$mirror" >"$apt_dir/sources.list"
    local apt_opts=(
        -o "Dir::State=$apt_dir/state"
        -o "Dir::State::status=/var/lib/dpkg/status"
        -o "Dir::Cache=$apt_dir/cache"
        -o "Dir::Etc::sourcelist=$apt_dir/sources.list"
        -o "Dir::Etc::sourceparts=$apt_dir/sources.list.d"
        -o "Dir::Etc::preferences=$apt_dir/preferences"
        -o "Dir::Etc::preferencesparts=$apt_dir/preferences.d"
        -o "APT::Sandbox::User=root"
        -o "Acquire::Languages=none"
        -o "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false"
        -o "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false"
        -o "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false"
        -o "Acquire::IndexTargets::deb::CNF::DefaultEnabled=false"
    )
    local log="$SO_TMP/apt-trixie-$package.log"
    so_say "fetching $package from Debian trixie (private apt state in $apt_dir)"
    apt-get -q "${apt_opts[@]}" update >"$log" 2>&1 \
        || { tail -n 20 "$log" >&2; so_die "apt-get update for trixie failed"; }
    (cd "$dest" && apt-get -q "${apt_opts[@]}" download "$package") >>"$log" 2>&1 \
        || { tail -n 20 "$log" >&2; so_die "apt-get download $package (trixie) failed"; }
    # the package lists are only needed for this download
    rm -rf "$apt_dir/state/lists" "$apt_dir/cache"
    local deb
    deb="$(find "$dest" -maxdepth 1 -name "${package}_*.deb" | head -n1)"
    [ -n "$deb" ] || so_die "apt-get download $package produced no .deb"
    printf '%s\n' "$deb"
}

# The Debian security mirror (may be empty when the host has none).
so_debian_security_mirror() {
    if [ -n "${SANDBOX_DEBIAN_SECURITY_MIRROR:-}" ]; then printf '%s\n' "${SANDBOX_DEBIAN_SECURITY_MIRROR%/}"; return 0; fi
    so_apt_entries | awk -F'\t' '$2 ~ /-security$/ {u = $1; sub(/\/+$/, "", u); print u; exit}'
}

# --- images (build-images.sh, build-controller.sh) -------------------------------------------------

# Exports DOCKER_HOST for the engine setup.sh recorded (unless already set) and checks that it answers.
# The legacy builder: no BuildKit frontend image to fetch, and `--network host` just works.
so_use_engine() {
    if [ -z "${DOCKER_HOST:-}" ] && [ -r "$SO_HOST_FILE" ]; then
        DOCKER_HOST="$(head -n1 "$SO_HOST_FILE")"
    fi
    if [ -n "${DOCKER_HOST:-}" ]; then export DOCKER_HOST; fi
    export DOCKER_BUILDKIT=0
    command -v docker >/dev/null 2>&1 || so_die "docker CLI not found; run scripts/setup.sh"
    timeout 20 docker version --format '{{.Server.Version}}' >/dev/null 2>&1 \
        || so_die "no engine answers at DOCKER_HOST='${DOCKER_HOST:-}' (run scripts/setup.sh first)"
}

so_image_exists() { docker image inspect "$1" >/dev/null 2>&1; }
so_image_label() { docker image inspect --format "{{index .Config.Labels \"$2\"}}" "$1" 2>/dev/null || true; }

# The tag of the sandbox image built from images/<name>/Dockerfile.
so_sandbox_image() { printf '%s/%s:latest\n' "$SO_IMAGE_PREFIX" "$1"; }

# sha256 over the files below PATH... of DIR (relative path + content), in a fixed order; bytecode
# caches left out (Python writes them into a checkout as it runs).
so_tree_sha() {
    local dir="$1"; shift
    (cd "$dir" && find "$@" -type f ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum) \
        | sha256sum | cut -d' ' -f1
}

# Check that a unix socket path fits in sun_path (108 bytes incl. NUL).
so_check_socket_len() {
    local p="$1"
    if [ "${#p}" -ge 104 ]; then
        so_die "socket path too long (${#p} bytes, unix limit is 107): $p — set SANDBOX_RUN_DIR to a shorter directory"
    fi
}
