"""The quantization noise model's numerics: rounding to a grid of step s leaves uniform noise of
rms s / sqrt(12), and the spread allowed a correct port's rms shrinks towards 1 with the
number of elements."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.judge.quantization import WELL_QUANTIZED, dequantize, quantize, spread, sqnr_db, uniform_rms


@settings(max_examples=40, deadline=None)
@given(
    step=st.floats(1e-4, 10.0),
    zero=st.integers(0, 255),
    seed=st.integers(0, 2**32 - 1),
)
def test_rounding_data_spread_over_the_grid_leaves_s_over_sqrt12(step, zero, seed):
    """uint8 with any zero point: values spread over the range it holds (no clipping)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    low, high = (0 - zero) * step, (255 - zero) * step
    values = rng.uniform(low + step, high - step, 20000) if high - low > 4 * step else rng.uniform(0, 0, 1)
    if values.size == 1:
        return
    error = dequantize(quantize(values, step, zero, np.uint8), step, zero) - values
    measured = math.sqrt(float(np.mean(error**2)))
    # 20000 draws of a uniform: the rms to within 3% (its relative spread is 0.45%)
    assert abs(measured / uniform_rms(step) - 1) < 0.03
    assert abs(measured / step - WELL_QUANTIZED) < 0.03 * WELL_QUANTIZED
    assert np.all(np.abs(error) <= step / 2 * (1 + 1e-12))


def test_values_past_the_range_saturate_at_its_ends():
    out = quantize(np.array([-1.0, 0.0, 300.0]), 1.0, 10, np.int8)
    assert out.tolist() == [9.0, 10.0, 127.0]


def test_the_spread_allowed_falls_with_the_elements_and_stays_above_1():
    sizes = [1, 10, 100, 1000, 10**5]
    spreads = [spread(n) for n in sizes]
    assert spreads == sorted(spreads, reverse=True)
    assert spreads[0] == pytest.approx(math.sqrt(15.137), rel=1e-3)  # chi2(1)'s upper 1e-4 point
    assert 1.0 < spreads[-1] < 1.03


def test_sqnr_of_a_known_error():
    signal = np.ones(100)
    assert sqnr_db(signal, np.full(100, 0.1)) == pytest.approx(20.0, rel=1e-12)
    assert sqnr_db(signal, np.zeros(100)) == math.inf
