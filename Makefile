# The two commands of the README. Each creates .venv and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/pan demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python benchmarks/runtime_bench.py --write docs/benchmarks.md

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
