# Everything a fresh Debian machine needs comes from these targets (run as root or a user with a venv).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: all venv lint typecheck importlint unit integration test demo setup image bench bench-sandbox bench-service bench-stream bench-workspace bench-k8s clean

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
	$(BIN)/ruff check orchestrator tests benchmarks
	$(BIN)/ruff format --check orchestrator

typecheck: $(STAMP)
	$(BIN)/mypy orchestrator

importlint: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

integration: $(STAMP) setup
	$(BIN)/pytest -q -m integration tests/integration

# everything: static checks, then the engine (started here if none answers), then every test
test: lint typecheck importlint setup
	$(BIN)/pytest -q

# the container engine and the sandbox images, without a registry (idempotent; ~0.3 s when warm)
setup:
	bash scripts/setup.sh

# the controller image sandbox-orchestrator/controller:<version> (Dockerfile), without a registry
image: setup
	PYTHON=$(PYTHON) bash scripts/build-controller.sh

demo: $(STAMP) setup
	bash scripts/demo.sh

bench: $(STAMP)
	$(BIN)/python benchmarks/gate_overhead.py

bench-sandbox: $(STAMP) setup
	$(BIN)/python benchmarks/sandbox_overhead.py

bench-service: $(STAMP) setup
	$(BIN)/python benchmarks/service_overhead.py

bench-workspace: $(STAMP) setup
	$(BIN)/python benchmarks/workspace_scan.py
	$(BIN)/python benchmarks/workspace_budget.py

bench-stream: $(STAMP) setup
	$(BIN)/python benchmarks/stream_latency.py

# the Kubernetes backend against the same pod through the client, on the test cluster (started if needed)
bench-k8s: $(STAMP) setup
	$(BIN)/python benchmarks/k8s_overhead.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
