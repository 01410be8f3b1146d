"""Every op's exact reference against its own independent mpmath oracle, generated from the registry.

The oracle (declared on the op's record) reaches the exact value by another formula, at 200 bits and
at the op's small `test_size`. In every format the reference rounds to the same value as the
oracle, which is all a reference has to get right; in float64 they also agree to far below an ulp.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest
from exact_rounding import exact_round

from accuracy.catalog.registry import all_ops, get_op
from accuracy.core.dtypes import get_format
from accuracy.reference.inputs import as_float64, make_inputs

ORACLE_BITS = 200
REL_TOL = Fraction(2) ** -60  # float64: per element, relative to the oracle's value and to the largest |oracle|
# float64, double-double references (all but the correctly rounded elementwise ones, which carry
# only what deciding the rounding needs: references.py): per element, relative to the largest |oracle|
DOUBLE_DOUBLE_TOL = Fraction(2) ** -100
CORRECTLY_ROUNDED_FAMILIES = ("elementwise", "activations")


def _frac(v: mpmath.mpf) -> Fraction:
    """The exact value of an mpf (no re-rounding to the current working precision)."""
    man, exp = v.man_exp  # man is the magnitude: the sign is kept apart
    q = Fraction(int(man)) * Fraction(2) ** int(exp) if man else Fraction(0)
    return -q if v < 0 else q


def oracle_and_exact(op, inputs64, fmt) -> tuple[list[Fraction], list[Fraction]]:
    """(oracle, exact reference) as exact rationals, element by element."""
    exact = op.exact(inputs64, fmt)
    with mpmath.workprec(ORACLE_BITS):
        want = [mpmath.mpf(w) for w in op.oracle(inputs64)]
    got = [Fraction(float(h)) + Fraction(float(lo)) for h, lo in zip(exact.hi.ravel(), exact.lo.ravel(), strict=False)]
    assert len(want) == exact.hi.size, "the oracle gives one value per output element"
    return [_frac(w) for w in want], got


@pytest.mark.parametrize("op_name", [op.name for op in all_ops()])
def test_every_op_declares_an_oracle_and_a_test_size(op_name):
    op = get_op(op_name)
    assert callable(op.oracle), f"{op.name} declares no mpmath oracle"
    assert 1 <= op.test_size <= op.default_size


def _cases():
    return [
        pytest.param(op.name, condition, dtype, id=f"{op.name}@{condition}-{dtype}")
        for op in all_ops()
        for condition in op.condition_names()
        for dtype in op.dtypes()
    ]


@pytest.mark.parametrize("op_name,condition,dtype", _cases())
def test_exact_reference_agrees_with_oracle(op_name, condition, dtype):
    op = get_op(op_name)
    fmt = get_format(dtype)
    inputs64 = as_float64(make_inputs(op, op.test_size, fmt, condition))
    want, got = oracle_and_exact(op, inputs64, fmt)
    scale = max(abs(w) for w in want)
    tol = REL_TOL if op.family in CORRECTLY_ROUNDED_FAMILIES else DOUBLE_DOUBLE_TOL
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        assert exact_round(fmt, g) == exact_round(fmt, w), (i, float(g), float(w))
        if fmt.precision >= 53:
            assert abs(g - w) <= tol * scale, (i, float(g), float(w))
            assert w == 0 or abs(g - w) <= REL_TOL * abs(w), (i, float(g), float(w))


# Each op of these families is a sum of products of its inputs, its reference an exact product
# (exact_gemm), and its oracle on |inputs| the sum of |terms| the reference's error is bounded by.
SUMS_OF_PRODUCTS = ("products", "conv")


@pytest.mark.parametrize("op_name", [op.name for op in all_ops() if op.family in SUMS_OF_PRODUCTS])
def test_exact_products_match_mpmath_to_1e_30(op_name):
    """The reference (hi + lo) vs 200-bit mpmath on float64 inputs: relative difference <= 1e-30.

    Relative to |exact| wherever the sum is well conditioned (sum|terms| <= 16 |sum|), and
    relative to sum|terms| everywhere (an element near zero has no relative accuracy to give).
    """
    op = get_op(op_name)
    fmt = get_format("float64")
    inputs64 = as_float64(make_inputs(op, op.test_size, fmt))
    exact = op.exact(inputs64, fmt)
    with mpmath.workprec(ORACLE_BITS):
        want = op.oracle(inputs64)
        mags = op.oracle({k: np.abs(v) for k, v in inputs64.items()})
        rel, rel_mag, n_conditioned = mpmath.mpf(0), mpmath.mpf(0), 0
        for h, lo, w, m in zip(exact.hi.ravel(), exact.lo.ravel(), want, mags, strict=False):
            err = abs(mpmath.mpf(float(h)) + mpmath.mpf(float(lo)) - w)
            rel_mag = max(rel_mag, err / m)
            if m <= 16 * abs(w):
                rel = max(rel, err / abs(w))
                n_conditioned += 1
    assert len(want) == exact.hi.size
    assert n_conditioned >= exact.hi.size // 4  # the well-conditioned check is not vacuous
    assert rel <= mpmath.mpf("1e-30"), rel
    assert rel_mag <= mpmath.mpf("1e-30"), rel_mag
    # hi alone is within an ulp of the exact value
    assert np.all(np.abs(exact.lo) <= np.spacing(np.abs(exact.hi)))
