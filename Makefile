# cnnlab: `make figures` runs every notebook and writes figures/; `make test` runs the tests and notebooks;
# `make test-fast` only the unit tests not marked slow or gpu (no notebooks; about a minute on two cores).
# `make setup` installs the exact set in requirements.lock (a pip constraints file) and checks it; pyproject.toml
# only declares the ranges cnnlab works with (so `pip install` beside a runtime's own torch keeps that torch).
# TORCH=cpu (default) installs torch and torchvision 2.13.0+cpu / 0.28.0+cpu from PyTorch's CPU wheel index
# (TORCH_INDEX); where that index cannot be reached it says so and falls back, within seconds, to a torch+cpu that
# pip's own configuration offers, else to PyPI's torch (the CUDA build, which runs on a CPU too; gigabytes).
# TORCH=cuda installs PyPI's CUDA build directly.
SHELL := /bin/bash
PYTHON ?= python3
TORCH ?= cpu
TORCH_VERSION := 2.13.0
TORCHVISION_VERSION := 0.28.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
PRESET ?= auto
NB ?=
JOBS ?= 2
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-done
LOCK := requirements.lock

ifeq ($(filter $(TORCH),cpu cuda),)
$(error TORCH must be cpu or cuda, got '$(TORCH)')
endif

# Inductor's on-disk cache of compiled kernels is not keyed by ATEN_CPU_CAPABILITY: kernels built on one CPU kernel
# path and reused on another gave NaN logits or a segfault (torch 2.13, notebook 07's torch.compile). One cache per
# path, inside build/, for everything make runs.
CPU_PATH := $(or $(ATEN_CPU_CAPABILITY),default)-$(or $(ONEDNN_MAX_CPU_ISA),default)
export TORCHINDUCTOR_CACHE_DIR ?= $(CURDIR)/build/inductor-cache/$(CPU_PATH)

.PHONY: setup torch test test-fast test-unit test-oldest runtime-check margins lock-cuda-check figures estimate report gpu-check lab \
	clean clean-stores

setup: $(STAMP)

# setuptools' editable install warns, on every install, that a folder named like the package in the working
# directory could shadow it ("BuildBackendWarning: Editable installation. ... Please be careful with folders ...",
# ten lines). Here that folder is the package itself, which is what an editable install means: the one warning is
# dropped (Python's own filter, by its first words, in the build's process); any other warning still shows.
EDITABLE_QUIET := PYTHONWARNINGS="ignore:Editable installation"

# Re-run setup when the venv is missing or older than pyproject.toml or the lock.
$(STAMP): pyproject.toml $(LOCK)
	@start=$$(date +%s); \
	test -x $(PY) || $(PYTHON) -m venv $(VENV); \
	$(PY) -m pip install --quiet --upgrade pip 2>/dev/null || true; \
	$(MAKE) --no-print-directory torch TORCH_PY=$(PY) && \
	$(EDITABLE_QUIET) $(PY) -m pip install --quiet -c $(LOCK) -e ".[lab,int8,test]" && \
	$(PY) tests/lockfile.py && \
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (cnnlab)" >/dev/null && \
	$(PY) -c "import cnnlab, torch, torchvision; print('cnnlab', cnnlab.__version__, '| torch', torch.__version__, '| torchvision', torchvision.__version__, '| CUDA', torch.cuda.is_available())" && \
	{ $(PY) -c "import torchvision" 2>/dev/null || echo "setup: note: a plain 'import torchvision' fails in this venv (PyPI's CUDA-linked torchvision beside a CPU torch); importing cnnlab first makes it work"; } && \
	touch $(STAMP) && echo "setup took $$(( $$(date +%s) - start )) s"

# torch and torchvision into the Python $(TORCH_PY), before anything that requires them (see the top of this file).
# PyPI's torchvision is CUDA-linked: beside a CPU torch a plain `import torchvision` fails until cnnlab is imported
# (cnnlab registers the missing operator schemas), so the CPU index's torchvision+cpu is preferred.
TORCH_PY ?= $(PY)
TORCH_PIP = $(TORCH_PY) -m pip install --quiet -c $(LOCK)
PROBE_INDEX = $(TORCH_PY) -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/torch/', timeout=5)"
torch:
	@if [ "$(TORCH)" = cuda ]; then \
	  echo "setup: torch $(TORCH_VERSION) and torchvision $(TORCHVISION_VERSION) from PyPI, the CUDA build (Linux: 5.4 GB in the venv, 2.7 GB of it NVIDIA libraries)"; \
	  $(TORCH_PIP) torch==$(TORCH_VERSION) torchvision==$(TORCHVISION_VERSION); \
	elif $(PROBE_INDEX) "$(TORCH_INDEX)" 2>/dev/null; then \
	  echo "setup: torch $(TORCH_VERSION)+cpu and torchvision $(TORCHVISION_VERSION)+cpu from $(TORCH_INDEX) (about 0.2 GB)"; \
	  $(TORCH_PIP) --extra-index-url "$(TORCH_INDEX)" torch==$(TORCH_VERSION)+cpu torchvision==$(TORCHVISION_VERSION)+cpu; \
	elif echo "setup: PyTorch's CPU index $(TORCH_INDEX) cannot be reached (5 s); trying pip's configured sources for torch $(TORCH_VERSION)+cpu" && \
	     $(TORCH_PIP) torch==$(TORCH_VERSION)+cpu 2>/dev/null; then \
	  echo "setup: torch $(TORCH_VERSION)+cpu found; torchvision $(TORCHVISION_VERSION) from PyPI (CUDA-linked: import cnnlab before torchvision)"; \
	  $(TORCH_PIP) torchvision==$(TORCHVISION_VERSION); \
	else \
	  echo "setup: no torch $(TORCH_VERSION)+cpu there either: installing PyPI's torch $(TORCH_VERSION) and torchvision $(TORCHVISION_VERSION), the CUDA build, which runs on a CPU too (Linux: 5.4 GB in the venv, 2.7 GB of it NVIDIA libraries; two minutes on a fast link). To avoid it, name a reachable CPU index: make setup TORCH_INDEX=<url>"; \
	  $(TORCH_PIP) torch==$(TORCH_VERSION) torchvision==$(TORCHVISION_VERSION); \
	fi

# Unit tests, then every notebook through nbval with the quick preset, on $(JOBS) processes of one thread
# each (two workers of two threads on two cores make every timing meaningless).
# --dist loadfile keeps each notebook's cells in one worker (one kernel), in order. $(REPORT) lists every skip with
# its reason in the summary, besides failures and errors (-rs alone would drop those two, pytest's default -rfE).
# Tests marked `alone` (the noise rule's A/A and A/B tests, tests/power.py) time real work and judge how often it
# is decided: they run first, on one process with the machine to themselves, the rest after them (beside another
# worker, a 2-core machine's second job shifts the timings they count).
REPORT := -rfEs
TEST_ENV = CNNLAB_PRESET=quick CNNLAB_FIGURES_DIR="$(CURDIR)/build/test-figures" MPLBACKEND=Agg OMP_NUM_THREADS=1
test: $(STAMP)
	rm -rf build/test-figures
	$(TEST_ENV) $(PY) -m pytest -p no:xdist -m alone $(REPORT) tests
	$(TEST_ENV) $(PY) -m pytest -n $(JOBS) --dist loadfile -m "not alone" $(REPORT) --durations=15 \
	  --nbval-lax --nbval-current-env --nbval-cell-timeout=900 tests notebooks

# The unit tests alone (no notebooks), e.g. on another CPU kernel path as .ci/run does:
#   ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 make test-unit
test-unit: $(STAMP)
	@$(PY) -c "import os, torch; print('CPU kernel path: ATen', torch.backends.cpu.get_cpu_capability(), \
	  '| oneDNN ISA cap', os.environ.get('ONEDNN_MAX_CPU_ISA', 'none'))"
	MPLBACKEND=Agg OMP_NUM_THREADS=1 $(PY) -m pytest -p no:xdist -m alone $(REPORT) tests
	MPLBACKEND=Agg OMP_NUM_THREADS=1 $(PY) -m pytest -n $(JOBS) --dist loadfile -m "not alone" $(REPORT) tests

# The fast lane, for working on one module: the unit tests not marked slow (tests/slow.txt and @pytest.mark.slow:
# those that train, measure, run a notebook or start a Python that imports torch) or gpu, without the notebooks;
# about a minute on two cores. `make test` and CI still run everything. Its slowest tests are printed.
test-fast: $(STAMP)
	MPLBACKEND=Agg OMP_NUM_THREADS=1 $(PY) -m pytest -n $(JOBS) --dist loadfile $(REPORT) -q \
	  -m "not slow and not gpu" --durations=10 tests

# How close every CPU-dependent threshold in tests/ comes, on this CPU's default kernel path and on AVX2
# (tests/margins.py): the unit tests run on both, then a table of the smallest margin per threshold.
# (The second run drops this make's cache path, so that test-unit picks the AVX2 path's own.)
margins: $(STAMP)
	rm -f build/margins-*.jsonl; mkdir -p build
	CNNLAB_MARGINS="$(CURDIR)/build/margins-default.jsonl" $(MAKE) --no-print-directory test-unit
	env -u TORCHINDUCTOR_CACHE_DIR CNNLAB_MARGINS="$(CURDIR)/build/margins-avx2.jsonl" ATEN_CPU_CAPABILITY=avx2 \
	  ONEDNN_MAX_CPU_ISA=AVX2 $(MAKE) --no-print-directory test-unit
	$(PY) tests/margins.py build/margins-*.jsonl

# Does requirements.lock resolve together with PyPI's CUDA torch wheel (what `make setup TORCH=cuda` installs)?
# pip's resolver, dry run, for Linux x86-64 and this Python: needs the registry, downloads wheels, installs nothing.
# Local pip configuration (find-links to a CPU wheel, say) is switched off so that only the registry answers.
MANYLINUX := $(foreach n,17 18 24 25 26 27 28 31 34 35,--platform manylinux_2_$(n)_x86_64) \
	--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64
lock-cuda-check: $(STAMP)
	env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null $(PY) -m pip install --dry-run \
	  --ignore-installed --only-binary=:all: $(MANYLINUX) --implementation cp \
	  --python-version $$($(PY) -c 'import platform; print(platform.python_version())') \
	  --target build/lock-cuda-check --index-url https://pypi.org/simple --report build/lock-cuda-report.json \
	  -r $(LOCK) | tail -1
	$(PY) -c "import json; r = json.load(open('build/lock-cuda-report.json'))['install']; \
	  v = {i['metadata']['name'].lower(): i['metadata']['version'] for i in r}; \
	  print('resolved', len(v), 'packages with the CUDA build: torch', v['torch'], '| triton', v['triton'], \
	        '| nvidia-cudnn-cu13', v.get('nvidia-cudnn-cu13'))"

# Would installing cnnlab replace anything in Colab's GPU runtime? pip's resolver (dry run, PyPI only) in a Python
# 3.13 venv whose metadata stands in for Colab's packages (tests/data/colab-gpu-pip-freeze.txt): prints what it
# would add and replace, fails on any replacement. Then every declared requirement, extras included, resolved to
# wheels for Python 3.13 (Colab's). Needs the registry; downloads only what pip reads; a few seconds to a minute.
runtime-check: $(STAMP)
	$(PY) tests/runtime_resolve.py
	@$(PY) tests/oldest.py --requirements > build/requirements-all.txt
	env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null $(PY) -m pip install --dry-run --quiet \
	  --ignore-installed --only-binary=:all: $(MANYLINUX) --implementation cp --python-version 3.13 \
	  --target build/py313-check --index-url https://pypi.org/simple --report build/py313-report.json \
	  -r build/requirements-all.txt
	@$(PY) -c "import json; r = json.load(open('build/py313-report.json'))['install']; \
	  v = {i['metadata']['name'].lower(): i['metadata']['version'] for i in r}; \
	  print('Python 3.13: every declared requirement resolves to wheels,', len(v), 'packages: torch', v['torch'], \
	        '| numpy', v['numpy'], '| pandas', v['pandas'], '| triton', v['triton'], '| torchao', v['torchao'])"

# The oldest supported set, really run: a venv (build/venv-oldest) with every lower bound of pyproject.toml
# (tests/oldest.py; torch 2.8.0 is PyPI's CUDA build, which runs on a CPU: about 4 GB downloaded, ~7 GB on disk),
# the unit tests and notebook 04 there; then the kernel tests and notebook 04 again with the lock's numpy (the
# oldest Triton beside the newest numpy), and the explorer's tests with Colab's ipywidgets 7.7.1. Not in CI.
OLDEST := build/venv-oldest
test-oldest: $(STAMP)
	rm -rf $(OLDEST) && $(PYTHON) -m venv $(OLDEST) && mkdir -p build
	$(PY) tests/oldest.py > build/oldest-constraints.txt
	$(EDITABLE_QUIET) $(OLDEST)/bin/python -m pip install --quiet -c build/oldest-constraints.txt -e ".[lab,int8,test]"
	$(OLDEST)/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	@$(OLDEST)/bin/python -c "import torch, torchvision, triton, numpy, torchao, ipywidgets; print('oldest set: torch', \
	  torch.__version__, '| torchvision', torchvision.__version__, '| triton', triton.__version__, '| numpy', \
	  numpy.__version__, '| torchao', torchao.__version__, '| ipywidgets', ipywidgets.__version__)"
	MPLBACKEND=Agg OMP_NUM_THREADS=1 $(OLDEST)/bin/python -m pytest -n $(JOBS) --dist loadfile -q \
	  --nbval-lax --nbval-current-env --nbval-cell-timeout=900 tests notebooks/04_tiling.ipynb
	@# numpy 2 with Triton 3.4's interpreter; the oldest pandas and scikit-learn wheels are built for numpy 1, so
	@# they move to the lock's versions with it
	$(OLDEST)/bin/python -m pip install --quiet $$(grep -E '^(numpy|pandas|scikit-learn)==' $(LOCK))
	MPLBACKEND=Agg OMP_NUM_THREADS=1 $(OLDEST)/bin/python -m pytest -q --nbval-lax --nbval-current-env \
	  tests/test_kernels.py notebooks/04_tiling.ipynb
	$(OLDEST)/bin/python -m pip install --quiet "ipywidgets==$$($(PY) -c 'import sys; sys.path[:0] = ["tests"]; import oldest; print(oldest.COLAB_IPYWIDGETS)')"
	MPLBACKEND=Agg OMP_NUM_THREADS=1 $(OLDEST)/bin/python -m pytest -q tests/test_explore.py

# Execute notebooks with papermill into build/notebooks/; figures and CSVs go to figures/<notebook>/.
# NB=01 runs one notebook, PRESET=paper changes the preset (else $CNNLAB_PRESET, else auto: quick on a CPU, standard
# on a GPU; a bad value in either
# is refused), P="repeats=3 models=['resnet20'] batch_sizes=[1, 4]" sets notebook parameters (NAME=VALUE pairs
# separated by spaces; a value is a Python literal or text; a misspelt name fails in the config cell).
# P, NB and PRESET reach cnnlab.pipeline as exported variables (their text unexpanded): no shell ever parses them.
# TIMEOUT=2h sets how long one cell may run (seconds, or 45m, 2h; 0 for none; else $CNNLAB_CELL_TIMEOUT, else the
# preset's: `python -m cnnlab.pipeline --help` lists them): a cell past it is interrupted and the run stops, naming
# the notebook, the cell and the point its sweep was at. Ctrl-C stops the cell as Jupyter's stop button does (a stop is
# not a failure of the point: it is measured next time); a second Ctrl-C kills the kernel.
# Sweeps resume from the CSVs already in figures/<notebook>/; RETRY=1 measures the points stored as failed again;
# FRESH=1 deletes the stores first. It ends by writing the report (also after a failed notebook: what ran is shown)
# and fails when either the notebooks or the report failed.
# GNU make exports a variable set on its command line to every recipe, expanding it on the way (P='$(shell ...)'
# would run under any target, make report included): P, NB, PRESET and TIMEOUT are only exported as the unexpanded
# text ($(value ...)) below.
unexport P NB PRESET TIMEOUT
figures estimate: export CNNLAB_PARAMS = $(value P)
figures estimate: export CNNLAB_MAKE_NOTEBOOK = $(value NB)
ifneq ($(filter-out undefined default file,$(origin PRESET)),)
figures estimate: export CNNLAB_MAKE_PRESET = $(value PRESET)
endif
ifneq ($(filter-out undefined default file,$(origin TIMEOUT)),)
figures: export CNNLAB_CELL_TIMEOUT = $(value TIMEOUT)
endif
# SIGTERM to make (a scheduler, `timeout`) stops the run as Ctrl-C does, and so does SIGHUP (a closed terminal) to its
# process group: exec makes the pipeline make's child, to which make passes its SIGTERM on (a shell in between died of
# it and left the pipeline and its kernel running); so the pipeline writes the report itself (--report).
figures: $(STAMP)
	@exec $(if $(RETRY),env CNNLAB_RETRY=1) $(PY) -m cnnlab.pipeline --report $(if $(FRESH),--fresh)

# How long each notebook expects to take here, without running it: its plan and short probes, as the notebook
# prints before measuring (NB=, PRESET= and P= as for figures, exported above). E.g. make estimate PRESET=standard
estimate: $(STAMP)
	@$(PY) -m cnnlab.pipeline --estimate

# figures/index.html: every machine's claims (a matrix: claims x machines), main figures, environments, and the
# executed notebooks of build/notebooks/ rendered as HTML into figures/notebooks/. One static page, no server.
report: $(STAMP)
	$(PY) -m cnnlab.report

# On a machine with one CUDA GPU, in at most 6 minutes on one H100 (a short GPU slot, twice): the unit tests that run
# on CUDA (pytest -m gpu), then every study at the quick preset, each in its own process with its own time limit;
# one summary; results in figures/reference/<gpu-name>/, where make report and the explorer show them beside this
# machine's (cnnlab/gpucheck.py). A framework image is enough (torch, pytest, pytest-xdist; no papermill, Jupyter
# or torchao): it runs .venv's Python where there is one, else $(PYTHON), with the checkout on PYTHONPATH, and never
# runs setup. Without CUDA it says so and fails. GPU_CHECK_ARGS passes options (python -m cnnlab.gpucheck --help):
#   make gpu-check GPU_CHECK_ARGS="--studies fp16,tiling --limits tiling=90"
GPU_CHECK_ARGS ?=
gpu-check:
	PYTHONPATH="$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH}" MPLBACKEND=Agg \
	  $(if $(wildcard $(PY)),$(PY),$(PYTHON)) -m cnnlab.gpucheck $(GPU_CHECK_ARGS)

# JupyterLab on the checkout (build/notebooks/, the executed copies, and figures/ are one level above notebooks/);
# the URL it prints, with the token, opens notebooks/00_quickstart.ipynb, and the line under it says to start there
# (cnnlab/lab.py: JupyterLab's own default URL, /lab, overrides --ServerApp.default_url). As root (Docker,
# Colab-like containers) it passes --allow-root. LAB_ARGS="--port=8890 --no-browser" passes options through.
LAB_ARGS ?=
lab: $(STAMP)
	$(PY) -m cnnlab.lab $(LAB_ARGS)

clean:
	rm -rf build .pytest_cache

# Delete the sweeps' stores in figures/<notebook>/stores/ that older cnnlab code measured (no sweep reads them again);
# the current code's, those of unknown code (named) and figures/reference/ are kept. A running sweep is waited for.
clean-stores: $(STAMP)
	@$(PY) -c "from cnnlab.profiling.store import clean_old_stores; clean_old_stores()"
