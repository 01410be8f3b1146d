"""batch_norm's fast exact reference (TwoSum/TwoProduct around a 200-bit per-channel scale) against
200-bit arithmetic per element, on inputs whose result cancels to near zero as well."""

from __future__ import annotations

import mpmath
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.catalog.ops.norms import BN_EPS, _bn_exact
from accuracy.core.dtypes import FORMATS
from accuracy.reference.exact import MP_PRECISION_BITS


def _mp_value(x, m, v, w, b):
    with mpmath.workprec(MP_PRECISION_BITS):
        return (mpmath.mpf(x) - mpmath.mpf(m)) / mpmath.sqrt(mpmath.mpf(v) + BN_EPS) * mpmath.mpf(w) + mpmath.mpf(b)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), cancel=st.booleans(), dtype=st.sampled_from([np.float32, np.float64]))
def test_the_fast_batch_norm_reference_is_exact_to_far_below_float64(seed, cancel, dtype):
    rng = np.random.default_rng(seed)
    inputs = {
        "x": rng.standard_normal((2, 3, 5)).astype(dtype).astype(np.float64) * 4,
        "mean": rng.standard_normal(3).astype(dtype).astype(np.float64),
        "var": rng.uniform(0.01, 3, 3).astype(dtype).astype(np.float64),
        "w": rng.standard_normal(3).astype(dtype).astype(np.float64),
        "b": rng.standard_normal(3).astype(dtype).astype(np.float64),
    }
    if cancel:  # b = -(x - mean) * scale for one element per channel: the result is its rounding residue
        scale = inputs["w"] / np.sqrt(inputs["var"] + BN_EPS)
        inputs["b"] = -(inputs["x"][0, :, 0] - inputs["mean"]) * scale
    exact = _bn_exact(inputs, FORMATS["float64"])
    x = inputs["x"]
    with mpmath.workprec(MP_PRECISION_BITS):
        for index in np.ndindex(x.shape):
            c = index[1]
            args = (x[index], inputs["mean"][c], inputs["var"][c], inputs["w"][c], inputs["b"][c])
            truth = _mp_value(*args)
            size = abs(mpmath.mpf(x[index]) - args[1]) * abs(args[3]) / mpmath.sqrt(args[2] + BN_EPS) + abs(args[4])
            got = mpmath.mpf(exact.hi[index]) + mpmath.mpf(exact.lo[index])
            # 2**-100 of the terms' size: a cancelled result's residue is as exact as its terms allow
            assert abs(got - truth) <= size * mpmath.mpf(2) ** -100, (index, got, truth)
