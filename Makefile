# Everything a fresh Debian machine needs comes from these targets (run as root or a user with a venv).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: all venv lint typecheck importlint unit test demo setup bench clean

all: test

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
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

test: lint typecheck importlint
	$(BIN)/pytest -q

setup:
	bash scripts/setup.sh

demo: $(STAMP)
	bash scripts/demo.sh

bench: $(STAMP)
	$(BIN)/python benchmarks/gate_overhead.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
