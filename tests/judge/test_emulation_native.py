"""The round-to-nearest float32 emulation runs in numpy's own float32 where every value is a
float32 (issue 59): bitwise the long double emulation's sums and products, on any values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from accuracy.core.dtypes import get_format
from accuracy.judge import emulation
from accuracy.judge.emulation import emulate

FLOAT32 = get_format("float32")
# every float32: subnormals, the largest finite values (sums that overflow), zeros of both signs
FLOAT32_VALUES = st.floats(width=32, allow_nan=False, allow_infinity=False)


def _both(fn, inputs: dict) -> tuple[np.ndarray, np.ndarray]:
    native = emulate(fn, inputs, FLOAT32, "nearest")
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(emulation._Context, "_native", lambda self, *arrays: None)
        carried = emulate(fn, inputs, FLOAT32, "nearest")
    return native, carried


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a, b, equal_nan=True) and np.array_equal(np.signbit(a), np.signbit(b)))


@settings(max_examples=60, deadline=None)
@given(data=st.data(), rows=st.integers(1, 4), inner=st.integers(1, 24), cols=st.integers(1, 4))
def test_native_float32_products_are_the_long_double_emulations(data, rows, inner, cols):
    x = data.draw(arrays(np.float32, (rows, inner), elements=FLOAT32_VALUES)).astype(np.float64)
    w = data.draw(arrays(np.float32, (cols, inner), elements=FLOAT32_VALUES)).astype(np.float64)
    native, carried = _both(lambda x, w: x @ w.T, {"x": x, "w": w})
    assert _same(native, carried)


@settings(max_examples=60, deadline=None)
@given(values=arrays(np.float32, st.tuples(st.integers(1, 3), st.integers(1, 40)), elements=FLOAT32_VALUES))
def test_native_float32_sums_are_the_long_double_emulations(values):
    native, carried = _both(lambda x: np.sum(x, axis=-1), {"x": values.astype(np.float64)})
    assert _same(native, carried)


def test_values_that_are_not_float32_keep_the_long_double_emulation(monkeypatch):
    """An input off float32's grid (1 + 2**-30) is rounded at its first operation, as a float32
    algorithm given it would not see it: the native path is not taken."""
    x = np.array([[1.0 + 2.0**-30, 2.0**-25, 3.0]])
    taken = []
    native = emulation._Context._native

    def recorded(self, *arrays):
        taken.append(native(self, *arrays))
        return taken[-1]

    monkeypatch.setattr(emulation._Context, "_native", recorded)
    result = emulate(lambda x: np.sum(x, axis=-1), {"x": x}, FLOAT32, "nearest")
    assert taken == [None]
    assert result[0] == np.float32(np.float32(1.0 + 2.0**-30) + np.float32(2.0**-25)) + np.float32(3.0)
