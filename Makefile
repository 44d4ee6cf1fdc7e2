# tunemix: the two commands a new user needs are `make serve` and `make test`.
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
MODEL  ?= default
PORT   ?= 8000

.PHONY: serve test lint typecheck pytest bench train-default warm clean help docker-test fuzz test-boundscheck

help:
	@echo "make serve   - install, train the default model if models/ has none, serve it on :$(PORT)"
	@echo "make test    - install with dev extras, run ruff, mypy and pytest"
	@echo "make bench   - run the benchmarks in bench/ (JSON in bench/results/)"
	@echo "make warm    - compile the numba kernels once (make test does it first; make serve's demo too)"

# The installer: uv (PyPI's `uv`, Astral) downloads and installs the wheels in parallel: a fresh
# install of the train and serve extras takes 61 s against pip's 307 s (same machine, same hour,
# no cache). pip stays the fallback when uv cannot be had.
INSTALL = sh -c 'if [ -x "$(VENV)/bin/uv" ]; then exec "$(VENV)/bin/uv" pip install --python "$(PY)" --quiet "$$@"; \
          else exec "$(PY)" -m pip install --quiet "$$@"; fi' install

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PIP) install --quiet uv || echo "uv not available: installing with pip"

$(VENV)/.stamp-train: pyproject.toml | $(VENV)/bin/python
	$(INSTALL) -e ".[train,serve]"
	@touch $@

$(VENV)/.stamp-dev: pyproject.toml | $(VENV)/bin/python
	$(INSTALL) -e ".[dev,bench]"
	@touch $@ $(VENV)/.stamp-train

# numba compiles every kernel of training and scoring once, saying so and how long it took (a cache
# that already holds them: nothing to do); the compiled code stays in .venv/numba-cache, the cache
# every entry point of the environment shares (NUMBA_CACHE_DIR overrides it)
warm: $(VENV)/.stamp-train
	$(VENV)/bin/tunemix warm --if-cold

# tunemix demo compiles the kernels first when the cache is cold, as tunemix warm does, and fits
# the demo in the same step once the kernels it needs are compiled (tunemix/compile/warm.py);
# it waits only for the service's and the default model's kernels: the other learners' (what
# tunemix train needs) go on compiling in the background, niced, after it exits (their log in the
# cache, tunemix-warm-background.log), and tunemix train or make warm waits for them
train-default: $(VENV)/.stamp-train
	$(VENV)/bin/tunemix demo --models-dir models --name $(MODEL)

serve: train-default
	TUNEMIX_MODELS_DIR=models TUNEMIX_DEFAULT_MODEL=$(MODEL) TUNEMIX_PORT=$(PORT) $(PY) -m tunemix.service

lint: $(VENV)/.stamp-dev
	$(VENV)/bin/ruff check tunemix tests bench
	$(VENV)/bin/lint-imports

typecheck: $(VENV)/.stamp-dev
	$(VENV)/bin/mypy tunemix

# One BLAS thread per process: the suite's many small solves are several times slower when
# OpenBLAS threads fight over 2 cores.
pytest: $(VENV)/.stamp-dev warm
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 $(VENV)/bin/pytest -q

test: lint typecheck pytest test-boundscheck

# The scoring, evaluation and service tests once more with numba's bounds checks on (an index out of
# range raises instead of reading past an array), in a cache of their own.
test-boundscheck: $(VENV)/.stamp-dev
	NUMBA_BOUNDSCHECK=1 NUMBA_CACHE_DIR=$(CURDIR)/.venv/numba-cache-boundscheck TUNEMIX_FUZZ_SECONDS=0 \
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 \
	$(VENV)/bin/pytest -q tests/scoring tests/evaluation tests/service -k "not schema_fuzz and not survives_the_fuzzer"

# The coverage-guided fuzzer over /rank's decode-check-score path for ten minutes (the suite runs it for 60 s).
fuzz: $(VENV)/.stamp-dev
	TUNEMIX_FUZZ_SECONDS=$${TUNEMIX_FUZZ_SECONDS:-600} $(VENV)/bin/pytest -q -s tests/service/test_fuzz.py

bench: $(VENV)/.stamp-dev
	$(PY) -m bench.run_all

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# Build the image and test it for real (docker if an engine answers, else podman): run, /ready,
# /rank, HEALTHCHECK, no training packages in the final image, the compose stack (nginx in front) with the trainer.
docker-test:
	bash scripts/docker_test.sh
