# `make demo`, `make check` (the fast tier) and `make test` (everything; CI runs it). Each creates or
# refreshes .venv first.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The fast tier: every test that needs no Ray cluster, browser, several nodes or demo subprocess, and is
# not slow (the markers are registered in pyproject.toml; tests/conftest.py sets ray/browser by fixture).
FAST := not ray and not browser and not multinode and not demo and not slow
# pytest-xdist workers, one per core; tests/conftest.py groups them (xdist_group): the Ray, browser,
# multi-node and demo tests run on one worker in order, a module with a module-scoped fixture on one
# worker, any other test on whichever is free. JOBS=0: one process (no workers).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
XDIST := -n $(JOBS) --dist loadgroup

.PHONY: install demo check test lint format bench soak clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, by its exact pin, so pip never resolves a bare `torch` (a multi-GB CUDA download here).
	$(BIN)/python -m pip install -q "torch==2.13.0"
	# dev tools, the eval extra (lm-evaluation-harness) and the export extra (MLflow, TensorBoard, W&B), which tests use
	$(BIN)/python -m pip install -q -e ".[dev,eval,export]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/looplab demo

check: install
	$(BIN)/python -m pytest -q $(XDIST) -m "$(FAST)" $(PYTEST_ARGS)

test: install
	$(BIN)/python -m pytest -q $(XDIST) $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: install
	$(BIN)/python benchmarks/model_bench.py
	$(BIN)/python benchmarks/queue_bench.py

# The soak by hand (tests/cluster/soak.py; docs/guarantees.md#the-soak): the study under a seeded schedule of
# faults on the network-namespace cluster (root). JOBS here is the study's size, not pytest's workers
# (its default, the CPU count, applies only to check and test).
SEED ?= 41
FAULTS ?= 10
SOAK_JOBS = $(if $(filter command line,$(origin JOBS)),$(JOBS),41)
soak: install
	$(BIN)/python -m tests.cluster.soak --seed $(SEED) --faults $(FAULTS) --jobs $(SOAK_JOBS) --out soak-summary.txt

clean:
	rm -rf $(VENV) .pytest_cache artifacts
