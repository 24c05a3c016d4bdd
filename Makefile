# oncelog developer tasks. `make demo` and `make test` work on a fresh machine with
# Python 3.11+: both run `setup` first.
#
#   make setup   .venv with oncelog and its test and lint dependencies, kcat, Chromium, etcd, a Java 17+ runtime
#   make test    the default test suite (everything not marked slow)
#   make lint    ruff over src, tests, bench and scripts; mypy over src, tests and bench; the layers' import
#                contract (import-linter, [tool.importlinter] in pyproject.toml); .ci/run runs it first
#   make demo    the main job: `oncelog demo` (exactly-once Spark order enrichment, with faults)
#   make bench   benchmarks (bench/run.py; BENCH_ARGS=--quick for a smoke run), never part of the tests
#   make partition-scale  one broker at 1,000, 10,000 and 100,000 partitions: creation, write rounds, restart after
#                      kill -9 (bench/partition_scale.py; PARTITIONS=1000,10000 for a shorter run)
#   make soak    `oncelog chaos --minutes 10`: broker kills and dropped responses, judged by the history checker
#   make soak-cluster  the same on a 3-broker cluster (`--brokers 3`): kills, pauses, partitions, full disks
#   make soak-faults   long pauses, network partitions, full disks and lease losses on a cluster with Kafka's 9 s sessions
#   make soak-secure   15 minutes of every fault kind on a SASL_SSL cluster with ACLs and Kafka's 9 s sessions (`--secure`)
#   make soak-share    10 minutes of a read_committed share group (KIP-932) through consumer and broker kills
#   make cluster-faults a minute of every kind of fault on a 3-broker cluster, judged by the history checker
#   make groups-faults the KIP-848 consumer protocol's slow fault runs (a Java loop killed again and again, a failover)
#   make iceberg-faults the Iceberg sink's fault runs (driver kills at every pause point, task retries, a concurrent writer),
#                      real speculative execution on a standalone cluster,
#                      and `oncelog demo --sink iceberg` (a task failure; a driver kill)
#   make sink-faults the Kafka sink's real speculative execution on a standalone cluster, both modes,
#                      both modes through task retries, driver kills and a broker restart (2 min),
#                      and through twelve driver kills at the sink's pause points and at random,
#                      `pipeline run` stopped by SIGINT inside and SIGTERM between micro-batches,
#                      `oncelog demo --stateful --mode partition` (a re-run gives each task the same rows)
#                      and `oncelog demo` with a driver kill
#   make compat  kafka-python's own integration tests against a fresh broker (scripts/kafka-python-suite.sh)
#   make clean   caches and build output; `make distclean` also removes .venv

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV := .venv
VENV_PYTHON := $(VENV)/bin/python
SETUP_STAMP := $(VENV)/.oncelog-setup
BENCH_STAMP := $(VENV)/.oncelog-bench
PYTEST_ARGS ?=
BENCH_ARGS ?=

# The first interpreter that is Python 3.11 or newer.
PYTHON ?= $(shell for candidate in python3 python3.13 python3.12 python3.11 python; do \
	  if command -v $$candidate >/dev/null 2>&1 && \
	     $$candidate -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then \
	    echo $$candidate; break; \
	  fi; done)

.PHONY: help setup test lint demo bench partition-scale soak soak-share soak-cluster soak-faults soak-secure cluster-faults groups-faults iceberg-faults sink-faults compat clean distclean

help:
	@sed -n 's/^#   //p' $(firstword $(MAKEFILE_LIST))

setup: $(SETUP_STAMP)
	@scripts/ensure-apt-package.sh kcat kcat "the kcat tests need it"
	@scripts/ensure-apt-package.sh chromium chromium "the console's browser tests need it (headless, driven by Playwright)"
	@scripts/ensure-etcd.sh
	@scripts/ensure-java.sh $(VENV_PYTHON)

# Where a C compiler is, pip builds the Spark source's C loop and the tests check it was.
HAVE_CC := $(shell command -v cc >/dev/null 2>&1 && echo 1)

# Reinstalled only when the dependencies or the C extension change.
$(SETUP_STAMP): pyproject.toml setup.py src/oncelog/client/_record_starts.c
	@if [ -z "$(PYTHON)" ]; then \
	  echo "setup: error: oncelog needs Python 3.11 or newer (none found on PATH)" >&2; exit 1; \
	fi
	@if [ ! -x $(VENV_PYTHON) ] || \
	   ! $(VENV_PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then \
	  echo "setup: creating $(VENV) with $$($(PYTHON) --version)"; \
	  rm -rf $(VENV); \
	  $(PYTHON) -m venv $(VENV); \
	fi
	@echo "setup: installing oncelog and its test and lint dependencies into $(VENV) with pip: about 66 packages,"
	@echo "setup: 1.5 GB installed (pyspark 490 MB, the Java client's jars 210 MB, pyarrow 170 MB, Playwright 165 MB,"
	@echo "setup: pyiceberg and its dependencies 120 MB). About 150 s on a fresh 2-core machine, 30-40 s"
	@echo "setup: when pip's cache already has them; done once (again only when pyproject.toml or setup.py changes)."
	@started=$$SECONDS; \
	$(VENV_PYTHON) -m pip install --disable-pip-version-check --progress-bar off -e '.[test,lint]' | \
	  awk '/^Collecting / { print "setup:   " $$0; fflush() } \
	       /^ +Downloading / { sub(/^ +/, ""); print "setup:     " $$0; fflush() } \
	       /^ *Building wheel/ { sub(/^ +/, ""); print "setup:   " $$0; fflush() } \
	       /^Installing collected packages/ { print "setup:   installing..."; fflush() } \
	       /^Successfully installed/ { print "setup:   installed " NF - 2 " packages"; fflush() }'; \
	echo "setup: pip took $$((SECONDS - started)) s"
	@touch $@

test: setup
	@command -v kcat >/dev/null 2>&1 || { \
	  echo "test: error: kcat is not installed and the kcat tests need it" \
	       "(sudo apt-get install -y kcat)" >&2; exit 1; }
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "test: error: chromium is not installed and the console tests need it" \
	       "(sudo apt-get install -y chromium)" >&2; exit 1; }
	@$(VENV_PYTHON) -c 'from oncelog.cluster.etcd_member import find_etcd; find_etcd()' 2>/dev/null || { \
	  echo "test: error: no etcd binary and the cluster tests need it" \
	       "(make setup or scripts/ensure-etcd.sh; or set ONCELOG_ETCD to an etcd 3.4+ binary)" >&2; exit 1; }
	ONCELOG_REQUIRE_C_RECORDS=$(HAVE_CC) $(VENV_PYTHON) -m pytest -m "not slow" --durations=30 $(PYTEST_ARGS)

# Only the .venv: neither linter needs kcat, etcd or Java. Versions and rules are in pyproject.toml.
lint: $(SETUP_STAMP)
	$(VENV)/bin/ruff check src tests bench scripts
	$(VENV)/bin/mypy src tests bench
	$(VENV)/bin/lint-imports --no-logo --no-cache

demo: setup
	$(VENV)/bin/oncelog demo

bench: setup $(BENCH_STAMP)
	$(VENV_PYTHON) bench/run.py $(BENCH_ARGS)

# The bench-only extras (the tansu peer, py-spy), reinstalled when the dependencies change.
$(BENCH_STAMP): pyproject.toml
	@echo "bench: installing the benchmark extras (tansu peer, py-spy) into $(VENV) with pip (pip's output follows)"
	@$(VENV_PYTHON) -m pip install --disable-pip-version-check --progress-bar off -e '.[test,lint,bench]'
	@touch $@

PARTITIONS ?= 1000,10000,100000
partition-scale: setup $(BENCH_STAMP)
	$(VENV_PYTHON) -m bench.partition_scale --partitions $(PARTITIONS)

soak: setup
	$(VENV)/bin/oncelog chaos --minutes 10

soak-share: setup
	$(VENV)/bin/python scripts/share-soak.py --minutes 10

soak-cluster: setup
	$(VENV)/bin/oncelog chaos --brokers 3 --minutes 10

# As root (network namespaces, a tmpfs per node); docs/reliability.md has a run's figures.
soak-faults: setup
	$(VENV)/bin/oncelog chaos --brokers 3 --minutes 15 --faults pause,partition,disk,sessions --fault-seconds 20-35 \
	  --session-timeout-ms 9000 --seed 11

# As root for every fault kind; docs/reliability.md has a run's figures.
soak-secure: setup
	$(VENV)/bin/oncelog chaos --brokers 3 --minutes 15 --secure --session-timeout-ms 9000 --seed 7

cluster-faults: setup
	$(VENV_PYTHON) -m pytest -m slow tests/integration/test_chaos.py $(PYTEST_ARGS)

groups-faults: setup
	$(VENV_PYTHON) -m pytest -m slow tests/integration/test_consumer_group_protocol.py $(PYTEST_ARGS)

iceberg-faults: setup
	$(VENV_PYTHON) -m pytest -m slow tests/spark/test_iceberg_faults.py tests/spark/test_iceberg_speculation.py \
	  tests/integration/test_demo.py -k "iceberg" $(PYTEST_ARGS)

sink-faults: setup
	$(VENV_PYTHON) -m pytest -m slow tests/spark/test_sink_speculation.py tests/spark/test_sink_faults.py \
	  tests/spark/test_pipeline_signals.py $(PYTEST_ARGS)
	$(VENV_PYTHON) -m pytest -m slow tests/integration/test_demo.py -k "stateful or enriches" $(PYTEST_ARGS)

# Never part of `test`: it downloads kafka-python's sdist (once, into .venv) for its tests.
compat: setup
	scripts/kafka-python-suite.sh $(PYTEST_ARGS)

clean:
	rm -rf build dist .pytest_cache .hypothesis .mypy_cache .ruff_cache src/*.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -print0 | xargs -0 rm -rf

distclean: clean
	rm -rf $(VENV)
