# Queue Manager — the same commands locally and in CI.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DEVSTAMP:= $(VENV)/.installed-dev

.PHONY: install install-dev run test test-unit test-conformance test-conformance-valkey test-cluster fuzz lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(DEVSTAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@ $(STAMP)

install: $(STAMP)

install-dev: $(DEVSTAMP)

## Start the server on the embedded store (STORE=memory); prints where it listens and how to sign in.
run: $(STAMP)
	$(BIN)/python -m queue_manager

## Everything: lint, type check, then the whole suite in one pytest run on $(PYTEST_WORKERS) workers: unit, store,
## journal, fleet, inline and browser tests, and the black-box HTTP suite on both stores (memory, valkey+pg).
## docs/testing.md: the layout, how to run one part, and the time budget.
PYTEST_WORKERS ?= 4
TEST_STORES    ?= memory,valkey
PYTEST         := $(BIN)/python -m pytest -p no:cacheprovider
# the Valkey and PostgreSQL of the valkey-store servers (each server: a key prefix and a schema of its own)
export TEST_VALKEY_URL   ?= redis://127.0.0.1:6379/12
export TEST_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/qm_conformance_test

test: $(DEVSTAMP)
	bash scripts/services.sh
	bash scripts/browser.sh
	bash scripts/node.sh
	$(BIN)/ruff check queue_manager tests bench
	$(BIN)/ruff format --check queue_manager tests bench
	$(BIN)/mypy
	QM_TEST_STORES=$(TEST_STORES) $(PYTEST) -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=15 tests

## The black-box HTTP suite alone, every server on STORE=valkey + SIDESTORE=pg (Redis 7 + PostgreSQL 15 here).
test-conformance-valkey: $(DEVSTAMP)
	bash scripts/services.sh
	QM_TEST_STORES=valkey $(PYTEST) -q -n $(PYTEST_WORKERS) tests/conformance

## On a Valkey cluster: starts a throw-away 3-master cluster on loopback (scripts/valkey-cluster.sh), runs the store
## contract and the cluster tests on it (tests/store) and the black-box HTTP suite with every server on it
## (VALKEY_URL=redis+cluster://…), then stops it. The modules that cut or count one Valkey server are skipped.
CLUSTER_DIR ?= $(or $(TMPDIR),/tmp)/qm-valkey-cluster-$(shell echo $$PPID)
test-cluster: $(DEVSTAMP)
	bash scripts/services.sh
	bash scripts/valkey-cluster.sh start $(CLUSTER_DIR) >/dev/null
	export TEST_VALKEY_CLUSTER_URL=$$(cat $(CLUSTER_DIR)/url) QM_TEST_STORES=valkey; \
	  $(PYTEST) -q -n $(PYTEST_WORKERS) tests/store tests/fleet -k cluster \
	  && $(PYTEST) -q -n $(PYTEST_WORKERS) tests/conformance; \
	  status=$$?; bash scripts/valkey-cluster.sh stop $(CLUSTER_DIR); exit $$status

test-unit: $(DEVSTAMP)
	$(PYTEST) -q tests/unit

## The black-box HTTP suite alone on the embedded store.
test-conformance: $(DEVSTAMP)
	QM_TEST_STORES=memory $(PYTEST) -q -n $(PYTEST_WORKERS) tests/conformance

## The API fuzzed hard, outside CI: every operation of GET /api/openapi.json with FUZZ_EXAMPLES generated requests per
## mode (positive, negative) and pass (any room, a real room), against real servers on both stores. CI runs the same
## module with 12 (docs/testing.md). What ran, per store: test-artifacts/fuzz/<store>.json.
FUZZ_EXAMPLES ?= 500
fuzz: $(DEVSTAMP)
	bash scripts/services.sh
	QM_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) QM_TEST_STORES=$(TEST_STORES) $(PYTEST) -q -n 2 tests/conformance/test_fuzz_api.py

lint: $(DEVSTAMP)
	$(BIN)/ruff check queue_manager tests bench
	$(BIN)/ruff format --check queue_manager tests bench
	$(BIN)/mypy

## Hot-path benchmarks, side by side with a raw-ASGI hello-world on the same stack.
bench: $(DEVSTAMP)
	bash bench/run.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
