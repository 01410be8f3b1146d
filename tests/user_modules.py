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


def same_model_output(a, b) -> bool:
    """Whether two float32 runs of the same model on the same inputs agree to float32's rounding:
    another process (a child port, a fresh environment) may sum a product in another order (its
    kernels pick their blocking from its threads and its operands' memory alignment), which moves
    a small result by many of its own ulps but never by more than a rounding of the terms; other
    weights (a factory seeded differently) differ by their own size."""
    import numpy as np

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return False
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    return bool(np.all(np.abs(a - b) <= 1e-5 * (np.abs(b) + scale)))
