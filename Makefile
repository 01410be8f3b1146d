# Two commands do all setup on a fresh machine: `make bench` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.opbench-installed

.PHONY: setup bench bench-quick bench-self selftest census test test-fast lint clean browser

setup: $(STAMP)

EXTRAS := .[test,blas,frameworks,models,deploy,dask,lint]

# Reinstall whenever the pins or the project metadata change. uv installs the pinned stack in ~15 s
# where pip takes ~2 min (measured here); pip, reading the same pins, is the fallback wherever uv
# cannot be had. The environment starts without pip (seeding it took 7 s of a fresh clone's setup):
# this Python's own pip puts uv in it, and uv installs the pinned pip with the rest. uv does not
# read pip's configuration: pip's find-links (a local wheel of torch's CPU build, say) are handed
# over. Then prepare_environment imports every framework opbench runs, writing the bytecode of what
# is imported even where PYTHONDONTWRITEBYTECODE is set (compiling the whole environment took 37 s
# here), and builds LibTorch's backend beside it (16 s), so that no command, test or benchmark pays
# for either first.
$(STAMP): constraints.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv --without-pip $(VENV)
	{ $(PYTHON) -m pip --python $(BIN)/python install -q -c constraints.txt uv && \
	  UV_FIND_LINKS="$${UV_FIND_LINKS:-$$(echo $${PIP_FIND_LINKS:-} | tr ' ' ',')}" \
	  $(BIN)/uv pip install -q --python $(BIN)/python -c constraints.txt -e '$(EXTRAS)' pip; } || \
	  { $(BIN)/python -m ensurepip -q && $(BIN)/python -m pip install -q -c constraints.txt -e '$(EXTRAS)' pip; }
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m accuracy.run.prepare_environment
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

# every torchvision classification model and tiny transformers family through the default and
# deploy ports (hours on 2 cores; CENSUS_ARGS="--dask local:4" or "--models REGEX" to spread or narrow it)
CENSUS_ARGS ?=
census: setup
	$(BIN)/opbench selftest --census $(CENSUS_ARGS)

# opbench's own speed (loading a large results directory), kept out of the op suite
bench-self: setup
	$(BIN)/asv machine --yes --config asv.self.conf.json >/dev/null
	$(BIN)/asv run --config asv.self.conf.json --python=same --set-commit-hash $$(git rev-parse HEAD) --quick

# The tests start hundreds of Python processes (the CLI, asv's benchmarks, Dask workers) that import
# the same modules: they keep their bytecode (and pytest its rewritten tests) in __pycache__ even
# where PYTHONDONTWRITEBYTECODE is set, instead of compiling them again in every process.
# More workers than cores: an OpenMP thread that reaches the end of a parallel region spins for
# its partner, which another worker has descheduled. A 32x64 Linear on two torch threads took
# 3.6-7.6 ms a call under that load against 26 us with OMP_WAIT_POLICY=PASSIVE (threads sleep
# instead; the same threads, the same bits), and two of the model test files 102 -> 63 user CPU-s
# (AMD EPYC, 2 cores, side by side under the same load).
# One OpenMP thread a process: `make test` runs one worker per core, and each worker's (and each of
# its children's) two-thread pools only took turns on the core the other worker needs (a fresh
# clone's `make test` 425 s, with one thread 394 s; 2,497 passed and 9 skipped both; AMD EPYC Zen 4,
# 2 cores). A test whose claim needs more threads sets them itself (threadpoolctl, set_num_threads),
# as it must on a one-core machine.
PYTEST := PYTHONDONTWRITEBYTECODE= OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q --dist loadgroup

# one worker per core: the suite is CPU-bound (174-188% of 2 cores), and a third worker only added
# its own imports and the switching between three (AMD host, 131f048: -n 3 520 s in a fresh clone,
# -n 2 460 s and 845 CPU-s warm in that clone; -n 2 at 3aa04bd in a fresh clone 477 s; see
# docs/asv-suite.md); the 25 slowest tests are listed at the end
test: setup browser
	$(PYTEST) -n $$(getconf _NPROCESSORS_ONLN) --durations=25

# the unit tests without the end-to-end ones (asv runs, subprocesses), one worker per core, fewer
# hypothesis examples (tests/conftest.py): the loop while editing
test-fast: setup
	HYPOTHESIS_PROFILE=edit-loop $(PYTEST) -n auto -m "not slow"

# what CI checks before the tests: ruff's lint and format, and the type check (config in pyproject.toml)
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy accuracy

clean:
	rm -rf $(VENV) results html results-self html-self .asv
