# deployctl — run `make help` for the targets.
SHELL := bash -o pipefail
.DEFAULT_GOAL := help

VENV    ?= .venv
PY      := $(VENV)/bin/python
BIN     := .cache/bin
PYTEST_ARGS ?=

.PHONY: help venv build test test-unit test-e2e lint typecheck check cluster-up cluster-down demo bench docs-reference clean

##@ General
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^##@/ {printf "\n%s\n", substr($$0, 5)} /^[a-zA-Z_-]+:.*##/ {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ Setup
venv: $(VENV)/.installed ## Create .venv and install deployctl with its dev tools.

$(VENV)/.installed: pyproject.toml
	@command -v python3 >/dev/null || { echo "python3 (>= 3.10) is required"; exit 1; }
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

build: ## Build the local test cluster's binaries from upstream Go modules (cached in .cache/bin).
	@command -v go >/dev/null || { echo "go (>= 1.26) is required to build the test cluster"; exit 1; }
	bash e2e/cluster/build.sh

##@ Tests
test: venv build ## Unit tests, then e2e tests on the local control plane (starts and stops it).
	$(PY) -m pytest tests e2e $(PYTEST_ARGS)

test-unit: venv ## Unit tests only (no cluster, no network).
	$(PY) -m pytest tests $(PYTEST_ARGS)

test-e2e: venv build ## E2E tests only (set E2E_KUBECONFIG to use an existing cluster).
	$(PY) -m pytest e2e $(PYTEST_ARGS)

lint: venv ## ruff and the import-layer contracts.
	$(VENV)/bin/ruff check orchestrator tests e2e bench scripts
	$(VENV)/bin/lint-imports

typecheck: venv ## mypy --strict on the package.
	$(VENV)/bin/mypy

check: lint typecheck test ## Everything CI runs.

##@ Local cluster
cluster-up: venv build ## Start etcd, kube-apiserver, controller-manager, scheduler and kwok GPU nodes.
	$(PY) e2e/cluster/localcluster.py up
	@echo "export KUBECONFIG=$(CURDIR)/.cache/cluster/kubeconfig"

cluster-down: venv ## Stop the local cluster (no process is left behind).
	$(PY) e2e/cluster/localcluster.py down

##@ Demo and benchmarks
demo: venv build ## The whole story on the local cluster: plan, apply, SLO rollback, refusal, rollback, audit.
	$(PY) e2e/demo.py

bench: venv build ## Benchmarks in bench/ (figures printed; see docs/benchmark.md).
	for b in bench/bench_*.py; do $(PY) $$b || exit 1; done

docs-reference: venv ## Regenerate docs/profile-reference.md and the chart's values.schema.json from the models.
	$(PY) scripts/gen_profile_reference.py
	$(PY) scripts/gen_chart_schema.py

clean: ## Remove build outputs (keeps the Go module cache).
	rm -rf .cache $(VENV) build dist *.egg-info
