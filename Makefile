# Queue Manager — the same commands locally and in CI.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DEVSTAMP:= $(VENV)/.installed-dev

.PHONY: install install-dev run test test-unit test-conformance test-conformance-valkey lint bench clean

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

## Everything: lint, type check, unit tests, black-box HTTP conformance suite.
test: $(DEVSTAMP)
	bash scripts/services.sh
	bash scripts/browser.sh
	$(BIN)/ruff check queue_manager tests bench
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -p no:cacheprovider --ignore=tests/conformance/test_valkey_faults.py --ignore=tests/conformance/test_valkey_round_trips.py
	$(MAKE) test-conformance-valkey

## The black-box HTTP suite again, every server on STORE=valkey + SIDESTORE=pg (Redis 7 + PostgreSQL 15 here).
test-conformance-valkey: $(DEVSTAMP)
	bash scripts/services.sh
	STORE=valkey TEST_VALKEY_URL=$${TEST_VALKEY_URL:-redis://127.0.0.1:6379/12} \
	  TEST_DATABASE_URL=$${TEST_DATABASE_URL:-postgresql://postgres@127.0.0.1:5432/qm_conformance_test} \
	  $(BIN)/python -m pytest -q -p no:cacheprovider tests/conformance

test-unit: $(DEVSTAMP)
	$(BIN)/python -m pytest -q tests/unit

test-conformance: $(DEVSTAMP)
	$(BIN)/python -m pytest -q tests/conformance

lint: $(DEVSTAMP)
	$(BIN)/ruff check queue_manager tests bench
	$(BIN)/ruff format --check queue_manager tests bench || true
	$(BIN)/mypy

## Hot-path benchmarks, side by side with a raw-ASGI hello-world on the same stack.
bench: $(DEVSTAMP)
	bash bench/run.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
