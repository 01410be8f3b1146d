"""`quiet_stderr` keeps a library's lines off the user's stderr, whichever way they are written."""

from __future__ import annotations

import subprocess
import sys

import pytest

from accuracy.core.errors import quiet_stderr

WRITES = """
import os, sys
from accuracy.core.errors import quiet_stderr
print("before", file=sys.stderr, flush=True)
with quiet_stderr():
    os.write(2, b"from C++\\n")
    print("through sys.stderr", file=sys.stderr)
print("after", file=sys.stderr, flush=True)
"""


@pytest.mark.slow
def test_a_process_stderr_keeps_only_what_is_written_outside():
    done = subprocess.run([sys.executable, "-c", WRITES], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, "before\nafter\n")


def test_where_sys_stderr_is_not_descriptor_2_its_writes_are_kept_off_too(capsys):
    """pytest's capture here, as a notebook's: ExecuTorch's bindings log through sys.stderr."""
    print("before", file=sys.stderr)
    with quiet_stderr():
        print("through sys.stderr", file=sys.stderr)
    print("after", file=sys.stderr)
    assert capsys.readouterr().err == "before\nafter\n"
