"""Shared fixtures: the test run's own reference cache, and results directories with known answers."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from fixtures_answers import write_suite_results
from fixtures_report import make_results_dir
from hypothesis import settings

from accuracy.core.files import cache_home

# Every test process (and every subprocess it starts, which inherits os.environ) uses the test run's
# own throwaway reference cache, never the user's ~/.cache/opbench; set at import time, so that
# module-scoped fixtures use it too. The run's tests and xdist workers share it, as `opbench` runs
# share a user's: an entry is keyed by its inputs and checked by its digest on every read, so a test
# gets the same bits computed or read, and the exact references and typical models many tests need
# are computed once per run instead of once per test. Tests of the cache itself take `cache_path`.
# The process that starts the run (xdist's controller, or the one process of `-n 0`) makes the cache
# and removes it when the run ends (pytest_unconfigure); its workers inherit its environment.
# (Each worker made its own before and nobody removed any: /tmp held 1,180 of them, and the disk
# filled.)
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
_SESSION_CACHE = os.environ.get("OPBENCH_TEST_RUN_CACHE", "") if _WORKER else ""
_MADE_HERE = not _SESSION_CACHE
if _MADE_HERE:
    _SESSION_CACHE = tempfile.mkdtemp(prefix="opbench-test-cache-")  # 0o700: a cache others can write to is refused
os.environ["OPBENCH_TEST_RUN_CACHE"] = os.environ["OPBENCH_CACHE"] = _SESSION_CACHE
# Model conversions (ONNX exports, ExecuTorch programs) are kept from run to run instead, beside the
# LibTorch build in the user's cache folder but apart from opbench's own: an entry's key holds the
# converter's code and the libraries' versions as well as the model and its inputs (export_cache),
# so an edit of a port converts again. Converting was 58 of a run's ~640 test CPU-s (AMD EPYC,
# 2 cores); about 15 remain (the ETRecord lowerings of ExecuTorch's end-to-end runs, and the int8
# ports', which quantize first). Tests of a cache take `cache_path`, which holds their conversions too.
if _MADE_HERE:
    os.environ["OPBENCH_CONVERSION_CACHE"] = str(cache_home() / "opbench-tests" / "conversions")

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
_WORKER_HOME = None
if _WORKER:
    os.environ.setdefault("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    os.environ["HOME"] = _WORKER_HOME = tempfile.mkdtemp(prefix=f"opbench-test-home-{_WORKER}-")


def pytest_unconfigure(config: pytest.Config) -> None:
    """What this process made for the run goes with it: the run's cache, a worker's HOME."""
    for made in (_SESSION_CACHE if _MADE_HERE else None, _WORKER_HOME):
        if made:
            shutil.rmtree(made, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects: a sweep's later cases are slow
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A parametrized test marked `sweep` (one whole-model run per case: every bug, every catalogue
    entry) runs its first case in `make test-fast` and every case in `make test`: the edit loop
    keeps each path, the suite each case. Then the slow end-to-end tests first. xdist hands each
    worker its next test as it runs dry, in this order (after its groups, largest first): started
    early, a 30 s test no longer leaves one core idle at the end while the other finishes it; the
    many short tests fill the gaps."""
    first: set[tuple[str, str]] = set()
    for item in items:
        if item.get_closest_marker("sweep") is not None:
            function = (str(item.path), getattr(item, "originalname", item.name))
            if function in first:
                item.add_marker(pytest.mark.slow)
            first.add(function)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


_START_PROCESS = subprocess.Popen.__init__


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    with _in_process_unless_slow(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    with _in_process_unless_slow(item):
        return (yield)


# what makes a test end to end: a Python process (opbench, asv, pytest), a shell or the browser that
# the test or opbench starts; not the tools opbench runs (git, ldconfig), nor a library's own helpers
# (torch.compile probes its compiler's output in a Python process)
_END_TO_END = ("opbench", "asv", "sh", "bash", "chromium")


@contextlib.contextmanager
def _in_process_unless_slow(item: pytest.Item):
    """`make test-fast` runs in process: a test that starts a program of _END_TO_END is marked
    slow, or it fails here (its fixtures' programs included)."""
    if item.get_closest_marker("slow") is not None:
        yield
        return

    def refuse(popen, args, *rest, **options):
        program = os.path.basename(str(args[0] if isinstance(args, list | tuple) else args).split()[0])
        caller = sys._getframe(1)
        while caller.f_back is not None and caller.f_code.co_filename == subprocess.__file__:
            caller = caller.f_back
        library = "site-packages" in caller.f_code.co_filename
        if not library and (program.startswith("python") or program in _END_TO_END):
            raise AssertionError(f"{item.nodeid} starts {program}: mark it slow (end to end), or run it in process")
        _START_PROCESS(popen, args, *rest, **options)

    subprocess.Popen.__init__ = refuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = _START_PROCESS  # type: ignore[method-assign]


@pytest.fixture
def cache_path(tmp_path, monkeypatch):
    """A private, empty reference cache for this test (not created until something is cached),
    which holds its conversions too."""
    cache = tmp_path / "refcache"
    monkeypatch.setenv("OPBENCH_CACHE", str(cache))
    monkeypatch.delenv("OPBENCH_CONVERSION_CACHE", raising=False)
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


@pytest.fixture
def two_torch_threads():
    """torch's pool at two threads for the test: `make test` runs each worker on one
    (OMP_NUM_THREADS=1), where a `threads:1` port would be the reference's own run again."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def one_thread_count():
    """MKL's and OpenMP's pools set to torch's count, the count a child port is started with: an
    earlier test in the same worker may have left a BLAS pool at another (threadpoolctl), and a
    Linear's last bit depends on how MKL splits its sums, so a parent's reference and its child's
    run differed by one ulp in a full `make test`."""
    import torch

    torch.set_num_threads(torch.get_num_threads())
