"""The fast references against mpmath: correctly rounded elementwise values on random inputs and
on inputs whose value lies within 1e-3 ulp of a rounding midpoint (where a fast path that trusts
its wide value too far would round the wrong way), and the Ozaki exact GEMM against exact
rational arithmetic and against Dot2."""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exact_rounding import exact_round
from accuracy.dtypes import get_format
from accuracy.exact import dot2_matmul
from accuracy.exact_gemm import exact_matmul, slice_bits
from accuracy.references import correctly_rounded

FUNCS = {
    "exp": (np.exp, mpmath.exp, (-80.0, 80.0)),
    "log": (np.log, mpmath.log, (1e-30, 1e30)),
    "tanh": (np.tanh, mpmath.tanh, (-12.0, 12.0)),
    "sin": (np.sin, mpmath.sin, (-1e4, 1e4)),
}
MIDPOINT_ULPS = 1e-3  # how close to a midpoint the hard inputs are


def _mp_value(mp_fn, v: float) -> Fraction:
    with mpmath.workprec(300):
        y = mp_fn(mpmath.mpf(v))
    man, exp = y.man_exp
    q = Fraction(int(man)) * Fraction(2) ** int(exp)
    return -q if y < 0 else q


def _mp_rounded(mp_fn, x, fmt) -> np.ndarray:
    return np.array([exact_round(fmt, _mp_value(mp_fn, float(v))) for v in x])


def _near_midpoints(name: str, dtype: str, count: int) -> np.ndarray:
    """Inputs whose function value is within MIDPOINT_ULPS of a midpoint of `dtype`, found by
    evaluating many random inputs in a wider format (long double for float64 targets)."""
    np_fn, _, (lo, hi) = FUNCS[name]
    fmt = get_format(dtype)
    rng = np.random.Generator(np.random.PCG64(7))
    x = fmt.round(rng.uniform(lo, hi, 400_000)).astype(np.float64)
    wide = np_fn(x.astype(np.longdouble))
    nearest = wide.astype(np.float64).astype(fmt.np_dtype).astype(np.longdouble)
    spacing = np.abs(np.nextafter(nearest.astype(fmt.np_dtype), np.copysign(np.inf, wide - nearest).astype(fmt.np_dtype))
                     .astype(np.longdouble) - nearest)
    off_midpoint = np.abs(np.abs(wide - nearest) / spacing - 0.5)
    return x[np.argsort(off_midpoint)[:count]]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_hard_inputs_near_midpoints_round_correctly(name, dtype):
    np_fn, mp_fn, _ = FUNCS[name]
    fmt = get_format(dtype)
    x = _near_midpoints(name, dtype, 24)
    want = _mp_rounded(mp_fn, x, fmt)
    # they really are hard: the exact value is within MIDPOINT_ULPS of a midpoint
    for v, w in zip(x, want):
        q = _mp_value(mp_fn, float(v))
        neighbour = float(np.nextafter(fmt.np_dtype.type(w), fmt.np_dtype.type(np.inf if q > Fraction(w) else -np.inf)))
        gap = abs(Fraction(neighbour) - Fraction(w))
        assert abs(abs(q - Fraction(w)) / gap - Fraction(1, 2)) < MIDPOINT_ULPS
    got = fmt.round(correctly_rounded(np_fn, mp_fn, x, fmt).hi)
    assert got.tobytes() == want.astype(fmt.np_dtype).tobytes()


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(sorted(FUNCS)), dtype=st.sampled_from(["float16", "bfloat16", "float32", "float64"]),
       u=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=16))
def test_random_inputs_round_correctly(name, dtype, u):
    np_fn, mp_fn, (lo, hi) = FUNCS[name]
    fmt = get_format(dtype)
    with np.errstate(over="ignore"):
        x = fmt.round(lo + (hi - lo) * np.array(u)).astype(np.float64)
    x = x[np.isfinite(x) & (x != 0)]  # the range ends round to 0 or inf in the narrow formats
    exact = correctly_rounded(np_fn, mp_fn, x, fmt)
    assert fmt.round(exact.hi).tobytes() == fmt.round(_mp_rounded(mp_fn, x, fmt)).tobytes()
    if dtype == "float64":  # hi + lo is f(x) to the long-double bound
        for v, h, l in zip(x, exact.hi, exact.lo):
            err = abs(Fraction(h) + Fraction(l) - _mp_value(mp_fn, float(v)))
            assert err <= Fraction(2) ** -58 * abs(Fraction(h))


def _exact_product(a, b) -> list[list[Fraction]]:
    return [[sum((Fraction(a[i, l]) * Fraction(b[l, j]) for l in range(a.shape[1])), Fraction(0))
             for j in range(b.shape[1])] for i in range(a.shape[0])]


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 5), k=st.integers(1, 7), n=st.integers(1, 5), seed=st.integers(0, 2**32 - 1),
       spread=st.integers(0, 200))
def test_ozaki_matches_exact_rational_product(m, k, n, seed, spread):
    """Entries spread over 2**spread in magnitude force many slices; cancellation included."""
    rng = np.random.Generator(np.random.PCG64(seed))
    a = rng.standard_normal((m, k)) * np.exp2(rng.integers(-spread, 1, (m, k)))
    b = rng.standard_normal((k, n)) * np.exp2(rng.integers(-spread, 1, (k, n)))
    if k > 1:
        a[:, -1] = -a[:, 0]  # exact cancellation of one pair of terms
        b[-1] = b[0]
    got = exact_matmul(a, b)
    want = _exact_product(a, b)
    for i in range(m):
        for j in range(n):
            scale = Fraction(np.max(np.abs(a[i]))) * Fraction(np.max(np.abs(b[:, j])))
            err = abs(Fraction(got.hi[i, j]) + Fraction(got.lo[i, j]) - want[i][j])
            assert err <= Fraction(2) ** -104 * abs(want[i][j]) + Fraction(2) ** -100 * scale


def test_ozaki_slices_make_exact_products():
    """2*bits + log2(k) <= 53: a k-term sum of slice products cannot round."""
    for k in (1, 2, 3, 64, 256, 1000, 1 << 20):
        assert 2 * slice_bits(k) + np.log2(max(k, 2)) <= 53


def test_ozaki_agrees_with_dot2_at_256_and_batches():
    rng = np.random.Generator(np.random.PCG64(3))
    a, b = rng.standard_normal((256, 256)), rng.standard_normal((256, 256))
    ours, dot2 = exact_matmul(a, b), dot2_matmul(a, b)
    assert np.array_equal(ours.hi, dot2.hi)
    assert np.max(np.abs(ours.lo - dot2.lo)) <= 2.0**-100 * np.max(np.abs(a) @ np.abs(b))
    batched = exact_matmul(rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((4, 6)))
    assert batched.shape == (2, 3, 5, 6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_results_beyond_the_largest_finite_number_round_to_infinity_or_not_as_mpmath_says(dtype):
    """Around exp's overflow threshold (largest finite + half an ulp) and far beyond it."""
    fmt = get_format(dtype)
    edge = np.log(fmt.max_finite)
    x = np.unique(fmt.round(np.concatenate([edge + np.linspace(-0.02, 0.02, 41), [edge * 2, edge * 4]])))
    x = x.astype(np.float64)
    with np.errstate(over="ignore"):
        got = fmt.round(correctly_rounded(np.exp, mpmath.exp, x, fmt).hi)
    assert got.tobytes() == _mp_rounded(mpmath.exp, x, fmt).astype(fmt.np_dtype).tobytes()
    assert np.isinf(got).any() and np.isfinite(got).any()
