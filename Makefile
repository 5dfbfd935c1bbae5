# Every target creates .venv and provisions servers as needed; nothing is needed by hand.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# Server binaries are built into the clone's git-ignored .servers/ (override to share a cache).
export LIFTBRIDGE_CLIENT_CACHE ?= $(CURDIR)/.servers/cache

.PHONY: venv servers proto proto-check lint format typecheck unit integration test test-compat demo bench bench-full clean
.PHONY: spark-demo

$(STAMP): pyproject.toml
	@echo "==> creating $(VENV) and installing liftbridge-client with dev tools"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m pip install -q -e '.[cli,docs,otel,spark,extras-test]'
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

# One pytest run, so its summary counts unit and integration tests together (the fault
# suite's short profile included; fault-tools installs iptables/iproute2 if root on Debian).
# The 40 slowest tests are listed at the end: where the CI budget (60 min) goes.
test: lint typecheck proto-check servers fault-tools
	$(BIN)/pytest tests --ignore=tests/faults/test_soak_smoke.py --durations=40 $(PYTEST_ARGS)

# The release as users get it (scripts/release_check.py; .ci/run runs it after make test):
# the version, CHANGELOG.md's top section and the tag v<version> agree; python -m build
# makes the sdist and the wheel; twine check --strict on both; the sdist installed into a
# fresh venv runs its own tests/unit. About 3 minutes, most of it pip and the unit tests.
.PHONY: release-check
release-check: venv
	$(BIN)/python scripts/release_check.py

# The dependency ranges of pyproject.toml at both ends (docs/compatibility.md): tests/unit
# and the NATS and h2 integration files in throwaway venvs (.venv-deps-low, .venv-deps-high;
# reused while their stamp matches) with every runtime dependency at its floor, then at its
# ceiling or newest. 8-10 minutes on a loaded 2-core machine; TEST_DEPS_ENDS=low: one end;
# high-after-make-test (.ci/run): the ceiling unless .venv holds exactly its versions.
TEST_DEPS_ENDS ?= low high

.PHONY: test-deps
test-deps: servers
	$(BIN)/python scripts/test_deps.py $(TEST_DEPS_ENDS) -- $(PYTEST_ARGS)

# The fault suite (tests/faults; docs/testing.md): partitions, one-way drops, loss, slow
# links, pauses and kills on clusters in private network namespaces (needs root, unshare,
# iptables, tc). `make test` runs its short profile; this runs FAULTS_PROFILE (standard:
# every fault kind twice, 24 rounds in about 21 min at load 8-19, plus 2 crash-all rounds
# of about 1 min each (57 s on v1.9.0, 37 s patched, at load 3); long: ten rounds each,
# for benchmark-style runs).
FAULTS_PROFILE ?= standard

.PHONY: test-faults fault-tools
fault-tools:
	bash scripts/fault-tools.sh

# Only what depends on the profile, and the soak smoke that `make test` leaves out: the
# rest of tests/faults (the server patch's scenarios and Go tests, the checkers' unit
# tests) does not change with the profile and `make test` has run it.
FAULTS_TESTS := tests/faults/test_fault_rounds.py tests/faults/test_soak_smoke.py

test-faults: servers fault-tools
	FAULTS_PROFILE=$(FAULTS_PROFILE) $(BIN)/pytest $(FAULTS_TESTS) $(PYTEST_ARGS)

# The soak (tests/faults/soak.py; docs/testing.md): one client publishing and consuming
# for SOAK_MINUTES through leader kills, partitions and pauses, a sample of its RSS, fds,
# tasks, threads and latency every SOAK_INTERVAL seconds; fails when one of them grows or
# an acked message was never consumed, exits 3 (NOT JUDGED) when too short to judge the
# trends (under about 11 min). Report in .faults/soak-<stamp>/.
SOAK_MINUTES ?= 30
SOAK_INTERVAL ?= 30

.PHONY: soak
soak: servers fault-tools
	PYTHONPATH=tests:. $(BIN)/python -m faults.soak --minutes $(SOAK_MINUTES) --interval $(SOAK_INTERVAL)

# The whole integration suite once per server version (v1.9.0 is what `make test` runs).
COMPAT_VERSIONS ?= v1.9.0 v1.7.1 master

test-compat: servers
	@set -e; for v in $(COMPAT_VERSIONS); do \
		echo "==> integration suite against Liftbridge $$v"; \
		$(BIN)/pytest tests/integration --liftbridge-version=$$v $(PYTEST_ARGS); \
	done

demo: servers
	$(BIN)/python scripts/demo.py

# The Spark pipeline example on a throwaway local node (the venv has the spark extra).
spark-demo: servers
	$(BIN)/python scripts/demo.py spark_pipeline

BENCH_STAMP := $(VENV)/.bench-stamp

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	@touch $(BENCH_STAMP)

# Benchmarks are never part of `make test`; they fail only on errors or lost messages.
# Quick (3-4 min): the ratios to go-liftbridge, phases of ~3 s in balanced orders, with
# min..max beside each median; appends a small summary to bench/results/<commit>.json
# (committed; a tree with changes writes <commit>-dirty.json, git-ignored).
bench: servers $(BENCH_STAMP)
	$(BIN)/python -m bench.ratios

# Two revisions' client side by side in one run (bench/compare.py; about 5 min):
#   make bench-compare A B     (or A=main B=HEAD)
# prints per metric B/A, the ratio of their ratios to go-liftbridge, with its spread.
# BENCH_COMPARE_ARGS: e.g. --groups publish --reps 6 --phase 4.
BENCH_COMPARE_ARGS ?=
ifeq (bench-compare,$(firstword $(MAKECMDGOALS)))
  COMPARE_REVS := $(wordlist 2,3,$(MAKECMDGOALS))
  ifneq ($(COMPARE_REVS),)
    A := $(word 1,$(COMPARE_REVS))
    B := $(word 2,$(COMPARE_REVS))
    $(eval $(COMPARE_REVS):;@:)
  endif
endif
.PHONY: bench-compare
bench-compare: servers $(BENCH_STAMP)
	@test -n "$(A)" -a -n "$(B)" || { echo "usage: make bench-compare A B (git revisions)" >&2; exit 2; }
	$(BIN)/python -m bench.compare $(A) $(B) $(BENCH_COMPARE_ARGS)

bench-full: servers $(BENCH_STAMP)
	$(BIN)/python -m bench
	$(BIN)/python -m bench.ratios --full --docs

# The Spark connector on a real Spark standalone cluster (a Master and two one-core Workers on
# 127.0.0.1 from the pyspark wheel; needs Java 17+): batch read, streaming restart from a
# checkpoint, an exactlyOnce write with an executor killed. 2-4 min, so not in `make test`;
# .ci/run runs it after (docs/testing.md).
.PHONY: test-spark-cluster
test-spark-cluster: servers
	$(BIN)/pytest tests/integration/test_spark_cluster.py $(PYTEST_ARGS)

# The Spark connector side by side with Spark's Kafka connector on a Kafka broker from Maven
# Central (needs Java 17+ and Maven; some minutes; never part of `make test`).
# BENCH_SPARK_ARGS: --quick (20,000 rows, one repetition), --docs (docs/spark-benchmarks.md).
BENCH_SPARK_ARGS ?=
.PHONY: bench-spark
bench-spark: servers $(BENCH_STAMP)
	$(BIN)/python -m bench.spark_kafka $(BENCH_SPARK_ARGS)

# The documentation site (mkdocs.yml) into site/; --strict fails on any warning.
# `make test` builds it too (tests/unit/test_docs_site.py).
.PHONY: docs
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .servers

# Docker: images built locally FROM scratch (no registry); never part of `make test`.
.PHONY: docker-image
docker-image: servers
	$(BIN)/python -m liftbridge_client.testing docker-image

# The docker image, the compose files and the docker-backed fixtures, tested for real (not
# part of `make test`; .ci/run runs it after). scripts/with-docker.sh uses the running
# daemon, or installs docker.io and starts dockerd for the run (root on Debian) and stops
# it afterwards.
DOCKER_SUITE := tests/integration/test_publish.py tests/integration/test_subscribe.py \
	tests/integration/test_admin.py tests/integration/test_cursors.py \
	tests/integration/test_cluster_routing.py tests/integration/test_faults.py
.PHONY: test-docker docker-checks
# Compose v2 built from its Go module (Debian has only v1), so both are tested.
COMPOSE_V2_VERSION := v2.29.7
.PHONY: compose-v2
compose-v2:
	bash scripts/build-compose-v2.sh $(COMPOSE_V2_VERSION)

test-docker: servers
	bash scripts/with-docker.sh $(MAKE) --no-print-directory docker-checks

docker-checks: servers
	$(BIN)/python -m liftbridge_client.testing docker-image
	LIFTBRIDGE_DOCKER_TESTS=1 $(BIN)/pytest tests/dockerized $(PYTEST_ARGS)
	$(BIN)/pytest $(DOCKER_SUITE) --liftbridge-deployment=docker $(PYTEST_ARGS)
	@left=$$(docker ps -aq --filter label=io.github.liftbridge-client.deployment); \
	if [ -n "$$left" ]; then echo "error: containers left behind: $$left" >&2; exit 1; fi
