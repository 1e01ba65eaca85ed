# KFS developer commands.  `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RATE_PRODUCER := .build/rate-producer
export KFS_HOME ?= $(CURDIR)/.kfs
# Catalog commits before the load is timed: a busy day is 170,000 (about 35 min with S3 on moto).
BENCH_COMMITS ?= 170000

.DEFAULT_GOAL := help

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | \
	  awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt infra/spark/pyspark_bytecode.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	$(BIN)/python infra/spark/pyspark_bytecode.py
	@touch $(STAMP)

install: $(STAMP) ## Create .venv and install KFS with every pinned dependency

run: install ## Run KFS on the embedded default (a local directory store under .kfs/)
	$(BIN)/kfs run

browser: ## Install Debian's chromium for the KFS page's browser test (when missing)
	@bash .ci/install-chromium

kcat: ## Install Debian's kcat for the kcat consumer-group test (when missing)
	@bash .ci/install-kcat

kafkajs: ## Install node/npm (Debian's, when missing) and the pinned KafkaJS for its group test
	@bash .ci/install-kafkajs

$(RATE_PRODUCER): bench/rate_producer.c .ci/build-rate-producer
	@bash .ci/build-rate-producer $< $@

rate-producer: $(RATE_PRODUCER) ## Build bench.produce_cpu's rate-limited C producer (Debian's gcc and librdkafka-dev, when missing)

kafka-tools: ## Install Apache Kafka's tools and Java client (the pinned 4.x release) from Maven Central
	@bash .ci/install-kafka-tools

test: install browser kcat kafkajs rate-producer kafka-tools ## Run the whole test suite
	$(BIN)/pytest --durations=30

# bench.produce_cpu goes first: on ext4 without a journal (this machine's root
# filesystem) creating a file scans past every inode deleted in the last one to
# six minutes, and the benchmarks after it delete thousands of files when they
# clean up (bench/formats.py's catalog commits, bench.produce_fetch's segments).
# Run after them, each of the daemon's new files cost several times as much;
# bench.produce_cpu also waits (370 s, after a sync) for what `make test`
# or an earlier run deleted to stop slowing creates, and says how long.
bench: install kcat rate-producer kafka-tools ## Run the benchmarks and print their tables
	$(BIN)/python -m bench.produce_cpu
	$(BIN)/python bench/formats.py --commits $(BENCH_COMMITS)
	$(BIN)/python -m bench.wal
	$(BIN)/python -m bench.produce_fetch
	$(BIN)/python -m bench.kfs_page
	$(BIN)/python -m bench.maintenance
	$(BIN)/python -m bench.groups
	$(BIN)/python -m bench.transactions
	$(BIN)/python -m bench.security
	$(BIN)/python -m bench.store_mode
	$(BIN)/python -m bench.topic_source
	$(BIN)/python -m bench.table_freshness
	$(BIN)/python -m bench.peer

compat: install kafka-tools ## Kafka's tools, Java client and Connect, franz-go's and librdkafka's suites against KFS; one table
	$(BIN)/python -m compat

soak: install ## Long fault campaigns (not in make test): kill -9 cycles, store faults, WAL recovery, decoder fuzzing; one table
	$(BIN)/python -m soak

lint: install ## ruff (lint + format check) and mypy (strict on kfs_core, spark_jobs, kfs_airflow, bench, soak, dags, testkit, compat)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy kfs_core spark_jobs plugins/kfs_airflow bench soak dags testkit compat

format: install ## Apply ruff's formatter and autofixes
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

datadocs-assets: install ## Re-vendor the Data Docs' CSS/JS/fonts from npm (needs npm) and check their sha256
	$(BIN)/python -m kfs_airflow.ui.datadocs_assets

lock: ## Re-resolve constraints.txt from pyproject.toml in a scratch venv
	rm -rf /tmp/kfs-lock && $(PYTHON) -m venv /tmp/kfs-lock
	/tmp/kfs-lock/bin/pip install -q --upgrade pip && /tmp/kfs-lock/bin/pip install -q -e '.[dev]'
	/tmp/kfs-lock/bin/pip freeze --exclude-editable | grep -v '^-e' > constraints.txt

clean: ## Remove the venv, caches and the local store
	rm -rf $(VENV) .build .pytest_cache .mypy_cache .ruff_cache .hypothesis .kfs

.PHONY: help install browser kcat kafkajs rate-producer run test bench soak lint format datadocs-assets lock clean
