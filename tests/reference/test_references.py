"""correctly_rounded: the reference rounds to the same value of the target as mpmath does,
including at the midpoints between target values where the float64 libm value is not enough."""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest
from exact_rounding import exact_round

from accuracy.core.dtypes import get_format
from accuracy.reference.correctly_rounded import correctly_rounded
from accuracy.reference.exact import Exact, fsum_rows, mp_map, mp_rows, two_prod, two_sum

FUNCS = {
    "exp": (np.exp, mpmath.exp, (-10.0, 10.0)),
    "log": (np.log, mpmath.log, (1e-3, 1e3)),
    "tanh": (np.tanh, mpmath.tanh, (-5.0, 5.0)),
    "sin": (np.sin, mpmath.sin, (-10.0, 10.0)),
}


def _mp_rounded(mp_fn, x, fmt):
    """mpmath's 200-bit value rounded straight to fmt (no float64 step in between)."""
    out = []
    with mpmath.workprec(200):
        for v in x:
            y = mp_fn(mpmath.mpf(float(v)))
            man, exp = y.man_exp  # man is the magnitude: the sign is kept apart
            q = Fraction(int(man)) * Fraction(2) ** int(exp)
            out.append(exact_round(fmt, -q if y < 0 else q))
    return fmt.round(np.array(out))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_correctly_rounded_matches_mpmath_on_every_input(name, dtype):
    """Every float16/bfloat16 input in the op's range (all of them for float16 near 1)."""
    np_fn, mp_fn, (lo, hi) = FUNCS[name]
    fmt = get_format(dtype)
    rng = np.random.default_rng(0)
    x = fmt.round(rng.uniform(lo, hi, 1500)).astype(np.float64)
    x = np.unique(x)
    exact = correctly_rounded(np_fn, mp_fn, x, fmt)
    assert exact.hi.shape == x.shape
    got = fmt.round(exact.hi + exact.lo)
    want = _mp_rounded(mp_fn, x, fmt)
    assert got.tobytes() == want.tobytes()


def test_midpoint_cases_go_through_mpmath():
    """Inputs whose float64 exp lies within a few float64 ulps of a float16 midpoint."""
    fmt = get_format("float16")
    x = fmt.round(np.linspace(-10, 10, 20001)).astype(np.float64)
    x = np.unique(x)
    v = np.exp(x)
    nearest = fmt.round(v).astype(np.float64)
    from accuracy.core.dtypes import ulp

    distance = np.abs(v - nearest) / ulp(v, fmt)
    risky = x[0.5 - distance < 1e-9]
    exact = correctly_rounded(np.exp, mpmath.exp, risky, fmt)
    want = mp_map(mpmath.exp, risky)
    assert np.array_equal(exact.hi, want.hi) and np.array_equal(exact.lo, want.lo)


def test_float64_target_carries_the_long_double_remainder():
    """hi + lo is f(x) to within the long-double evaluation's bound (2**-59 relative)."""
    fmt = get_format("float64")
    x = np.array([0.5, 1.0, 2.0, -3.25])
    e = correctly_rounded(np.exp, mpmath.exp, x, fmt)
    with mpmath.workprec(200):
        for xi, h, lo in zip(x, e.hi, e.lo, strict=False):
            assert abs(mpmath.mpf(h) + mpmath.mpf(lo) - mpmath.exp(xi)) < mpmath.mpf(2) ** -59 * abs(h)
    assert np.any(e.lo != 0)


def test_error_free_transformations():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(1000) * 1e3, rng.standard_normal(1000) * 1e-5
    s, e = two_sum(a, b)
    p, f = two_prod(a, b)
    with mpmath.workprec(300):
        for i in range(0, 1000, 37):
            A, B = mpmath.mpf(a[i]), mpmath.mpf(b[i])
            assert mpmath.mpf(s[i]) + mpmath.mpf(e[i]) == A + B
            assert mpmath.mpf(p[i]) + mpmath.mpf(f[i]) == A * B


def test_fsum_rows_and_mp_rows_shapes():
    x = np.array([[1e16, 1.0, -1e16, 3.0], [1.0, 2.0, 3.0, 4.0]])
    e = fsum_rows(x)
    assert e.hi.tolist() == [4.0, 10.0] and e.lo.tolist() == [0.0, 0.0]
    e = fsum_rows(np.array([1.0, 2.0**-60]))
    assert e.hi == 1.0 and e.lo == 2.0**-60
    r = mp_rows(lambda row: [mpmath.fsum(row)], x)
    assert r.hi.shape == (2,) and r.hi.tolist() == [4.0, 10.0]
    r = mp_rows(lambda row: [v * 2 for v in row], x)
    assert r.hi.shape == x.shape
    assert isinstance(Exact.from_float64([1.0]), Exact)
