# iomatrix: `make run` runs the default matrix end to end; `make test` runs the whole test suite.
# Both install what they need first: missing host packages (apt, when root), a virtualenv with the
# pinned Python dependencies, and the default kernel (into ~/.cache/iomatrix, not /boot).
# IN_CONTAINER=1 runs run, test and nightly inside the runner image instead (make image).

PYTHON ?= python3
# The runner image sets VENV and STAMPS to its own, outside the mounted repository.
VENV ?= .venv
BIN := $(VENV)/bin
MATRIX ?= matrix/quick.yaml
NIGHTLY_MATRIX ?= matrix/nightly.yaml
DEFAULT_KERNEL ?= debian:bookworm
SHARD ?=
# QUICK=1: run (or expand) the smaller variant the matrix names in its `quick` field.
QUICK ?=
RESULTS ?= results
PYTEST_ARGS ?=
STAMPS ?= .stamps
IN_CONTAINER ?=

# actionlint, built from source into the project (Go module proxy), static so the image can use it.
ACTIONLINT_VERSION := v1.7.7
ACTIONLINT_DIR := .tools/actionlint-$(ACTIONLINT_VERSION)
ACTIONLINT := $(ACTIONLINT_DIR)/actionlint

.PHONY: run test setup host-packages venv kernel lint actionlint typecheck unit expand validate \
	bench clean help image container-tools container-image nightly nightly-shard

help:
	@echo "make run [MATRIX=matrix/quick.yaml] [SHARD=i/N]  run a matrix in VMs, print the results"
	@echo "make run MATRIX=matrix/seeds/<seed>.yaml QUICK=1  a seed experiment at TCG size"
	@echo "make test                                        lint, type-check and run every test"
	@echo "make nightly SHARD=i/N                           exactly what nightly CI shard i of N runs"
	@echo "make image                                       build the runner image (docker or podman)"
	@echo "make run|test|nightly IN_CONTAINER=1             the same, inside the runner image"
	@echo "make validate|expand [MATRIX=...]                check a matrix / list its cells"
	@echo "make bench                                       archive index vs reading run.json files"
	@echo "make setup                                       only install what run and test need"

ifeq ($(IN_CONTAINER),1)
# The same targets inside the runner image: the repository mounted at /iomatrix, the kernel cache
# as a volume, /dev/kvm when it opens (tools/container.sh). The image is built when missing.
CONTAINER_MAKE = bash tools/container.sh run make $@ MATRIX='$(MATRIX)' \
	NIGHTLY_MATRIX='$(NIGHTLY_MATRIX)' SHARD='$(SHARD)' RESULTS='$(RESULTS)' QUICK='$(QUICK)' \
	DEFAULT_KERNEL='$(DEFAULT_KERNEL)' PYTEST_ARGS='$(PYTEST_ARGS)'

run: container-image
	$(CONTAINER_MAKE)

nightly: nightly-shard container-image
	$(CONTAINER_MAKE)

# actionlint is built on the host (it needs Go, which the image does not have) and used inside.
test: container-image $(ACTIONLINT)
	$(CONTAINER_MAKE)
else
run: setup
	$(BIN)/iomatrix run $(MATRIX) $(if $(QUICK),--quick) $(if $(SHARD),--shard $(SHARD)) \
		--results $(RESULTS)

test: setup lint typecheck unit

# Exactly what one shard of the nightly workflow runs (.github/workflows/nightly.yml runs
# `make nightly SHARD=i/N IN_CONTAINER=1`): check the matrix, the accelerator (REQUIRE_KVM=1 fails
# under TCG; under KVM the guest clocksource must be kvm-clock), then run the shard.
nightly: nightly-shard setup
	$(BIN)/iomatrix validate $(NIGHTLY_MATRIX)
	BIN=$(BIN) DEFAULT_KERNEL=$(DEFAULT_KERNEL) bash tools/check-accel.sh
	$(BIN)/iomatrix run $(NIGHTLY_MATRIX) --shard $(SHARD) --results $(RESULTS) --no-progress
endif

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

lint: venv actionlint
	$(BIN)/ruff check harness tests
	$(BIN)/ruff format --check harness tests

# Workflows: a broken one fails `make test` here, not first on GitHub. actionlint runs shellcheck
# on their scripts when shellcheck is installed (it is on GitHub's runners and in the image).
actionlint: $(ACTIONLINT)
	$(ACTIONLINT) -no-color
# Go comes from apt (Debian 12's 1.19 builds this version) when root and missing, as host packages do.
$(ACTIONLINT):
	@command -v go >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" -ne 0 ]; then echo "iomatrix: actionlint is built with Go, which is not" \
	    "installed: sudo apt-get install --no-install-recommends golang-go" >&2; exit 1; fi; \
	  echo "iomatrix: installing golang-go (to build actionlint)"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -q --no-install-recommends golang-go; }
	CGO_ENABLED=0 GOFLAGS=-modcacherw GOPATH=$(abspath .tools/go) GOCACHE=$(abspath .tools/go-cache) \
		GOBIN=$(abspath $(ACTIONLINT_DIR)) \
		go install github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION)

typecheck: venv
	$(BIN)/mypy

unit: venv
	$(BIN)/pytest $(PYTEST_ARGS)

validate: venv
	$(BIN)/iomatrix validate $(MATRIX)

expand: venv
	$(BIN)/iomatrix expand $(MATRIX) $(if $(QUICK),--quick) $(if $(SHARD),--shard $(SHARD))

# History queries through the archive index vs loading run.json files (about a minute).
bench: venv
	$(BIN)/python benchmarks/bench_archive.py

nightly-shard:
	@test -n "$(SHARD)" || { echo "make nightly needs SHARD=I/N;" \
		"iomatrix expand $(NIGHTLY_MATRIX) --shards N lists them" >&2; exit 2; }

# The runner image (images/runner/Dockerfile): docker where a Docker engine answers, else podman,
# which this target installs when root (with runc and mmdebstrap for an offline base image).
image: container-tools
	bash tools/container.sh build

container-tools:
	@bash tools/container.sh install

container-image: container-tools
	@bash tools/container.sh ensure

clean:
	rm -rf $(VENV) $(STAMPS) .mypy_cache .ruff_cache .pytest_cache
