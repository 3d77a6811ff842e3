#!/usr/bin/env bash
# make demo: governed, contained execution for real — allow, ask (answered by a rule), deny,
# containment, then the evidence and its verification. Needs `make setup` (the Makefile runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/.venv/bin
eval "$(bash scripts/engine-env.sh)"
# One demo's worth is kept, replaced by each run, so that what it shows can be run again afterwards: the config
# and the evidence in the user's state directory, the workspace in ~/sandbox-demo (outside the state
# directory and this checkout: what governs later runs stays out of every sandbox's reach).
work="$("$BIN/python" -c 'from orchestrator.domain.statedir import state_dir; print(state_dir())')/demo"
workspace="$HOME/sandbox-demo"
rm -rf "$work" "$workspace" && mkdir -p "$work" "$workspace"
evidence="$work/evidence.jsonl"
mkdir -p "$workspace/src"
echo 'print("hello from the workspace")' > "$workspace/src/app.py"
chown -R 1000:1000 "$workspace" 2>/dev/null || chmod -R a+rwX "$workspace"   # the sandbox user is 1000:1000

cat > "$work/config.yaml" <<'YAML'
safety:
  mode: ask
  allowlist: [ls, cat, "git status", "python3 --version"]
  denylist: [sudo, "rm -rf"]
approvals:
  provider: rules
  rules:
    - name: demo-probes            # the containment probes below are approved on purpose
      argv_prefix: python3
      outcome: approved
    - name: low-and-medium-risk
      risk_at_most: medium
      outcome: approved
  default: denied
evidence:
  path: EVIDENCE_PATH
YAML
sed -i "s#EVIDENCE_PATH#$evidence#" "$work/config.yaml"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# a word as it would be typed: bare when safe, else in single quotes, else (it holds one) in double quotes
# when nothing in it is special there, else bash's own $'...'; what is shown can be pasted as it is
shell_word() {
  local dq='["$`\\!]'
  if [[ $1 =~ ^[A-Za-z0-9_./=:,+@%-]+$ ]]; then printf '%s' "$1"
  elif [[ $1 != *"'"* ]]; then printf "'%s'" "$1"
  elif ! [[ $1 =~ $dq ]]; then printf '"%s"' "$1"
  else printf '%s' "${1@Q}"; fi
}
# run STATUS UNWANTED ARGS...: shows `sandboxctl run ARGS` as typed in the workspace, runs it there, and counts
# an unmet expectation when it exits otherwise than STATUS or prints UNWANTED (a grep pattern; "" for none);
# the demo then exits 1: a containment that failed is never shown as a pass
unmet=0
run() {
  local want=$1 unwanted=$2 out rc word
  shift 2
  printf '$ sandboxctl run --config %s' "$(shell_word "$work/config.yaml")"
  for word in "$@"; do printf ' %s' "$(shell_word "$word")"; done; printf '\n'
  set +e
  out=$(cd "$workspace" && "$BIN/sandboxctl" run --config "$work/config.yaml" "$@" 2>&1)
  rc=$?
  set -e
  [ -n "$out" ] && printf '%s\n' "$out" | sed 's/^/    /'
  echo "    (exit $rc)"
  if [ "$rc" != "$want" ] || { [ -n "$unwanted" ] && grep -q -- "$unwanted" <<<"$out"; }; then
    printf '    !!! expected exit %s' "$want"; [ -n "$unwanted" ] && printf " and no '%s'" "$unwanted"; printf '\n'
    unmet=$((unmet + 1))
  fi
}

step "allow: an allowlisted command runs in a fresh hardened container (in $(shell_word "$workspace"), its workspace)"
run 0 "" -- ls -la src

step "ask → approved by a rule: a compound command (risk medium) writes in the workspace"
run 0 "" --shell 'date -u > stamp.txt && wc -c stamp.txt'

step "deny: the denylist sees through wrappers; nothing is started"
run 125 "" --shell 'env X=1 sudo rm -rf /'

step "containment: no network — a server on the host's loopback is unreachable from the sandbox"
port_file="$work/port"
python3 - "$port_file" <<'PY' &
import http.server, socketserver, sys
with socketserver.TCPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler) as httpd:
    open(sys.argv[1], "w").write(str(httpd.server_address[1]))
    httpd.timeout = 30
    httpd.handle_request(); httpd.handle_request()
PY
server=$!
for _ in $(seq 50); do [ -s "$port_file" ] && break; sleep 0.1; done
port=$(cat "$port_file")
printf '$ (on the host) python3 -c "urlopen(http://127.0.0.1:%s)"  → ' "$port"
python3 -c "import urllib.request,sys; print(urllib.request.urlopen(f'http://127.0.0.1:$port', timeout=5).status)"
run 0 CONNECTED -- python3 -c "
import socket
print('interfaces:', [name for _, name in socket.if_nameindex()])
try:
    socket.create_connection(('127.0.0.1', $port), timeout=3); print('CONNECTED: containment failed')
except OSError as e:
    print('connect to the host port failed:', e.strerror)
"
kill "$server" 2>/dev/null || true

step "containment: writes outside the workspace fail (read-only root, non-root user)"
run 0 WROTE -- python3 -c "
for path in ['/etc/passwd', '/usr/bin/evil', '/workspace/../escape', '/proc/sys/kernel/hostname']:
    try:
        open(path, 'a').write('x'); print('WROTE', path)
    except OSError as e:
        print(f'{path}: {e.strerror}')
"

step "what the workspace saw (side effects are recorded as sizes and hashes)"
ls -la "$workspace"

step "evidence ($evidence)"
"$BIN/sandboxctl" evidence show --path "$evidence" | cut -c1-160

step "evidence verify"
"$BIN/sandboxctl" evidence verify --path "$evidence"

step "the service: HTTP API, approvals through the API, the Python client, the approvals page"
"$BIN/python" scripts/demo_service.py "$work"

echo
echo "Evidence: $evidence"
echo "Verify it yourself: .venv/bin/sandboxctl evidence verify --path $(shell_word "$evidence")"
if [ "$unmet" != 0 ]; then
  echo "demo: $unmet expectation(s) not met (marked !!! above)" >&2
  exit 1
fi
