# epochfs developer entry points. `make demo` and `make test` work on a fresh machine:
# they create .venv, install the project (torch pinned to the CPU build for dev) and, as root,
# the Debian packages the tests need.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
APT_PACKAGES := fuse3 libfuse3-3 prometheus rclone strace
DEMO_APT_PACKAGES := fuse3 libfuse3-3
# make demo without the dev environment: its own venv with the demo extra only (what a file:// sidecar and the torch client import).
DEMO_VENV ?= .venv-demo
BENCH_APT_PACKAGES := s3fs
# az:// is tested against Azurite, Microsoft's Azure Storage emulator (tests/remote/test_conformance.py),
# installed by npm (Debian's npm where there is none: a nodejs that ships its own is kept).
AZURITE ?= azurite@3.35.0
# The container test (make test-container): its own dockerd, and a base image made by debootstrap.
CONTAINER_APT_PACKAGES := docker.io debootstrap
PYTEST_ARGS ?=
# make test runs the suite in this many pytest-xdist workers: most of its time is spent waiting on
# real processes, mounts and servers, not on the CPU (TEST_JOBS=0: all in the one pytest process).
# Four on the 2-core machine: 4,224 tests in 644 s where three workers took 762 s (the same commit,
# 2026-12-06; the CPU was 167% busy of 200%, against 140% with three).
TEST_JOBS ?= 4

.PHONY: all venv system-deps test test-long test-slow test-reliability test-container lint typecheck demo bench dist check-dist image clean

all: test

system-deps:
	@bash scripts/system-deps.sh $(APT_PACKAGES)
	@command -v npm >/dev/null || bash scripts/system-deps.sh npm
	@command -v azurite-blob >/dev/null || if [ "$$(id -u)" -eq 0 ]; then \
		echo "epochfs: installing $(AZURITE)"; npm install -g --no-fund --no-audit --loglevel=error $(AZURITE); \
	else echo "epochfs: azurite is not installed (npm install -g $(AZURITE)): the az:// tests skip" >&2; fi

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U pip setuptools wheel
	# torch first, pinned: this takes the CPU build; a loose pin would pull a multi-GB CUDA build.
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	@touch $@

venv: $(VENV)/.installed

# The suites write bytecode even where the environment asks for none (PYTHONDONTWRITEBYTECODE, set
# on some CI images): without it each pytest worker rewrites every test module's asserts again
# (~10 s of CPU a worker) and every epochfs process the tests start compiles the project again
# (0.32 s against 0.15 s for the CLI and the sampler's modules), thousands of times a run.
SUITE_ENV := PYTHONDONTWRITEBYTECODE=

test: system-deps venv
	$(SUITE_ENV) $(PY) -m pytest -n $(TEST_JOBS) --dist worksteal $(PYTEST_ARGS)

# The long integration tests (marker "long": 6 s or more each under the suite's load, ~90 of
# them), which make test leaves out so that it ends within 10 minutes on 2 cores; CI runs both.
test-long: system-deps venv
	$(SUITE_ENV) $(PY) -m pytest -n $(TEST_JOBS) --dist worksteal -m long $(PYTEST_ARGS)

test-slow: system-deps venv
	$(SUITE_ENV) $(PY) -m pytest -m slow $(PYTEST_ARGS)

# The reliability suite (docs/reliability.md, "The reliability suite"): the store's model-based test
# at length and the soak of the real sidecar (EPOCHFS_SOAK_SECONDS, default 600; root and FUSE),
# each printing its summary. About 15 minutes.
test-reliability: system-deps venv
	$(SUITE_ENV) $(PY) -m pytest -m slow -rP tests/store/test_store_model.py tests/sidecar/test_soak.py $(PYTEST_ARGS)

# The image built and the chart's pod run by a real Docker engine (docs/container-test.md): root,
# a few minutes the first time (base image and image build), well under one after that.
test-container: system-deps venv
	@bash scripts/system-deps.sh $(CONTAINER_APT_PACKAGES)
	EPOCHFS_CONTAINER_TEST=1 $(PY) -m pytest tests/deploy/test_container_pod.py $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports  # the layers: .importlinter, docs/architecture.md
	$(MAKE) typecheck

typecheck: venv
	$(PY) -m mypy -p epochfs  # the installed package, through its plain path entry

# The demo needs FUSE and the demo extra only: the dev venv when there is one (make test made it),
# else a venv of its own with torch (CPU, pinned) and '.[demo]', a fraction of the dev one.
demo:
	@bash scripts/system-deps.sh $(DEMO_APT_PACKAGES)
	@if [ -e $(VENV)/.installed ]; then $(PY) examples/demo.py; \
	else $(MAKE) --no-print-directory $(DEMO_VENV)/.installed && $(DEMO_VENV)/bin/python examples/demo.py; fi

$(DEMO_VENV)/.installed: pyproject.toml
	@test -x $(DEMO_VENV)/bin/python || python3 -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install -q --disable-pip-version-check -U pip setuptools wheel
	$(DEMO_VENV)/bin/python -m pip install -q --disable-pip-version-check torch==2.13.0
	$(DEMO_VENV)/bin/python -m pip install -q --disable-pip-version-check -e '.[demo]'
	@touch $@

# The benchmarks (docs/performance.md), as root (mount drops the page cache): fetch, mount and loader
# by default; BENCH names others (BENCH=served_opens), BENCH_ARGS is passed to each of them.
bench: system-deps venv
	@bash scripts/system-deps.sh $(BENCH_APT_PACKAGES)
	$(VENV)/bin/epochfs bench $(BENCH) $(if $(BENCH_ARGS),--args $(BENCH_ARGS))

# What a user installs without a clone: the wheel and the sdist (PEP 517 hooks of setuptools, no
# network), and the Helm chart packaged by the real helm (scripts/get-helm.py): all in dist/.
# `pip install 'dist/epochfs-<version>-py3-none-any.whl[sidecar,torch]'` installs it.
dist: venv
	rm -rf dist build
	$(PY) -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w dist .
	$(PY) -c "from setuptools import build_meta; print(build_meta.build_sdist('dist'))"
	"$$($(PY) scripts/get-helm.py | tail -n 1)" package helm/epochfs -d dist
	@ls -1 dist

# The wheel as a user installs it (scripts/check-wheel.sh): `make dist`, then a fresh venv with torch
# pinned to the CPU build and the wheel's sidecar and torch extras, `epochfs --version`, a short
# `epochfs sample` of a file:// dataset, cut, verify, and the torch client reading epoch 0. CI runs it.
check-dist: dist
	bash scripts/check-wheel.sh

# The plain YAML of deploy/ (webhook install, example Job, Kustomize component), rendered from the
# chart by the real helm; run it after changing the chart (tests/deploy/test_plain_manifests.py
# fails until deploy/ matches). docs/kubernetes.md, "Without Helm".
.PHONY: manifests
manifests: venv
	$(PY) scripts/render-manifests.py

# The sidecar image under the name the chart pulls by default (helm/epochfs/values.yaml's
# image.repository, tagged with the chart's appVersion), so `helm install` finds it once it is
# pushed: `make image && docker push ghcr.io/epochfs/epochfs:0.1.0`. Another registry:
# `make image IMAGE=registry.example.com/ml/epochfs`, then `--set image.repository=...`.
# BASE_IMAGE: another base, e.g. where Docker Hub is unreachable (the Dockerfile's ARG BASE).
IMAGE ?= $(shell awk '/^image:/{f=1} f && /repository:/{print $$2; exit}' helm/epochfs/values.yaml)
APP_VERSION := $(shell sed -n 's/^appVersion: "\(.*\)"/\1/p' helm/epochfs/Chart.yaml)
image:
	docker build $(if $(BASE_IMAGE),--build-arg BASE=$(BASE_IMAGE)) -t $(IMAGE):$(APP_VERSION) .

clean:
	rm -rf build dist $(DEMO_VENV) .pytest_cache .mypy_cache .ruff_cache
