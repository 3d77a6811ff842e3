# Everything a fresh Debian machine needs comes from these targets (run as root or a user with a venv).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: all venv lint typecheck importlint unit integration test test-unit test-docker test-first-hour demo setup ci-externals mcp-inspector image k8s-up k8s-down test-k8s test-long bench bench-sandbox bench-service bench-stream bench-workspace bench-k8s bench-session bench-session-k8s bench-pool bench-pool-k8s bench-egress bench-grants bench-profiles bench-ci bench-ci-k8s bench-mcp clean

all: test

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@# bytecode written now, even where PYTHONDONTWRITEBYTECODE is set: every CLI start would recompile
	$(BIN)/python -m compileall -q orchestrator
	@touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check orchestrator tests benchmarks scripts docs/examples
	$(BIN)/ruff format --check orchestrator scripts/testcluster tests/unit/testcluster docs/examples
	$(BIN)/shellcheck scripts/*.sh .ci/run

typecheck: $(STAMP)
	$(BIN)/mypy orchestrator
	$(BIN)/mypy scripts/testcluster
	$(BIN)/mypy docs/examples

importlint: $(STAMP)
	$(BIN)/lint-imports

# The tiers, each on its own (markers, pyproject.toml): unit needs nothing; docker the engine (make setup);
# k8s the test cluster (make k8s-up). `make test` runs all three side by side.
test-unit: $(STAMP)
	$(BIN)/pytest -q -n 2 -m "not integration and not k8s" tests/unit

test-docker: $(STAMP) setup
	$(BIN)/pytest -q -m "integration and not k8s"

# the first hour: every command the README and docs/getting-started.md show, run as written from a fresh clone
test-first-hour: $(STAMP) setup
	$(BIN)/pytest -q -m firsthour

unit: test-unit

integration: test-docker

# everything: static checks, the engine (started here if none answers) and the test cluster, then every test.
# The tiers run side by side (pytest-xdist, TEST_WORKERS of them): the tests that wait on the same daemon run
# in order on a worker of their own (the Docker tier's, the API's, the cluster's battery and its other tests:
# tests/conftest.py XDIST_GROUPS), the unit tests fill the gaps. TEST_WORKERS=0: one process, every test in
# order (about twice as long). A cluster this target started is stopped and cleaned at the end, pass or fail;
# one that was already up is left up.
TEST_WORKERS ?= 4
test: lint typecheck importlint setup
	@if bash scripts/k8s-cluster.sh status >/dev/null 2>&1; then was_up=1; else was_up=0; fi; \
	bash scripts/k8s-cluster.sh up && $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not long"; rc=$$?; \
	if [ $$was_up = 0 ]; then bash scripts/k8s-cluster.sh down || rc=1; fi; exit $$rc

# the tests marked `long` (pyproject.toml): more than make test's 15 minutes allow here (the containment battery
# on sessions, Docker and Kubernetes, ~9 min); CI runs them after make test (.ci/run). The cluster as make test treats it
test-long: $(STAMP) setup
	@if bash scripts/k8s-cluster.sh status >/dev/null 2>&1; then was_up=1; else was_up=0; fi; \
	bash scripts/k8s-cluster.sh up && $(BIN)/pytest -q -n 2 --dist loadgroup -m long; rc=$$?; \
	if [ $$was_up = 0 ]; then bash scripts/k8s-cluster.sh down || rc=1; fi; exit $$rc

# the container engine and the sandbox images, without a registry (idempotent; ~0.3 s when warm)
setup:
	bash scripts/setup.sh

# node 20 as the GitHub runner ships it (its externals/node20: JavaScript actions in tests/ci), the official
# linux-x64 build through npm's client, sha512 pinned, cached by version in the state directory (the tests call
# the script themselves: a fresh machine gets it on the first run)
ci-externals:
	bash scripts/ci-externals.sh

# the MCP Inspector's command-line client (npm's @modelcontextprotocol/inspector-cli, its tree pinned by
# scripts/mcp-inspector/package-lock.json) on that node 20, cached by version in the state directory; prints the
# path of its wrapper. The MCP tests call the script themselves, as the CI tests do ci-externals: a fresh machine
# gets it on the first run (~8 s), then it is found at once
mcp-inspector:
	bash scripts/mcp-inspector.sh

# the controller image sandbox-orchestrator/controller:<version> (Dockerfile), without a registry
image: setup
	PYTHON=$(PYTHON) bash scripts/build-controller.sh

# the test cluster (scripts/k8s-cluster.sh): a real single-node Kubernetes on 127.0.0.1, built from the Go
# module proxy the first time (~3.5 min), then ~8 s cold and ~0.4 s when already up; down cleans it all away.
# The venv first: the cluster itself is Python (scripts/testcluster) and applies its objects with the
# venv's kubernetes client.
k8s-up: $(STAMP) setup
	bash scripts/k8s-cluster.sh up

k8s-down: $(STAMP)
	bash scripts/k8s-cluster.sh down

# the Kubernetes tier against that cluster (left up afterwards: `make k8s-down` stops it), on two workers: the
# containment battery beside the rest (the node fits two 1-CPU pods)
test-k8s: $(STAMP) k8s-up
	$(BIN)/pytest -q -n 2 --dist loadgroup -m "k8s and not long"

demo: $(STAMP) setup
	bash scripts/demo.sh

# every bench-* passes BENCH_ARGS on to its script(s): e.g. BENCH_ARGS=--quick, the smallest settings
# (does it run end to end?), or a script's own options. They find the engine and the test cluster as
# the tests do (benchmarks/engine.py, benchmarks/cluster.py): nothing to export after `make setup`.
bench: $(STAMP)
	$(BIN)/python benchmarks/gate_overhead.py $(BENCH_ARGS)

bench-sandbox: $(STAMP) setup
	$(BIN)/python benchmarks/sandbox_overhead.py $(BENCH_ARGS)

bench-ci: $(STAMP) setup
	$(BIN)/python benchmarks/ci_hook.py $(BENCH_ARGS)

# the same step on the test cluster: through the hook vs exec'd into an already-running job pod
bench-ci-k8s: $(STAMP) setup
	$(BIN)/python benchmarks/ci_hook_k8s.py $(BENCH_ARGS)

bench-service: $(STAMP) setup
	$(BIN)/python benchmarks/service_overhead.py $(BENCH_ARGS)

# the MCP front door: tools/call run / exec_command over Streamable HTTP vs the client's POSTs, over stdio vs
# execute() in process, write_stdin through MCP vs the API (BENCH_ARGS=--sdk-floor: the SDK's own cost, in memory)
bench-mcp: $(STAMP) setup
	$(BIN)/python benchmarks/mcp_overhead.py $(BENCH_ARGS)

bench-workspace: $(STAMP) setup
	$(BIN)/python benchmarks/workspace_scan.py $(BENCH_ARGS)
	$(BIN)/python benchmarks/workspace_budget.py $(BENCH_ARGS)

bench-stream: $(STAMP) setup
	$(BIN)/python benchmarks/stream_latency.py $(BENCH_ARGS)

# interactive sessions: a one-byte write_stdin round trip vs docker exec -i; opening a session vs a one-shot run
bench-session: $(STAMP) setup
	$(BIN)/python benchmarks/session_roundtrip.py $(BENCH_ARGS)

bench-session-k8s: $(STAMP) setup
	$(BIN)/python benchmarks/session_roundtrip.py --kubernetes $(BENCH_ARGS)

# pre-started sandboxes: execute() from a ready pool vs a bare docker run (runc, runsc); a burst with and without
bench-pool: $(STAMP) setup
	$(BIN)/python benchmarks/pool_launch.py $(BENCH_ARGS)

# pre-started pods: execute() from a ready pool vs cold, on the test cluster with the kubelet's generic and
# evented PLEG (the cluster is restarted between them and left as it was found)
bench-pool-k8s: $(STAMP) setup
	$(BIN)/python benchmarks/pool_pods.py $(BENCH_ARGS)

# the egress proxy: throughput through a tunnel vs a direct connection on loopback, and a connection's added latency
bench-egress: $(STAMP)
	$(BIN)/python benchmarks/egress_proxy.py $(BENCH_ARGS)

# grants with budgets: a covered run's reserve + settle vs two bare SQLite updates
bench-grants: $(STAMP)
	$(BIN)/python benchmarks/grant_check.py $(BENCH_ARGS)

# profile usage analysis: usage_report, recommend and whatif over 100,000 synthetic runs vs reading + sorting them;
# then the same read from the store, and what recording a run's usage costs its end; the profiles page's distribution (SQL)
bench-profiles: $(STAMP)
	$(BIN)/python benchmarks/profile_usage.py $(BENCH_ARGS)
	$(BIN)/python benchmarks/usage_recording.py $(BENCH_ARGS)
	$(BIN)/python benchmarks/profile_distribution.py $(BENCH_ARGS)

# the Kubernetes backend against the same pod through the client, on the test cluster (started if needed)
bench-k8s: $(STAMP) setup
	$(BIN)/python benchmarks/k8s_overhead.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
