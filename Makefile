# Every target creates .venv and provisions servers as needed; nothing is needed by hand.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# Server binaries are built into the clone's git-ignored .servers/ (override to share a cache).
export LIFTBRIDGE_CLIENT_CACHE ?= $(CURDIR)/.servers/cache

.PHONY: venv servers proto proto-check lint format typecheck unit integration test test-compat demo bench bench-full clean

$(STAMP): pyproject.toml
	@echo "==> creating $(VENV) and installing liftbridge-client with dev tools"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

servers: venv
	$(BIN)/python -m liftbridge_client.testing provision --all

proto: venv
	$(BIN)/python scripts/gen_proto.py

proto-check: venv
	$(BIN)/python scripts/gen_proto.py --check

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

lint: venv
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

typecheck: venv
	$(BIN)/mypy

unit: venv
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

integration: servers
	$(BIN)/pytest tests/integration $(PYTEST_ARGS)

# One pytest run, so its summary counts unit and integration tests together.
test: lint typecheck proto-check servers
	$(BIN)/pytest tests $(PYTEST_ARGS)

# The whole integration suite once per server version (v1.9.0 is what `make test` runs).
COMPAT_VERSIONS ?= v1.9.0 v1.7.1 master

test-compat: servers
	@set -e; for v in $(COMPAT_VERSIONS); do \
		echo "==> integration suite against Liftbridge $$v"; \
		$(BIN)/pytest tests/integration --liftbridge-version=$$v $(PYTEST_ARGS); \
	done

demo: servers
	$(BIN)/python scripts/demo.py

BENCH_STAMP := $(VENV)/.bench-stamp

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	@touch $(BENCH_STAMP)

# Benchmarks are never part of `make test`; they fail only on errors or lost messages.
bench: servers $(BENCH_STAMP)
	$(BIN)/python -m bench --quick

bench-full: servers $(BENCH_STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .servers
