# cnnlab: `make figures` runs every notebook and writes figures/; `make test` runs the tests and notebooks.
# `make setup` installs the exact set in requirements.lock (a pip constraints file) and checks it; pyproject.toml
# only declares the ranges cnnlab works with (so `pip install` beside a runtime's own torch keeps that torch).
# TORCH=cpu (default) installs torch 2.13.0+cpu, never the multi-GB CUDA build; TORCH=cuda installs PyPI's
# CUDA build. TORCH_INDEX=<url> adds a package index for torch (e.g. PyTorch's CPU wheel index elsewhere).
SHELL := /bin/bash
PYTHON ?= python3
TORCH ?= cpu
TORCH_INDEX ?=
PRESET ?= quick
NB ?=
JOBS ?= 2
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-done
LOCK := requirements.lock

ifeq ($(TORCH),cpu)
TORCH_REQ := torch==2.13.0+cpu
else ifeq ($(TORCH),cuda)
TORCH_REQ := torch==2.13.0
else
$(error TORCH must be cpu or cuda, got '$(TORCH)')
endif

# Inductor's on-disk cache of compiled kernels is not keyed by ATEN_CPU_CAPABILITY: kernels built on one CPU kernel
# path and reused on another gave NaN logits or a segfault (torch 2.13, notebook 07's torch.compile). One cache per
# path, inside build/, for everything make runs.
CPU_PATH := $(or $(ATEN_CPU_CAPABILITY),default)-$(or $(ONEDNN_MAX_CPU_ISA),default)
export TORCHINDUCTOR_CACHE_DIR ?= $(CURDIR)/build/inductor-cache/$(CPU_PATH)

.PHONY: setup test test-unit margins lock-cuda-check figures report lab clean

setup: $(STAMP)

# Re-run setup when the venv is missing or older than pyproject.toml or the lock.
$(STAMP): pyproject.toml $(LOCK)
	@start=$$(date +%s); \
	test -x $(PY) || $(PYTHON) -m venv $(VENV); \
	$(PY) -m pip install --quiet --upgrade pip 2>/dev/null || true; \
	$(PY) -m pip install --quiet -c $(LOCK) $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) "$(TORCH_REQ)" && \
	$(PY) -m pip install --quiet -c $(LOCK) -e ".[notebooks,test]" && \
	$(PY) tests/lockfile.py && \
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (cnnlab)" >/dev/null && \
	$(PY) -c "import cnnlab, torch, torchvision; print('cnnlab', cnnlab.__version__, '| torch', torch.__version__, '| torchvision', torchvision.__version__, '| CUDA', torch.cuda.is_available())" && \
	touch $(STAMP) && echo "setup took $$(( $$(date +%s) - start )) s"

# Unit tests, then every notebook through nbval with the quick preset, on $(JOBS) processes of one thread
# each (two workers of two threads on two cores make every timing meaningless).
# --dist loadfile keeps each notebook's cells in one worker (one kernel), in order.
test: $(STAMP)
	rm -rf build/test-figures
	CNNLAB_PRESET=quick CNNLAB_FIGURES_DIR=$(CURDIR)/build/test-figures MPLBACKEND=Agg OMP_NUM_THREADS=1 \
	$(PY) -m pytest -n $(JOBS) --dist loadfile --durations=15 \
	  --nbval-lax --nbval-current-env --nbval-cell-timeout=900 tests notebooks

# The unit tests alone (no notebooks), e.g. on another CPU kernel path as .ci/run does:
#   ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 make test-unit
test-unit: $(STAMP)
	@$(PY) -c "import os, torch; print('CPU kernel path: ATen', torch.backends.cpu.get_cpu_capability(), \
	  '| oneDNN ISA cap', os.environ.get('ONEDNN_MAX_CPU_ISA', 'none'))"
	MPLBACKEND=Agg OMP_NUM_THREADS=1 $(PY) -m pytest -n $(JOBS) --dist loadfile tests

# How close every CPU-dependent threshold in tests/ comes, on this CPU's default kernel path and on AVX2
# (tests/margins.py): the unit tests run on both, then a table of the smallest margin per threshold.
# (The second run drops this make's cache path, so that test-unit picks the AVX2 path's own.)
margins: $(STAMP)
	rm -f build/margins-*.jsonl; mkdir -p build
	CNNLAB_MARGINS=$(CURDIR)/build/margins-default.jsonl $(MAKE) --no-print-directory test-unit
	env -u TORCHINDUCTOR_CACHE_DIR CNNLAB_MARGINS=$(CURDIR)/build/margins-avx2.jsonl ATEN_CPU_CAPABILITY=avx2 \
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

# Execute notebooks with papermill into build/notebooks/; figures and CSVs go to figures/<notebook>/.
# NB=01 runs one notebook, PRESET=paper changes the preset, P="repeats=3 models=['resnet20']" sets notebook
# parameters (space-separated NAME=VALUE, no spaces inside a value; a misspelt name fails in the config cell).
# Sweeps resume from the CSVs already in figures/<notebook>/; RETRY=1 measures the points stored as failed again;
# FRESH=1 deletes the stores first. It ends by writing the report (also after a failed notebook: what ran is shown).
figures: $(STAMP)
	$(if $(RETRY),CNNLAB_RETRY=1) $(PY) -m cnnlab.pipeline --preset $(PRESET) $(if $(NB),--notebook $(NB)) $(if $(FRESH),--fresh) \
	  $(foreach p,$(P),-p '$(p)'); status=$$?; \
	$(PY) -m cnnlab.report; exit $$status

# figures/index.html: every machine's claims (a matrix: claims x machines), main figures, environments, and the
# executed notebooks of build/notebooks/ rendered as HTML into figures/notebooks/. One static page, no server.
report: $(STAMP)
	$(PY) -m cnnlab.report

lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/

clean:
	rm -rf build .pytest_cache
