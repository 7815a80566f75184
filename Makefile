# Queue Manager — the same commands locally and in CI.
#
# Every Python package is installed from uv.lock (exact versions, with their hashes), by uv: the Makefile
# installs the uv release named in scripts/uv-requirements.txt into .tools/ when it is not there yet, so a
# fresh machine needs only python3 and make. `make lock` moves the lock on purpose; `make test-latest` runs the
# whole suite on the newest versions pyproject.toml's ranges allow, in a venv of its own, lock untouched.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DEVSTAMP:= $(VENV)/.installed-dev
TOOLS   := .tools
UV      ?= $(TOOLS)/bin/uv
# the uv to install first, when UV is the one this Makefile keeps in .tools/
UV_DEP  := $(filter $(TOOLS)/%,$(UV))
LATEST  := .venv-latest

# uv: the machine's python3, never a download of its own; the project's venv is $(VENV)
export UV_PYTHON           ?= $(PY)
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT = $(VENV)
# installed packages come with their bytecode: a server start (the suite starts hundreds) never compiles them,
# even where PYTHONDONTWRITEBYTECODE keeps Python from caching what it compiles (the suite itself runs without
# it: each test worker would otherwise rewrite and compile every test module and pytest plugin it imports)
export UV_COMPILE_BYTECODE := 1

.PHONY: install install-dev run test check test-latest lock wheel test-unit test-conformance test-conformance-valkey test-cluster fuzz lint bench clean

$(TOOLS)/bin/uv: scripts/uv-requirements.txt
	$(PY) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install -q --isolated --disable-pip-version-check --require-hashes -r scripts/uv-requirements.txt
	touch $@

# the server's dependencies, exactly as locked (--inexact: the dev tools stay when they are there)
$(STAMP): pyproject.toml uv.lock | $(UV_DEP)
	$(UV) sync -q --locked --inexact
	touch $@

# the server's and the dev tools', exactly as locked
$(DEVSTAMP): pyproject.toml uv.lock | $(UV_DEP)
	$(UV) sync -q --locked --extra dev
	touch $@ $(STAMP)

install: $(STAMP)

install-dev: $(DEVSTAMP)

## Refresh uv.lock: the newest versions pyproject.toml's ranges allow, every file's hash. Commit it after `make test`.
lock: | $(UV_DEP)
	$(UV) lock --upgrade

## The whole suite on the newest versions the ranges allow, in $(LATEST)/ (uv.lock is not read or changed);
## first the versions that differ from the lock. Drift is seen here on purpose, not by a newcomer.
test-latest: | $(UV_DEP)
	rm -rf $(LATEST)
	$(UV) venv -q $(LATEST)
	$(UV) pip install -q --refresh --python $(LATEST)/bin/python -e '.[dev]'
	$(UV) export -q --frozen --extra dev --no-hashes --no-emit-project -o $(LATEST)/locked.txt
	$(UV) pip freeze -q --python $(LATEST)/bin/python --exclude-editable > $(LATEST)/latest.txt
	$(LATEST)/bin/python scripts/drift.py $(LATEST)/locked.txt $(LATEST)/latest.txt
	$(MAKE) --no-print-directory check VENV=$(LATEST)

## The wheel a self-hoster installs (dist/queue_manager-<version>-py3-none-any.whl): the server, its web assets,
## its Lua scripts, the guides and the connectors' sources; beside it dist/requirements.txt, the server's locked
## dependencies with their hashes (pip install --require-hashes -r dist/requirements.txt, then the wheel --no-deps).
wheel: | $(UV_DEP)
	$(UV) build -q --wheel --out-dir dist
	$(UV) export -q --frozen --no-dev --no-emit-project -o dist/requirements.txt

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
	$(MAKE) --no-print-directory check

# what `make test` runs once the dev tools are installed (make test-latest: in another venv)
check:
	bash scripts/services.sh
	bash scripts/browser.sh
	bash scripts/node.sh
	$(BIN)/ruff check queue_manager tests bench connectors/python
	$(BIN)/ruff format --check queue_manager tests bench connectors/python
	$(BIN)/mypy
	$(BIN)/python -m compileall -q -j 0 queue_manager connectors/python tests bench >/dev/null
	env -u PYTHONDONTWRITEBYTECODE QM_UV=$(if $(UV_DEP),$(CURDIR)/$(UV),$(UV)) QM_TEST_STORES=$(TEST_STORES) $(PYTEST) -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=15 tests

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
	QM_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) QM_TEST_STORES=$(TEST_STORES) $(PYTEST) -q tests/conformance/test_fuzz_api.py

## The fault drill, outside CI (docs/OPERATIONS.md, "The fault drill"): two instances on Valkey + PostgreSQL, reached
## through relays it owns, under 120 joins/s through kill -9, a PostgreSQL cut, a Valkey cut and a clean restart; then
## every acknowledged join reconciled with the line and the journal, before and after a rebuild. A few minutes.
## Options: make chaos CHAOS_ARGS="--duration 120 --kills 4" (python -m tests.chaos.drill --help).
.PHONY: chaos
CHAOS_ARGS ?=
chaos: $(DEVSTAMP)
	bash scripts/services.sh
	$(BIN)/python -m tests.chaos.drill $(CHAOS_ARGS)

lint: $(DEVSTAMP)
	$(BIN)/ruff check queue_manager tests bench connectors/python
	$(BIN)/ruff format --check queue_manager tests bench connectors/python
	$(BIN)/mypy

## Hot-path benchmarks, side by side with a raw-ASGI hello-world on the same stack.
bench: $(DEVSTAMP)
	bash bench/run.sh

clean:
	rm -rf $(VENV) $(LATEST) $(TOOLS) dist .pytest_cache .mypy_cache .ruff_cache
