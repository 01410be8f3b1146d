# Two commands do all setup on a fresh machine: `make bench` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.opbench-installed

.PHONY: setup bench bench-quick test clean

setup: $(STAMP)

# Reinstall whenever the pins or the project metadata change.
$(STAMP): constraints.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[test]'
	touch $@

bench: setup
	$(BIN)/opbench run

bench-quick: setup
	$(BIN)/opbench run --quick

test: setup
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) results html .asv
