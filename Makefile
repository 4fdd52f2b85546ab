# Two commands on a fresh machine with Python 3.10+:  `make demo`  and  `make test`.
# Each creates .venv if missing, installs the package from constraints.txt and compiles the native
# CPU kernels once (a progress line each; `circuitop build` does the same for pip users).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.circuitop-installed
export TORCHINDUCTOR_CACHE_DIR := $(CURDIR)/.torchinductor
export TORCH_EXTENSIONS_DIR := $(CURDIR)/.torch_extensions
export MPLBACKEND := Agg

.PHONY: install demo test bench clean

install: $(STAMP)

# torch first, pinned: a torch you installed into .venv yourself (e.g. a CUDA build) is kept,
# and the constraints then pin everything else (see README, "GPU users").
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q -c constraints.txt torch numpy
	$(PY) -c "import torch; print(f'torch {torch.__version__}')"
	$(PY) -c "import torch; v = torch.__version__.split('+')[0]; \
	  [print(l, end='') for l in open('constraints.txt') if not (l.startswith('torch==') and v != l.split('==')[1].strip())]" \
	  > $(VENV)/constraints.txt
	$(PY) -m pip install -q -c $(VENV)/constraints.txt -e ".[test]"
	$(PY) -m pip install -q --no-deps the-well==1.2.0
	$(VENV)/bin/circuitop build
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

# One torch thread per pytest worker, one worker per core: small tensors run faster this way than
# with two processes each spinning two threads.
TEST_WORKERS ?= 2
# The suite, then the cell, block and shallow-water tests again on the pure-torch paths (native kernels off).
test: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --durations=25
	CIRCUITOP_NATIVE=0 OMP_NUM_THREADS=1 $(PY) -m pytest -q -n $(TEST_WORKERS) tests/test_knc.py tests/test_ckb.py \
	  tests/test_shallow_water.py

bench: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) .pytest_cache .torchinductor .torch_extensions *.egg-info
