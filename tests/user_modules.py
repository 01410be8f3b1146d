"""A user's own module of model factories, importable from the current directory as `opbench model`
finds it: the tests write their models as users write them, each under a module name of its own."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def user_module(directory: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> Iterator[Path]:
    (directory / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.chdir(directory)
    monkeypatch.syspath_prepend(str(directory))
    try:
        yield directory
    finally:
        sys.modules.pop(name, None)  # imported once per process: the next test's module is its own


def within_last_bit(a, b) -> bool:
    """Whether float32 arrays `a` and `b` differ by at most one ulp anywhere: what another process
    running the same kernels on the same values gives, where MKL's products depend on the memory
    alignment of their operands (a child process's tensors, and a test worker's, are placed apart)."""
    import numpy as np

    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= np.spacing(np.maximum(np.abs(a), np.abs(b)))))
