# gpupred: `make all` sets up .venv with what the notebooks need (no torch, no Ray, no CUDA libraries) and runs the
# notebook pipeline on the committed data and graph store; `make test` adds the torch, Ray and test extras and runs the tests
# not marked slow, `make test-slow` the slow ones (CI runs both: .ci/run).
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
# Bytecode: Python writes a module's .pyc when it first imports it, so every recipe here runs with bytecode writing on
# (unexported where a machine sets PYTHONDONTWRITEBYTECODE, as this project's machines do) and pip installs without
# compiling (--no-compile): only the modules something imports get compiled, once, by the first process that imports
# them. Compiling all of site-packages up front took 60 s of the test setup on the 2-core machine (21,725 files, most
# of them never imported: transformers' and Ray's); pip's own compiling runs on one core.
unexport PYTHONDONTWRITEBYTECODE
PIP := $(BIN)/python -m pip install --quiet --no-compile -c constraints.txt
# ...except the answer path's, written at setup by the quick start's prediction: a cold `gpupred predict` then compiles
# nothing, even run from a shell that sets PYTHONDONTWRITEBYTECODE (1.5-1.9 s against 2.1-2.4 s with only the CLI's
# imports compiled: a prediction imports 53 more of gpupred's modules and 100 more of site-packages' as it goes)
WARM := $(BIN)/gpupred predict resnet.resnet50-bs64-img224-bf16-sgd --gpu "H100 SXM" > /dev/null \
	|| echo "bytecode warm-up: the quick start's prediction failed; run it to see why"
LIGHT := $(VENV)/.gpupred-notebooks
FULL := $(VENV)/.gpupred-dev
# gpupred's own modules byte-compiled before each run: pip compiles what it installs but not an editable source,
# and where PYTHONDONTWRITEBYTECODE is set (as on this project's machines) every process would compile them again
# (0.2 s of a cold `gpupred predict`, and of every notebook kernel and worker); only changed files are compiled again
COMPILE := $(BIN)/python -m compileall -q src

.PHONY: all setup setup-dev test test-slow test-fast test-durations bench clean

all: $(LIGHT)
	$(COMPILE)
	$(BIN)/gpupred pipeline

setup: $(LIGHT)

setup-dev: $(FULL)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# the analyst's install: the predictor runtime + the notebooks extra
$(LIGHT): pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e ".[notebooks]"
	$(WARM)
	touch $(LIGHT)

# everything the tests need: torch (exports, the profiler), Ray, onnx-tool, pytest...
$(FULL): pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e ".[dev]"
	$(WARM)
	touch $(LIGHT) $(FULL)

# pytest-xdist: one worker per core, each test file on one worker (its module fixtures built once), the heaviest files
# first (tests/conftest.py orders them by tests/durations.json, in place of xdist's reordering by number of tests; the
# fast suite took 641 s heaviest first against 667 s as collected, one run each, so the gain is within this machine's
# noise); the tests marked timing measure this machine's own speed and run afterwards, alone
PARALLEL ?= -n auto --dist loadfile --no-loadscope-reorder
# each pytest-xdist worker runs torch, OpenBLAS and OpenMP on one thread: with their default pools (a thread per core
# in every worker) the workers oversubscribe the cores. Fast and slow tests in one session took 899 s that way, against
# 1,023 s (1,433 tests on the 2-core machine, one run each, 2026-11-30); no test depends on the thread count (the
# byte-identical export sets its own). `make test WORKER_THREADS=` runs the workers with the libraries' defaults.
WORKER_THREADS ?= OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# `make test SLOW=1` runs the slow tests in the same session as the others (CI: .ci/run): one pool of workers over
# both, so neither run waits alone on its last heavy file (the two sessions back to back took about 150 s longer)
SLOW ?=
SELECTED := $(if $(SLOW),not timing,not slow and not timing)

# the default suite (everything not marked slow, notebooks included): about 10 minutes on the 2-core machine (1,338
# tests), then the timing tests (about a minute); with SLOW=1, every test: about 15 minutes, then the timing tests
test: $(FULL)
	$(COMPILE)
	$(WORKER_THREADS) $(BIN)/python -m pytest -m "$(SELECTED)" $(PARALLEL)
	$(BIN)/python -m pytest -m "timing and not slow"

# the slow checks alone (export invariance, the onnx-tool cross-check, real exports and trainings; 102 tests, about 7
# minutes on the 2-core machine), each under pytest-timeout's per-test limit (pyproject.toml); CI runs them with the
# others (`make test SLOW=1`)
test-slow: $(FULL)
	$(COMPILE)
	$(WORKER_THREADS) $(BIN)/python -m pytest -m slow $(PARALLEL)

test-fast: $(FULL)
	$(COMPILE)
	$(WORKER_THREADS) $(BIN)/python -m pytest -m "not slow and not notebook and not timing" $(PARALLEL)

# records each test file's seconds (fast and slow tests together, one session) into tests/durations.json: run it
# after adding or reshaping a heavy test file
test-durations: $(FULL)
	$(COMPILE)
	GPUPRED_RECORD_DURATIONS=1 $(WORKER_THREADS) $(BIN)/python -m pytest -m "not timing" $(PARALLEL)

bench: $(FULL)
	$(COMPILE)
	$(BIN)/python benchmarks/bench_featurize.py
	$(BIN)/python benchmarks/bench_predict.py
	$(BIN)/python benchmarks/bench_predict.py --queue 10000
	$(BIN)/python benchmarks/bench_sim.py
	$(BIN)/python benchmarks/bench_profile_overhead.py
	$(BIN)/python benchmarks/bench_host_parallel.py
	$(BIN)/python benchmarks/walk_predict.py

clean:
	find data/processed -mindepth 1 ! -name README.md -exec rm -rf {} + 2>/dev/null || true
	rm -rf .cache reports/*.ipynb reports/*.html
