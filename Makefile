# Two commands do all setup on a fresh machine: `make bench` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.opbench-installed

.PHONY: setup bench bench-quick bench-self selftest test test-fast lint clean browser

setup: $(STAMP)

# Reinstall whenever the pins or the project metadata change.
$(STAMP): constraints.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[test,blas,frameworks,models,dask,lint]'
	$(BIN)/python -m accuracy.run.offline_pages
	touch $@

# The HTML report's browser test uses Debian's Chromium; it skips cleanly where this fails.
browser:
	command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "chromium not installed: the browser test will be skipped"


bench: setup
	$(BIN)/opbench run

bench-quick: setup
	$(BIN)/opbench run --quick

# the verdicts' false alarms and catch rate at small sizes (minutes); the report shows its summary
selftest: setup
	mkdir -p results
	$(BIN)/opbench selftest --small --json > results/.selftest.json; status=$$?; \
	  mv results/.selftest.json results/selftest.json; exit $$status

# opbench's own speed (loading a large results directory), kept out of the op suite
bench-self: setup
	$(BIN)/asv machine --yes --config asv.self.conf.json >/dev/null
	$(BIN)/asv run --config asv.self.conf.json --python=same --set-commit-hash $$(git rev-parse HEAD) --quick

# every core: asv-driven tests spend most of their time in subprocesses, the rest in mpmath
test: setup browser
	$(BIN)/python -m pytest -q -n auto --dist loadgroup

# the unit tests without the end-to-end ones (asv runs, subprocesses): the loop while editing
test-fast: setup
	$(BIN)/python -m pytest -q -n auto --dist loadgroup -m "not slow"

# what CI checks before the tests: ruff's lint and format, and the type check (config in pyproject.toml)
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy accuracy

clean:
	rm -rf $(VENV) results html results-self html-self .asv
