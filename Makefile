# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[dev,cli]'
	touch $@

demo: $(VENV)/.installed
	$(PY) -m ascentrt.cli demo

test: $(VENV)/.installed-dev
	$(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info
