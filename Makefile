# gpupred: `make all` sets up .venv and runs the notebook pipeline on the committed data; `make test` runs the tests.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.gpupred-installed

.PHONY: all setup test test-fast bench clean

all: $(STAMP)
	$(BIN)/gpupred pipeline

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not notebook"

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_featurize.py
	$(BIN)/python benchmarks/bench_predict.py
	$(BIN)/python benchmarks/bench_sim.py
	$(BIN)/python benchmarks/bench_profile_overhead.py

clean:
	rm -rf data/processed .cache reports/*.ipynb reports/*.html
