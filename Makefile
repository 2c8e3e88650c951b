# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: help demo test lint docs bench clean accel bytecode

help:  # (the default goal: a bare `make` says what there is)
	@echo "make demo    the multi-stream pipeline demo, on the cpu backend and on the simulated NPU"
	@echo "make test    lint and the test suite (installs the dev, cli and mpi extras)"
	@echo "make bench   the benchmarks; rewrites bench/RESULTS.md"
	@echo "make docs    the API reference under docs/_build/"
	@echo "make accel   the optional compiled build of the hot modules (mypyc)"
	@echo "make clean   removes .venv and every build"
	@echo "(PYTHON=python3.12 names the interpreter that makes .venv)"

# (a venv made by another Python is made again: `python -m venv` keeps an existing one's
# interpreter, so a first run with too old a Python could not be mended by a second; a
# PYTHON named on the command line that is not the venv's makes it out of date)
ifeq ($(origin PYTHON),command line)
ifneq ($(wildcard $(PY)),)
ifneq ($(shell $(PY) -c 'import sys; print(sys.version)' 2>/dev/null),$(shell $(PYTHON) -c 'import sys; print(sys.version)' 2>/dev/null))
.PHONY: $(VENV)/.installed
endif
endif
endif
$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "ascentrt needs Python >= 3.11 and $(PYTHON) is " + sys.version.split()[0] + ": run make with PYTHON=python3.11 (or newer)")'
	@if [ -e $(PY) ] && [ "$$($(PY) -c 'import sys; print(sys.version)' 2>/dev/null)" != "$$($(PYTHON) -c 'import sys; print(sys.version)')" ]; then \
		echo "$(VENV) was made by another Python: making it again with $(PYTHON)"; rm -rf $(VENV); fi
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[dev,cli,mpi]'
	touch $@

demo: bytecode
	$(PY) -m ascentrt.cli demo  # (its own folder: each run replaces the last one's)

# Optional: the modules listed in src/ascentrt/accel.py compiled with mypyc from their own
# source (the Python source runs wherever no build exists; ASCENTRT_PURE_PYTHON=1 ignores it).
ACCEL_SOURCES := src/ascentrt/accel.py src/ascentrt/memory/pool.py src/ascentrt/memory/allocator.py \
                 src/ascentrt/memory/block.py src/ascentrt/memory/stream_order.py \
                 src/ascentrt/memory/buffer.py src/ascentrt/memory/registry.py \
                 src/ascentrt/backends/sim.py src/ascentrt/interrupts.py src/ascentrt/memory/chunks.py \
                 src/ascentrt/acl/_hot.py
accel: src/build/.accel
# (also rebuilt when a module they take types or Final constants from changes: the build
# compiles those in)
src/build/.accel: $(VENV)/.installed-dev $(ACCEL_SOURCES) $(wildcard src/ascentrt/memory/*.py) \
                  src/ascentrt/backends/base.py
	cd src && ASCENTRT_PURE_PYTHON=1 ../$(PY) -c 'import sys, ascentrt.accel as a; sys.exit(a.build())'
	touch $@

# The package's bytecode, written even where PYTHONDONTWRITEBYTECODE is set: the tests start
# a few hundred interpreters, and each would otherwise compile every module again (~0.3 s).
bytecode: $(VENV)/.installed
	$(PY) -m compileall -q src/ascentrt

# The semantics tests again on the simulated NPU (tests marked cpu_only skip there).
SIM_TESTS := $(addprefix tests/test_,$(addsuffix .py,streams events notify failures host_funcs \
	graph_capture graph_replay memory mempool callback edge_cases reuse_safety taskgraph context \
	acl_conformance acl_dropin threads model external_memory bad_input core_fuzz red_team sim \
	memory_fast_paths sanitizer sanitizer_views sanitizer_reports hccl interop sim_speed user_code_exits))

# The simulator's own semantics again on its compiled build, where one was made (the session
# above runs its source): a compiled module can part from its source where mypyc's semantics
# differ from Python's (per-thread state, for one).
SIM_COMPILED_TESTS := $(addprefix tests/test_,$(addsuffix .py,sim host_funcs notify failures events \
	graph_replay threads))

# ruff and mypy with the settings in pyproject.toml, on the package.
lint: $(VENV)/.installed-dev
	$(PY) -m ruff check src/ascentrt
	$(PY) -m mypy

# The API reference (pdoc) under docs/_build; fails on public names without a docstring.
docs: $(VENV)/.installed-dev
	ASCENTRT_PURE_PYTHON=1 $(PY) docs/build.py  # (from the source: compiled builds drop docstrings)

# The compiled build is made (when a compiler is there: it keeps one core busy) meanwhile lint
# runs on the other core, then the sim session runs the Python source, sharing a core with
# what is left of the build; then the cpu session runs the compiled build, and the simulator's
# own tests again on it: both paths are tested.
# Each runs on three processes (pytest-xdist), but for the tests marked serial (wall-clock
# figures, see tests/conftest.py), which run alone after them, with nothing beside them. Three
# on two cores, since many tests wait (on subprocesses, timeouts, other threads) and leave
# their core idle meanwhile: the cpu session took 123 s on three against 139-145 s on two
# and 135 s on four (each process pays its own collection), the sim session 34 s against 44 s.
PARALLEL := -n 3 -m "not serial"
test: $(VENV)/.installed-dev bytecode
	@rm -f src/build/accel.log; mkdir -p src/build; \
	($(MAKE) accel > src/build/accel.log 2>&1 || echo "no compiled build: every session runs the Python source" >> src/build/accel.log) & \
	build=$$!; \
	$(MAKE) lint && ASCENTRT_PURE_PYTHON=1 $(PY) -m pytest -q -p no:cacheprovider --backend sim $(PARALLEL) $(SIM_TESTS); \
	status=$$?; wait $$build; tail -n 3 src/build/accel.log; exit $$status
	$(PY) -m pytest -q $(PARALLEL)
	$(PY) -m pytest -q -p no:cacheprovider -m serial
	$(PY) -m pytest -q -p no:cacheprovider --backend sim $(PARALLEL) $(SIM_COMPILED_TESTS)

# The figures of the compiled build where one can be made (RESULTS.md says which ran).
bench: bytecode
	$(MAKE) accel || echo "no compiled build: the benchmarks run the Python source"
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) build dist src/build src/*.egg-info
	find src -name '*.so' -delete -o -name '*.docstrings.json' -delete
	find src -name __pycache__ -prune -exec rm -rf {} +
