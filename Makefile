# Two commands for a fresh clone: `make dashboard` and `make test`.
# Each creates .venv (python3 -m venv) and installs the project when the env is missing or stale.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8866

.PHONY: help venv test test-fast lint dashboard slides lab bench weights notebooks clean

help:
	@echo "make dashboard  serve the Voila dashboard on http://127.0.0.1:$(PORT)"
	@echo "make test       ruff + pytest (unit, torch reference, browser) + nbval on every notebook"
	@echo "make slides     the walkthrough as reveal.js slides"
	@echo "make lab        JupyterLab on notebooks/"
	@echo "make bench      benchmarks -> benchmarks/RESULTS.md and results.json"

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e ".[test]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (mha)"
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP) lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not browser" tests $(PYTEST_ARGS)

dashboard: $(STAMP)
	$(BIN)/voila notebooks/dashboard.ipynb --no-browser --port=$(PORT) --Voila.ip=127.0.0.1 \
		--MappingKernelManager.cull_interval=30 --MappingKernelManager.cull_idle_timeout=300

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

# torch is a benchmark reference only: installed here, never a package dependency.
# BENCH_ARGS=--quick gives a CI-sized run; see `python -m benchmarks.run --help`.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
