"""Shared fixtures: an isolated reference cache, and results directories with known answers."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from fixtures_answers import write_suite_results
from fixtures_report import make_results_dir

# Every test process (and every subprocess it starts, which inherits os.environ) uses a private,
# throwaway reference cache, never the user's ~/.cache/opbench. Set at import time so that
# module-scoped fixtures, which run before function-scoped ones, are isolated too.
_SESSION_CACHE = tempfile.mkdtemp(prefix="opbench-test-cache-")
os.environ["OPBENCH_CACHE"] = _SESSION_CACHE

# `make test` runs on every core (pytest-xdist). asv keeps its machine list in ~/.asv-machine.json and
# rewrites it without a lock, so each worker gets its own HOME; the caches stay shared (the compiled
# LibTorch extension, pip's wheels) because XDG_CACHE_HOME still names the real one.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    os.environ["HOME"] = tempfile.mkdtemp(prefix=f"opbench-test-home-{os.environ['PYTEST_XDIST_WORKER']}-")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Each test gets its own empty cache directory, so no test depends on another's entries."""
    cache = tmp_path / "refcache"
    monkeypatch.setenv("OPBENCH_CACHE", str(cache))
    return cache


@pytest.fixture
def cache_path(_isolated_cache):
    """The per-test reference cache directory (not created until something is cached)."""
    return _isolated_cache


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
