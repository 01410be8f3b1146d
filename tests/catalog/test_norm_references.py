"""batch_norm's and layer_norm's fast exact references (TwoSum/TwoProduct around 200-bit
per-channel or per-row statistics) against 200-bit arithmetic per element, on inputs whose
result cancels to near zero, and rows of nearly equal values, as well."""

from __future__ import annotations

import mpmath
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.catalog.ops.common import mp_layer_norm
from accuracy.catalog.ops.norms import BN_EPS, _bn_exact, _layer_norm_exact
from accuracy.core.dtypes import FORMATS
from accuracy.reference.exact import MP_PRECISION_BITS, mp_rows


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


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), spread=st.sampled_from([1.0, 1e-6, 1e-12]), cancel=st.booleans())
def test_the_fast_layer_norm_reference_is_exact_to_far_below_float64(seed, spread, cancel):
    rng = np.random.default_rng(seed)
    x = (3 + rng.standard_normal((3, 7)) * spread).astype(np.float32).astype(np.float64)  # nearly equal rows too
    w = rng.standard_normal(7)
    b = rng.standard_normal(7)
    inputs = {"x": x, "w": w, "b": b}
    slow = mp_rows(mp_layer_norm, x, np.broadcast_to(w, x.shape), np.broadcast_to(b, x.shape))
    if cancel:  # b = -w z for the first column: those results are their rounding residue
        inputs["b"] = b.copy()
        inputs["b"][0] = -slow.hi[0, 0] + b[0]
        slow = mp_rows(mp_layer_norm, x, np.broadcast_to(w, x.shape), np.broadcast_to(inputs["b"], x.shape))
    fast = _layer_norm_exact(inputs, FORMATS["float32"])
    # |w z| + |b|, and the mean's last bits through 1/sigma: |w| |mean| / sigma (as the bound's term)
    sigma = np.sqrt(x.var(axis=-1, keepdims=True) + 1e-5)
    size = (
        np.abs(slow.hi - inputs["b"]) + np.abs(inputs["b"]) + np.abs(w) * np.abs(x.mean(axis=-1, keepdims=True)) / sigma
    )
    with mpmath.workprec(MP_PRECISION_BITS):
        for index in np.ndindex(x.shape):
            got = mpmath.mpf(fast.hi[index]) + mpmath.mpf(fast.lo[index])
            truth = mpmath.mpf(slow.hi[index]) + mpmath.mpf(slow.lo[index])
            assert abs(got - truth) <= size[index] * mpmath.mpf(2) ** -98, (index, got, truth)
