"""Shared fixtures: the test run's own reference cache, and results directories with known answers."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import pytest
from fixtures_answers import write_suite_results
from fixtures_report import make_results_dir
from hypothesis import settings

# Every test process (and every subprocess it starts, which inherits os.environ) uses the test run's
# own throwaway reference cache, never the user's ~/.cache/opbench; set at import time, so that
# module-scoped fixtures use it too. The run's tests and xdist workers share it, as `opbench` runs
# share a user's: an entry is keyed by its inputs and checked by its digest on every read, so a test
# gets the same bits computed or read, and the exact references and typical models many tests need
# are computed once per run instead of once per test. Tests of the cache itself take `cache_path`.
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")
if _RUN:
    _SESSION_CACHE = os.path.join(tempfile.gettempdir(), f"opbench-test-cache-{_RUN}")
    os.makedirs(_SESSION_CACHE, exist_ok=True)
else:
    _SESSION_CACHE = tempfile.mkdtemp(prefix="opbench-test-cache-")
os.environ["OPBENCH_CACHE"] = _SESSION_CACHE

# Hypothesis' profiles: `make test` (CI) draws each property's examples in full (hypothesis' 100
# where a test sets no count); `make test-fast`, the edit loop, names HYPOTHESIS_PROFILE=edit-loop
# and draws 30: the metric properties alone took ~20 of its ~165 CPU-s at 150 per format.
settings.register_profile("edit-loop", max_examples=30)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# A suite started in the background (`make test &` in a script) inherits SIGINT ignored, and so would
# every opbench it starts; the Ctrl-C tests need it delivered, as at a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# `make test` runs on every core (pytest-xdist). asv keeps its machine list in ~/.asv-machine.json and
# rewrites it without a lock, so each worker gets its own HOME; the caches stay shared (the compiled
# LibTorch extension, pip's wheels) because XDG_CACHE_HOME still names the real one.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    os.environ["HOME"] = tempfile.mkdtemp(prefix=f"opbench-test-home-{os.environ['PYTEST_XDIST_WORKER']}-")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow end-to-end tests first. xdist hands each worker its next test as it runs dry, in
    this order (after its groups, largest first): started early, a 30 s test no longer leaves one
    core idle at the end while the other finishes it; the many short tests fill the gaps."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def cache_path(tmp_path, monkeypatch):
    """A private, empty reference cache for this test (not created until something is cached)."""
    cache = tmp_path / "refcache"
    monkeypatch.setenv("OPBENCH_CACHE", str(cache))
    return cache


@pytest.fixture(scope="session")
def shared_results(tmp_path_factory) -> Path:
    """The report tests' results (fixtures_report): read-only; tests that modify files make their own copy."""
    return make_results_dir(tmp_path_factory.mktemp("report"))


@pytest.fixture(scope="module")
def suite_results(tmp_path_factory) -> Path:
    """Results of the opbench suite itself with known answers (fixtures_answers)."""
    root = tmp_path_factory.mktemp("suite") / "results"
    write_suite_results(root)
    return root
