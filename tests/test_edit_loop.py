"""`make test-fast` runs in process (tests/conftest.py): a test not marked slow cannot start opbench,
Python, a shell or the browser; it may run the tools opbench itself runs (git)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def test_a_test_not_marked_slow_cannot_start_python_opbench_or_a_shell():
    opbench = Path(sys.executable).parent / "opbench"
    for command in ([sys.executable, "-c", "pass"], [str(opbench), "--version"], ["bash", "-c", "true"], "sh -c true"):
        with pytest.raises(AssertionError, match=r"test_edit_loop\.py::.* starts \w+: mark it slow"):
            subprocess.run(command, shell=isinstance(command, str), check=False)
    assert subprocess.run(["git", "--version"], capture_output=True, check=False).returncode == 0
