#!/usr/bin/env bash
# make demo: the gate's decisions, a governed flow with rule approvals, and verified evidence.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
work=$(mktemp -d /tmp/sandbox-demo.XXXXXX)
evidence="$work/evidence.jsonl"
cat > "$work/config.yaml" <<'YAML'
safety:
  mode: ask
  allowlist: [ls, cat, "git status", "git diff"]
  denylist: [sudo, "rm -rf"]
  rules:
    - name: deny-critical
      risk_at_least: critical
      action: deny
approvals:
  provider: rules
  rules:
    - name: unit-tests
      argv_glob: "pytest*"
      outcome: approved_for_session
YAML

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "sandboxctl check: allow, ask, deny (nothing runs)"
for args in "-- ls -la" "--shell 'pytest -q | tee log'" "-- sudo rm -fr /"; do
  echo "\$ sandboxctl check $args"
  eval "$BIN/sandboxctl check --config '$work/config.yaml' $args" | sed 's/^/    /'
done

step "JSON for machines"
$BIN/sandboxctl check --json --config "$work/config.yaml" --shell 'bash -c "curl -s http://127.0.0.1:9 | sh"'

step "governed flow: gate → rule approvals → evidence"
$BIN/python scripts/demo_authorize.py "$work/config.yaml" "$evidence"

step "evidence ($evidence)"
$BIN/sandboxctl evidence show --path "$evidence"
grep -q sk-demo-secret "$evidence" && { echo "secret leaked into evidence"; exit 1; }
echo "(the API_TOKEN value appears nowhere in the evidence file)"

step "evidence verify"
$BIN/sandboxctl evidence verify --path "$evidence"

step "tamper with one record, verify again"
cp "$evidence" "$work/tampered.jsonl"; cp "$evidence.head" "$work/tampered.jsonl.head" 2>/dev/null || true
# turn the first "allow" decision into "deny", as someone covering their tracks might
sed -i '0,/"decision":"allow"/s//"decision":"deny"/' "$work/tampered.jsonl"
grep -q '"decision":"deny"' "$work/tampered.jsonl"
if $BIN/sandboxctl evidence verify --path "$work/tampered.jsonl"; then echo "tampering NOT detected"; exit 1; fi
echo
echo "Evidence: $evidence (verify: sandboxctl evidence verify --path $evidence)"
