"""Verdicts on any inputs and outputs (`judge`), read against independent mpmath computations."""

from __future__ import annotations

import dataclasses
import math

import mpmath
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from accuracy.catalog.registry import get_op
from accuracy.core.dtypes import FORMATS, get_format
from accuracy.judge.emulation import emulate
from accuracy.judge.error_metrics import ulps_apart
from accuracy.judge.verdicts import (
    BEYOND,
    SUSPICIOUS,
    UNDETERMINED,
    VERDICTS,
    WITHIN,
    Evidence,
    correctly_rounded,
    judge,
    rounding_error,
)
from accuracy.reference.exact import Exact
from accuracy.workflows.evaluation import make_case

SETTINGS = settings(max_examples=200, deadline=None)
ALARMS = (SUSPICIOUS, BEYOND)


def _mp_round(value: mpmath.mpf, fmt) -> float:
    """Round-to-nearest-even of an mpmath value to `fmt`, overflow to inf: independent of numpy."""
    if value == 0:
        return 0.0
    _m, e = mpmath.frexp(value)  # value = m 2**e, 0.5 <= |m| < 1
    e = max(int(e), fmt.emin + 1)  # below the normal range the spacing stays fixed
    scaled = mpmath.ldexp(value, fmt.precision - e)
    r = mpmath.nint(scaled)  # mpmath rounds half to even
    result = float(mpmath.ldexp(r, e - fmt.precision))
    return result if abs(result) <= fmt.max_finite else math.copysign(math.inf, result)


@pytest.mark.parametrize("name", list(FORMATS))
@SETTINGS
@given(st.floats(-1e6, 1e6, allow_nan=False), st.floats(-1.0, 1.0))
def test_correctly_rounded_matches_mpmath_and_has_error_zero(name, hi, frac):
    fmt = get_format(name)
    hi = float(fmt.round(np.array(hi)).astype(np.float64)) + frac * 2.0**-30  # near format numbers
    assume(math.isfinite(hi))
    lo = frac * abs(hi) * 2.0**-60
    exact = Exact(np.array([hi]), np.array([lo]))
    with mpmath.workprec(200):
        expected = _mp_round(mpmath.mpf(hi) + mpmath.mpf(lo), fmt)
    rounded = correctly_rounded(exact, fmt)
    assert rounded[0] == expected
    result = np.array([expected]).astype(fmt.np_dtype)
    assert rounding_error(result, exact, fmt)[0] == 0.0
    neighbour = fmt.round(np.array([np.nextafter(expected, np.inf)]).astype(np.float64) * (1 + 2.0**-fmt.precision))
    if neighbour[0] != result[0] and np.isfinite(neighbour.astype(np.float64)[0]):
        assert rounding_error(neighbour, exact, fmt)[0] > 0


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32"])
def test_overflow_to_inf_is_the_correct_rounding_not_an_error(name):
    """float16 65504 + 16 = 65520 exactly: halfway to 2**16, it rounds (to even) to inf."""
    fmt = get_format(name)
    top = fmt.max_finite
    half_ulp = 2.0 ** (fmt.emax - fmt.precision)
    x = np.array([top, half_ulp]).astype(fmt.np_dtype)
    with mpmath.workprec(200):
        assert _mp_round(mpmath.mpf(top) + mpmath.mpf(half_ulp), fmt) == math.inf
    j = judge(get_op("sum"), {"x": x}, np.array(np.inf).astype(fmt.np_dtype), fmt)
    assert j.verdict == WITHIN, j
    assert judge(get_op("sum"), {"x": x}, np.array(top).astype(fmt.np_dtype), fmt).verdict in (*ALARMS, UNDETERMINED)


@SETTINGS
@given(st.lists(st.floats(-1e4, 1e4, allow_nan=False), min_size=1, max_size=8), st.integers(0, 3))
def test_ulps_apart_is_symmetric_and_measured_at_the_larger_magnitude(values, steps):
    a = np.array(values, dtype=np.float32)
    b = a.copy()
    for _ in range(steps):
        b = np.nextafter(b, np.float32(np.inf))
    apart = ulps_apart(a, b)
    assert np.array_equal(apart, ulps_apart(b, a))
    assert np.all(apart <= steps) and np.all((apart == 0) == (a == b))
    # one side 0: a single step is one ulp of the other side, never 1e38 ulps
    assert ulps_apart(np.float32([0.0]), np.float32([1.0]))[0] == pytest.approx(2**23)


def test_judge_takes_any_inputs_and_outputs_against_mpmath():
    """A user's own vector and sum: the reason names the worst element, its exact value checks
    against mpmath, and the verdict tiers follow the size of the error."""
    op, fmt = get_op("sum"), get_format("float32")
    rng = np.random.default_rng(7)
    x = rng.standard_normal(4096).astype(np.float32)
    with mpmath.workprec(200):
        exact = mpmath.fsum(mpmath.mpf(float(v)) for v in x)
    good = np.array(np.sum(x))
    j = judge(op, {"x": x}, good, fmt)
    assert j.verdict == WITHIN and j.worst["exact"] == pytest.approx(float(exact), rel=1e-15)
    assert j.worst["error_ulp"] * abs(float(np.spacing(np.float32(exact)))) == pytest.approx(
        abs(float(good) - float(exact)), rel=1e-6
    )
    dropped = np.array(np.sum(x) - x[100])  # one term lost
    assert judge(op, {"x": x}, dropped, fmt).verdict in ALARMS


@pytest.mark.slow  # ~5 s: the typical tier's model of a large sum
def test_typical_tier_catches_what_the_worst_case_bound_lets_through():
    """The issue's bugs that passed as within rounding: a 1% bias, a lost term, a float16
    accumulator, a mean divided by n - 1; each inside the worst-case bound."""
    case = make_case("linear", "float32")  # the size: its bound flags >= 7,000 ulp
    ev = Evidence(case.op, case.inputs, case.fmt, case.exact)
    impl = case.op.impl("torch:F.linear")
    good = case.run(impl)
    assert ev.judge(good, impl).verdict == WITHIN
    biased = case.run(impl, inputs=dict(case.inputs, b=(case.inputs["b"] * np.float32(1.01)).astype(np.float32)))
    j = ev.judge(biased, impl)
    assert j.bound_ratio <= 1 and j.verdict == SUSPICIOUS and "flags errors >= " in j.reason
    fp16_acc = emulate(case.op.fp64, ev.inputs64, get_format("float16"), "nearest", store=case.fmt)
    assert ev.judge(case.fmt.round(fp16_acc.astype(np.float64)), impl).verdict in ALARMS

    mean = make_case("mean", "float32", 4096)
    x = mean.inputs["x"].astype(np.float64)
    wrong = np.array(math.fsum(x) / (x.size - 1)).astype(np.float32)
    j = judge(mean.op, mean.inputs, wrong, mean.fmt, mean.op.impl("numpy:np.mean"))
    assert j.bound_ratio <= 1 and j.verdict in ALARMS


def test_a_huge_sum_that_returns_zero_is_beyond():
    op, fmt = get_op("sum"), get_format("float32")
    x = np.full(1 << 20, 1.0, dtype=np.float32)
    assert judge(op, {"x": x}, np.float32(0.0), fmt).verdict == BEYOND


def test_elementwise_contracts_from_numpy_and_ieee():
    case = make_case("exp", "float32", 512)
    impl = case.op.impl("numpy:np.exp")
    ev = Evidence(case.op, case.inputs, case.fmt, case.exact)
    j = ev.judge(case.run(impl), impl)
    assert j.verdict == WITHIN and "3 ulp" in j.contract and "umath-validation-set-exp.csv" in j.contract
    rounded = correctly_rounded(case.exact, case.fmt).astype(np.float32)
    far = rounded.copy()
    for _ in range(4):
        far = np.nextafter(far, np.float32(np.inf))
    j = ev.judge(far, impl)
    assert j.verdict == BEYOND and "contract of 3 ulp" in j.reason
    sqrt = make_case("sqrt", "float64", 256)
    impl = sqrt.op.impl("numpy:np.sqrt")
    exact_sqrt = np.array([float(mpmath.sqrt(mpmath.mpf(float(v)))) for v in sqrt.inputs["x"]])  # 53-bit, rounded
    assert np.array_equal(sqrt.run(impl), exact_sqrt)
    off = exact_sqrt.copy()
    off[3] = np.nextafter(off[3], np.inf)
    j = judge(sqrt.op, sqrt.inputs, off, sqrt.fmt, impl)
    assert j.verdict == BEYOND and "IEEE 754" in j.reason and j.worst["index"] == [3]


def _wilkinson(n):
    """GEPP's worst case: growth 2**(n-1) (Higham, Section 9.4)."""
    a = np.eye(n) - np.tril(np.ones((n, n)), -1)
    a[:, -1] = 1
    return a


def test_gepp_on_wilkinsons_matrix_is_within_with_its_growth_in_the_bound():
    op, fmt = get_op("solve"), get_format("float64")
    a = _wilkinson(24)
    b = np.random.default_rng(1).standard_normal(24)
    x = np.linalg.solve(a, b)
    j = judge(op, {"a": a, "b": b}, x, fmt, op.impl("numpy:np.linalg.solve"))
    assert j.verdict == WITHIN and j.bound_ratio <= 1, j


def test_explicit_inverse_is_suspicious_where_it_loses_backward_stability():
    """b = A x0 with ||x0|| ~ 1 and ||A^-1|| = 1e6: the explicit inverse's residual grows with
    kappa, GEPP's does not (Higham, Section 14.1)."""
    case = make_case("solve", "float64", 32, "ill")
    a = case.inputs["a"]
    b = a @ np.random.default_rng(3).standard_normal(32)
    ev = Evidence(case.op, {"a": a, "b": b}, case.fmt)
    inv, good = case.op.impl("numpy:inv(a) @ b"), case.op.impl("numpy:np.linalg.solve")
    j = ev.judge(np.linalg.inv(a) @ b, inv)
    assert j.verdict in ALARMS and j.lapack_ratio > 30, j
    assert ev.judge(np.linalg.solve(a, b), good).verdict == WITHIN


def test_judgements_are_deterministic_and_their_tier_orders_the_verdicts():
    case = make_case("softmax", "float32", 64)
    impl = case.op.impl("torch:torch.softmax")
    out = case.run(impl)
    a = Evidence(case.op, case.inputs, case.fmt, case.exact).judge(out, impl)
    b = Evidence(case.op, case.inputs, case.fmt, case.exact).judge(out, impl)
    assert a == b and a.verdict == WITHIN and a.tier == VERDICTS.index(WITHIN) == 0


def test_tf32_mode_computes_every_float32_product_in_tf32_even_a_declared_formula():
    """On a GPU, `x @ W.T + b` under torch-cuda-tf32 showed 9e7 ulps judged as float32
    (suspicious) while F.linear beside it was judged as TF32: the mode, not the formula, decides."""
    from accuracy.catalog.registry import get_op
    from accuracy.core.dtypes import get_format
    from accuracy.judge.precision import TF32, compute_format

    formula = next(i for i in get_op("linear").impls if i.variant == "x @ W.T + b" and i.backend == "torch")
    assert formula.compute  # the formula declares that it rounds to storage between ops
    on_tf32 = dataclasses.replace(formula, backend="torch-cuda-tf32")
    assert compute_format(on_tf32, get_format("float32")) == TF32
    assert compute_format(on_tf32, get_format("bfloat16")).name == "bfloat16"
    assert compute_format(formula, get_format("float32")).name == "float32"
