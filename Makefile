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
	@echo "make slides     the walkthrough as reveal.js slides (classroom mode) on the same port"
	@echo "make lab        JupyterLab on notebooks/"
	@echo "make bench      benchmarks -> benchmarks/RESULTS.md and results.json"
	@echo "make notebooks  re-execute every notebook in place (after changing mha_core)"
	@echo "make weights    retrain the shipped tiny models -> mha_core/training/weights/ (about 1 min)"

$(STAMP): pyproject.toml $(shell find share etc -type f)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e ".[test]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (mha)"
	$(BIN)/python -m mha_core.ui.serve  # templates + settings into .venv (editable installs skip data files)
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP) lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not browser" tests $(PYTEST_ARGS)

# Voila settings live in share/voila/voila.json: offline template `mha` (share/jupyter/voila/
# templates), 127.0.0.1 only, sources stripped, kernels accept only the widget messages (no
# execute_request from the page), kernels idle for 10 min culled, even with the page still open
# (a student back after 10 min reloads the page). OPENBLAS_NUM_THREADS=1: the
# panels multiply small matrices, where a second BLAS thread costs more than it saves.
# POOL preheated kernels: the first POOL visitors get the page in ~0.01 s instead of ~3 s, at the
# price of one idle kernel (~130 MB) each, kept warm; the next visitor waits for a refill.
# POOL=0 turns preheating off.
POOL ?= 1
VOILA := JUPYTER_PATH=$(CURDIR)/share/jupyter OPENBLAS_NUM_THREADS=1 \
	$(BIN)/voila --Voila.config_file_paths=$(CURDIR)/share/voila --port=$(PORT)

dashboard: $(STAMP)
	$(VOILA) notebooks/dashboard.ipynb $(if $(filter-out 0,$(POOL)),--preheat_kernel=True --pool_size=$(POOL))

# Classroom mode: the same notebook as reveal.js slides (arrow keys), offline template `mha-reveal`.
slides: $(STAMP)
	$(VOILA) notebooks/dashboard.ipynb --template=mha-reveal \
		"--VoilaConfiguration.resources={'reveal': {'url_prefix': '/voila/templates/mha-reveal/static/reveal'}}"

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

# torch is a benchmark reference only: installed here, never a package dependency.
# BENCH_ARGS=--quick gives a CI-sized run; see `python -m benchmarks.run --help`.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

weights: $(STAMP)
	$(BIN)/python scripts/train_pretrained.py

# Re-execute every notebook in place and strip noisy metadata (keeps outputs for strict nbval).
notebooks: $(STAMP)
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace notebooks/*.ipynb
	$(BIN)/nbstripout --keep-output --keep-count notebooks/*.ipynb

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
