# Two commands on a fresh machine: `make demo` and `make test` (each installs first).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.jaxplace-installed
DEMO_DIR := jaxplace-runs/demo-$(shell date +%Y%m%d-%H%M%S)
# One file per work unit (module fixtures built once, not on both workers), slow files first
# (tests/conftest.py): issue 23.
PYTEST_ARGS ?= -n 2 --dist loadfile --no-loadscope-reorder

.PHONY: install demo test test-python-path lint bench gpu-check accel-check clean

# The command lives in .venv: say how to reach it from any shell (issue 26).
HOW_TO_USE = @echo "jaxplace is installed in $(CURDIR)/$(VENV); to use it from any shell:"; \
	echo "  source $(CURDIR)/$(BIN)/activate     (then: jaxplace --help)"; \
	echo "  or call it by its path: $(CURDIR)/$(BIN)/jaxplace"

# The install is editable and PYTHONDONTWRITEBYTECODE may be set (it is on the CI machine), so
# every child process would compile jaxplace_cli from source again: 0.15 s of CPU per
# `jaxplace run` (0.74 -> 0.65 s for a 3-op script), ~600 child processes in `make test`.
# compileall writes the .pyc files whatever that variable says; they are git-ignored.
COMPILE = @$(BIN)/python -m compileall -q jaxplace_cli tests

install: $(STAMP)
	$(HOW_TO_USE)

# Re-installs only when the project metadata or a C extension's source or header changed (the
# install is editable; tests/test_native.py says when a rebuild failed). setuptools >= 77 in the
# venv too: `pip wheel --no-build-isolation .` (tests/test_first_minutes_install.py) builds with it.
C_SOURCES := $(wildcard jaxplace_cli/*/*.c jaxplace_cli/*/*.h)
# uv resolves the same versions as pip (`pip freeze` of both venvs compared: identical) and
# installs them in ~11 s where pip took ~29 s (parallel downloads, byte-compiled on every core;
# `make test` on a fresh clone is held to 6 minutes). Where uv cannot be had, or fails (it reads
# none of pip's settings: a machine that reaches its packages only through them), pip does it all.
# --reinstall-package: uv would reuse its cached build of jaxplace after a C source changed.
DEPS := pip 'setuptools>=77' wheel -e '.[dev]'
$(STAMP): pyproject.toml $(C_SOURCES)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet uv || echo "uv could not be installed: pip installs everything"
	@if [ -x $(BIN)/uv ] && (set -x; $(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode \
	    --reinstall-package jaxplace $(DEPS)); then :; else \
	  echo "installing with pip (uv reads none of pip's settings: indexes, find-links, constraints)"; \
	  set -x; $(BIN)/python -m pip install --quiet --upgrade $(DEPS); \
	fi
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/jaxplace run --devices 2 --out $(DEMO_DIR) sample_scripts/pingpong_eager.py
	$(BIN)/jaxplace audit $(DEMO_DIR)
	@echo
	$(HOW_TO_USE)

# The pure-Python hot path is checked inside `make test`: tests/test_native_twin.py drives both
# paths on the same generated calls in-process, tests/test_native.py records four samples twice.
# `make test-python-path` runs the whole suite on it.
test: install
	$(BIN)/ruff check jaxplace_cli tests bench sample_scripts
	$(COMPILE)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

test-python-path: install
	$(COMPILE)
	JAXPLACE_CAPTURE=python $(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check jaxplace_cli tests bench sample_scripts

bench: install
	$(BIN)/python bench/run_bench.py

# On a GPU machine: jaxplace's transfer counts/bytes vs the native trace's memcpy events, per
# sample script. Elsewhere: prints "gpu-check: skipped: no GPU (...)" and exits 0.
gpu-check: install
	$(BIN)/python bench/gpu_check.py

# On a TPU or GPU machine: jaxplace's recorded legs vs JAX's transfer guard over every semantics
# program, sample and corpus program, and the output vs python's. Elsewhere: "skipped", exit 0.
accel-check: install
	$(BIN)/python bench/accel_check.py

clean:
	rm -rf $(VENV) jaxplace-runs .pytest_cache
