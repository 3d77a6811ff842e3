#!/usr/bin/env bash
# Checks what the sandbox backends rely on, against the engine setup.sh chose, and prints a report:
# hardened runs with runc and runsc, runsc file metadata (ls/stat), seccomp profiles honoured by
# runsc (--oci-seccomp), memory limit -> OOM recorded, pids limit, lifecycle events by label.
#
#   scripts/verify-engine.sh          (after scripts/setup.sh; read-only apart from short-lived
#                                      containers labelled org.sandbox-orchestrator.verify)
#
# Ends with "verify: N passed, N failed"; exit 1 when something failed. Lines marked "info" are
# findings, not requirements.
set -euo pipefail
SO_LOG_PREFIX=verify
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"

if [ -z "${DOCKER_HOST:-}" ] && [ -r "$SO_HOST_FILE" ]; then DOCKER_HOST="$(head -n1 "$SO_HOST_FILE")"; fi
[ -n "${DOCKER_HOST:-}" ] && export DOCKER_HOST
docker version --format '{{.Server.Version}}' >/dev/null 2>&1 || so_die "no engine answers at DOCKER_HOST='${DOCKER_HOST:-}'"

IMAGE="${VERIFY_IMAGE:-$SO_IMAGE_PREFIX/default:latest}"
RUN_ID="verify-$$-$(date +%s)"
LABEL="$SO_LABEL_NS.verify=$RUN_ID"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/sandbox-verify.XXXXXX")"
cleanup() {
    docker ps -aq --filter "label=$LABEL" | xargs -r docker rm -f >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT

PASSED=0 FAILED=0
pass() { PASSED=$((PASSED + 1)); printf 'verify: PASS  %s\n' "$*"; }
fail() { FAILED=$((FAILED + 1)); printf 'verify: FAIL  %s\n' "$*"; }
info() { printf 'verify: info  %s\n' "$*"; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", b - a}'; }

HARDENED=(--network none --read-only --cap-drop ALL --security-opt no-new-privileges --user 1000:1000 --label "$LABEL")

info "engine $DOCKER_HOST: $(docker version --format 'server {{.Server.Version}} (API {{.Server.APIVersion}}), client {{.Client.Version}}' 2>/dev/null)"
info "$(docker info --format 'cgroup driver {{.CgroupDriver}}, cgroup v{{.CgroupVersion}}, storage {{.Driver}}, default runtime {{.DefaultRuntime}}, runtimes: {{range $k, $v := .Runtimes}}{{$k}} {{end}}')"
info "runsc runtime config: $(docker info --format '{{with index .Runtimes "runsc"}}{{.Path}} {{.Args}}{{else}}(not registered){{end}}')"
info "engine reports memory / swap / pids limit support: $(docker info --format '{{.MemoryLimit}} / {{.SwapLimit}} / {{.PidsLimit}}')"

RUNTIMES=(runc)
if docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}' | grep -qw runsc; then
    RUNTIMES+=(runsc)
else
    fail "runsc runtime not registered with the engine"
fi

cat >"$TMP/block-unshare.json" <<'EOF'
{"defaultAction": "SCMP_ACT_ALLOW",
 "syscalls": [{"names": ["unshare", "setns"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]}
EOF
cat >"$TMP/allow-all.json" <<'EOF'
{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": []}
EOF

T0="$(date +%s)"
for rt in "${RUNTIMES[@]}"; do
    # 1. The hardened launch works; timing of 3 cold container runs.
    times=()
    ok=1
    for _ in 1 2 3; do
        t=$(now)
        out="$(docker run --rm "${HARDENED[@]}" --runtime "$rt" "$IMAGE" python3 -c 'print(1)' 2>&1)" || ok=0
        times+=("$(secs "$t" "$(now)")")
        [ "$out" = 1 ] || ok=0
    done
    if [ "$ok" = 1 ]; then pass "$rt: hardened run of python3 -c 'print(1)' (runs: ${times[*]} s)"
    else fail "$rt: hardened run failed: $out"; fi

    # 2. File metadata inside the sandbox.
    if out="$(docker run --rm "${HARDENED[@]}" --runtime "$rt" "$IMAGE" sh -c 'ls -la / >/dev/null && stat / >/dev/null && echo ok' 2>"$TMP/ls.err")" \
        && [ "$out" = ok ]; then
        pass "$rt: ls -la / and stat / work"
        if [ -s "$TMP/ls.err" ]; then info "$rt: ls -la / stderr (exit 0): $(tr '\n' ';' <"$TMP/ls.err")"; fi
    else
        fail "$rt: ls -la / or stat / failed: $(tr '\n' ';' <"$TMP/ls.err")"
    fi

    # 3. Seccomp: a profile that blocks unshare makes `unshare -U true` fail; allow-all lets it run.
    blocked="$(docker run --rm "${HARDENED[@]}" --runtime "$rt" --security-opt "seccomp=$TMP/block-unshare.json" \
        "$IMAGE" sh -c 'unshare -U true 2>&1 && echo UNSHARED; grep "^Seccomp:" /proc/self/status' 2>&1 | tr '\n\t' '  ')"
    allowed="$(docker run --rm "${HARDENED[@]}" --runtime "$rt" --security-opt "seccomp=$TMP/allow-all.json" \
        "$IMAGE" sh -c 'unshare -U true 2>&1 && echo UNSHARED' 2>&1 | tr '\n' ' ')"
    case "$blocked" in
        *UNSHARED*) fail "$rt: seccomp profile blocking unshare was NOT applied: $blocked" ;;
        *"Operation not permitted"*) pass "$rt: seccomp profile via --security-opt applied (unshare -U: $blocked)" ;;
        *) fail "$rt: unexpected output with block-unshare profile: $blocked" ;;
    esac
    case "$allowed" in
        *UNSHARED*) info "$rt: with an allow-all profile unshare -U succeeds (so the block above is the profile's doing)" ;;
        *) info "$rt: even an allow-all profile cannot unshare -U here: $allowed" ;;
    esac

    # 4. Memory limit: a memory bomb is OOM-killed and recorded.
    name="oom-$rt-$RUN_ID"
    t=$(now)
    docker run --name "$name" "${HARDENED[@]}" --runtime "$rt" --memory 64m --memory-swap 64m --pids-limit 64 \
        "$IMAGE" python3 -c '
chunks = []
while True:
    chunks.append(bytearray(16 * 1024 * 1024))' >/dev/null 2>&1 || true
state="$(docker inspect --format 'OOMKilled={{.State.OOMKilled}} ExitCode={{.State.ExitCode}}' "$name")"
    docker rm "$name" >/dev/null
    if [ "$state" = "OOMKilled=true ExitCode=137" ]; then pass "$rt: --memory 64m --memory-swap 64m memory bomb: $state ($(secs "$t" "$(now)") s)"
    else fail "$rt: memory bomb not recorded as OOM: $state"; fi

    # 5. /tmp with --read-only (runsc mounts its own tmpfs over an empty /tmp).
    if docker run --rm "${HARDENED[@]}" --runtime "$rt" "$IMAGE" sh -c 'echo x >/tmp/probe' >/dev/null 2>&1; then
        info "$rt: /tmp is WRITABLE under --read-only (mount a size-capped tmpfs on /tmp explicitly)"
    else
        info "$rt: /tmp is read-only under --read-only"
    fi

    # 6. Pids limit: children until the limit bites.
    name="pids-$rt-$RUN_ID"
    out="$(docker run --name "$name" "${HARDENED[@]}" --runtime "$rt" --memory 256m --memory-swap 256m --pids-limit 64 \
        "$IMAGE" python3 -c '
import subprocess
procs = []
try:
    for _ in range(300):
        procs.append(subprocess.Popen(["sleep", "30"]))
    print("no limit hit after", len(procs))
except OSError as e:
    print("refused after", len(procs), "children:", e.strerror)
for p in procs:
    p.kill()' 2>&1 | tail -n1)" || true
    state="$(docker inspect --format 'OOMKilled={{.State.OOMKilled}} ExitCode={{.State.ExitCode}}' "$name")"
    docker rm "$name" >/dev/null
    case "$out" in
        "refused after"*) pass "$rt: --pids-limit 64: $out ($state)" ;;
        *) info "$rt: --pids-limit 64: the workload saw no EAGAIN; container ended with $state, last output: '${out:-none}'" ;;
    esac
done

# 7. Lifecycle events, filtered by label (historical query over this run's window).
sleep 1
docker events --since "$T0" --until "$(date +%s)" --filter "label=$LABEL" --filter type=container \
    --format '{{.Action}}' >"$TMP/events" 2>&1 || true
seen="$(sort -u "$TMP/events" | tr '\n' ' ')"
missing=""
for a in create start oom die destroy; do grep -qx "$a" "$TMP/events" || missing="$missing $a"; done
if [ -z "$missing" ]; then pass "docker events --filter label=... shows create/start/oom/die/destroy (actions seen: $seen)"
else fail "docker events --filter label=... missing:$missing (seen: $seen)"; fi

echo "verify: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
