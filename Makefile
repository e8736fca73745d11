# cnnlab: `make figures` runs every notebook and writes figures/; `make test` runs the tests and notebooks.
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

ifeq ($(TORCH),cpu)
TORCH_REQ := torch==2.13.0+cpu
else ifeq ($(TORCH),cuda)
TORCH_REQ := torch==2.13.0
else
$(error TORCH must be cpu or cuda, got '$(TORCH)')
endif

.PHONY: setup test figures lab clean

setup: $(STAMP)

# Re-run setup when the venv is missing or older than pyproject.toml.
$(STAMP): pyproject.toml
	@start=$$(date +%s); \
	test -x $(PY) || $(PYTHON) -m venv $(VENV); \
	$(PY) -m pip install --quiet --upgrade pip 2>/dev/null || true; \
	$(PY) -m pip install --quiet $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) "$(TORCH_REQ)" && \
	$(PY) -m pip install --quiet -e ".[notebooks,test]" && \
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

# Execute notebooks with papermill into build/notebooks/; figures and CSVs go to figures/<notebook>/.
# NB=01 runs one notebook, PRESET=paper changes the preset. Sweeps resume from the CSVs already in
# figures/<notebook>/; FRESH=1 deletes them first (do that after changing the code being measured).
figures: $(STAMP)
	MPLBACKEND=Agg $(PY) -m cnnlab.pipeline --preset $(PRESET) $(if $(NB),--notebook $(NB)) $(if $(FRESH),--fresh)

lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/

clean:
	rm -rf build .pytest_cache
