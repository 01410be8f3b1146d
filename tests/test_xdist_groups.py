"""`make test` keeps each xdist_group on one worker, so a module's shared fixture (the self-test
sweep, explain's reports, the fleet's two runs) is computed once. pytest 9.2 with pytest-xdist
3.8 dropped the groups without a word (pytest-xdist#1386): every worker computed every fixture."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

GROUPED = """
import os
import pytest

pytestmark = pytest.mark.xdist_group("shared")


@pytest.mark.parametrize("i", range(8))
def test_records_its_worker(i):
    with open("workers.txt", "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""


@pytest.mark.slow  # end to end: pytest in its own process
def test_a_group_runs_on_one_worker_under_make_tests_options(tmp_path: Path):
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # its own rootdir: none of this suite's conftest
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    workers = (tmp_path / "workers.txt").read_text().split()
    assert len(workers) == 8 and len(set(workers)) == 1, workers
