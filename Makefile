# iomatrix: `make run` runs the default matrix end to end; `make test` runs the whole test suite.
# Both install what they need first: missing host packages (apt, when root), a virtualenv with the
# pinned Python dependencies, and the default kernel (into ~/.cache/iomatrix, not /boot).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MATRIX ?= matrix/quick.yaml
DEFAULT_KERNEL ?= debian:bookworm
SHARD ?=
PYTEST_ARGS ?=
STAMPS := .stamps

.PHONY: run test setup host-packages venv kernel lint typecheck unit expand validate bench clean help

help:
	@echo "make run [MATRIX=matrix/quick.yaml] [SHARD=i/N]  run a matrix in VMs, print the results"
	@echo "make test                                        lint, type-check and run every test"
	@echo "make validate|expand [MATRIX=...]                check a matrix / list its cells"
	@echo "make bench                                       archive index vs reading run.json files"
	@echo "make setup                                       only install what run and test need"

run: setup
	$(BIN)/iomatrix run $(MATRIX) $(if $(SHARD),--shard $(SHARD))

test: setup lint typecheck unit

setup: host-packages venv kernel

host-packages:
	@PYTHON=$(PYTHON) bash tools/setup-host.sh

# Rebuilt when the pins or the package metadata change.
venv: $(STAMPS)/venv
$(STAMPS)/venv: requirements.lock pyproject.toml
	@mkdir -p $(STAMPS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-virtualenv -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $@

# The kernel cache verifies itself; this is quick when the kernel is already there.
kernel: venv
	$(BIN)/iomatrix kernels fetch $(DEFAULT_KERNEL)

lint: venv
	$(BIN)/ruff check harness tests
	$(BIN)/ruff format --check harness tests

typecheck: venv
	$(BIN)/mypy

unit: venv
	$(BIN)/pytest $(PYTEST_ARGS)

validate: venv
	$(BIN)/iomatrix validate $(MATRIX)

expand: venv
	$(BIN)/iomatrix expand $(MATRIX) $(if $(SHARD),--shard $(SHARD))

# History queries through the archive index vs loading run.json files (about a minute).
bench: venv
	$(BIN)/python benchmarks/bench_archive.py

clean:
	rm -rf $(VENV) $(STAMPS) .mypy_cache .ruff_cache .pytest_cache
