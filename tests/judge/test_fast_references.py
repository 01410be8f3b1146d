"""The fast references against mpmath: correctly rounded elementwise values on random inputs and
on inputs whose value lies within 1e-3 ulp of a rounding midpoint (where a fast path that trusts
its wide value too far would round the wrong way), and the Ozaki exact GEMM against exact
rational arithmetic and against Dot2."""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest
from exact_rounding import exact_round
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.core.dtypes import get_format
from accuracy.judge.verdicts import correctly_rounded as round_exact
from accuracy.reference.correctly_rounded import (
    FP64_ERROR_ULPS,
    TORCH_TWINS,
    correctly_rounded,
    undecided,
    wide_evaluator,
)
from accuracy.reference.exact import dot2_matmul
from accuracy.reference.exact_gemm import exact_matmul, slice_bits

FUNCS = {
    "exp": (np.exp, mpmath.exp, (-80.0, 80.0)),
    "log": (np.log, mpmath.log, (1e-30, 1e30)),
    "tanh": (np.tanh, mpmath.tanh, (-12.0, 12.0)),
    "sin": (np.sin, mpmath.sin, (-1e4, 1e4)),
    "cos": (np.cos, mpmath.cos, (-1e4, 1e4)),
    "expm1": (np.expm1, mpmath.expm1, (-80.0, 80.0)),
    "log1p": (np.log1p, mpmath.log1p, (-0.99, 1e6)),  # -0.999 rounds to -1 in bfloat16: log1p = -inf
}
MIDPOINT_ULPS = 1e-3  # how close to a midpoint the hard inputs are
fmt32 = get_format("float32")


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
    spacing = np.abs(
        np.nextafter(nearest.astype(fmt.np_dtype), np.copysign(np.inf, wide - nearest).astype(fmt.np_dtype)).astype(
            np.longdouble
        )
        - nearest
    )
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
    for v, w in zip(x, want, strict=False):
        q = _mp_value(mp_fn, float(v))
        neighbour = float(np.nextafter(fmt.np_dtype.type(w), fmt.np_dtype.type(np.inf if q > Fraction(w) else -np.inf)))
        gap = abs(Fraction(neighbour) - Fraction(w))
        assert abs(abs(q - Fraction(w)) / gap - Fraction(1, 2)) < MIDPOINT_ULPS
    got = fmt.round(correctly_rounded(np_fn, mp_fn, x, fmt).hi)
    assert got.tobytes() == want.astype(fmt.np_dtype).tobytes()


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(sorted(FUNCS)),
    dtype=st.sampled_from(["float16", "bfloat16", "float32", "float64"]),
    u=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=16),
)
def test_random_inputs_round_correctly(name, dtype, u):
    np_fn, mp_fn, (lo, hi) = FUNCS[name]
    fmt = get_format(dtype)
    with np.errstate(over="ignore"):
        x = fmt.round(lo + (hi - lo) * np.array(u)).astype(np.float64)
    x = x[np.isfinite(x) & (x != 0)]  # the range ends round to 0 or inf in the narrow formats
    exact = correctly_rounded(np_fn, mp_fn, x, fmt)
    assert fmt.round(exact.hi).tobytes() == fmt.round(_mp_rounded(mp_fn, x, fmt)).tobytes()
    if dtype == "float64":  # hi + lo is f(x) to the long-double bound
        for v, high, low in zip(x, exact.hi, exact.lo, strict=False):
            err = abs(Fraction(high) + Fraction(low) - _mp_value(mp_fn, float(v)))
            assert err <= Fraction(2) ** -58 * abs(Fraction(high))


@pytest.mark.parametrize("name", TORCH_TWINS)
def test_torch_twins_err_within_their_documented_ulp(name):
    """The narrow references' float64 value for TORCH_TWINS comes from torch (SLEEF u10: at most
    1.0 ulp). Measured against 300-bit mpmath on random float32 inputs of the whole domain (huge
    sin and cos arguments, subnormals) and of [-10, 10], the bound holds, 64x inside the
    decision rule's FP64_ERROR_ULPS."""
    rng = np.random.Generator(np.random.PCG64(3))
    with np.errstate(invalid="ignore"):
        x = rng.integers(0, 1 << 32, 3000, dtype=np.uint64).astype(np.uint32).view(np.float32).astype(np.float64)
    x = np.concatenate([x, fmt32.round(rng.uniform(-10, 10, 1000)).astype(np.float64)])
    mp_fn = getattr(mpmath, name)
    with np.errstate(all="ignore"):
        x = x[np.isfinite(getattr(np, name)(x))]
    w = np.empty_like(x)
    wide_evaluator(getattr(np, name)).evaluate(x, w)
    torch = pytest.importorskip("torch")
    assert w.tobytes() == getattr(torch, name)(torch.from_numpy(x)).numpy().tobytes()  # torch's bits
    worst = 0.0
    with mpmath.workprec(300):
        for v, got in zip(x, w, strict=False):
            exact = mp_fn(mpmath.mpf(float(v)))
            if exact != 0:
                worst = max(worst, float(abs(mpmath.mpf(float(got)) - exact) / float(np.spacing(abs(float(exact))))))
    assert 0.4 < worst <= 1.0  # rounding errors were measured, none beyond SLEEF's bound
    assert x.size >= 1900  # half the random bit patterns are negative: log and log1p keep the rest


def test_functions_without_a_torch_twin_evaluate_with_numpy():
    x = np.linspace(1e-3, 1e3, 1001)
    for np_fn in (np.sqrt, lambda v: 1.0 / np.sqrt(v)):
        w = np.empty_like(x)
        wide = wide_evaluator(np_fn)
        wide.evaluate(x, w)
        assert w.tobytes() == np_fn(x).tobytes() and not wide.own_threads


@pytest.mark.parametrize("name", TORCH_TWINS)
def test_torch_twins_give_the_same_bits_whatever_the_threads_and_the_split(name):
    """A twin spreads one call over torch's threads, so its values must not depend on the thread
    count or on where a call starts and ends (vector kernels with scalar tails would): the
    references are then the same on every machine (refcache does not key on threads)."""
    torch = pytest.importorskip("torch")
    rng = np.random.Generator(np.random.PCG64(4))
    with np.errstate(invalid="ignore"):
        x = rng.integers(0, 1 << 32, 100_003, dtype=np.uint64).astype(np.uint32).view(np.float32).astype(np.float64)
    evaluate = wide_evaluator(getattr(np, name)).evaluate
    before = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            runs.append(np.empty_like(x))
            evaluate(x, runs[-1])
    finally:
        torch.set_num_threads(before)
    pieces = np.empty_like(x)
    for start in range(0, x.size, 999):  # calls that start and end off any vector boundary
        evaluate(x[start : start + 999], pieces[start : start + 999])
    assert runs[0].tobytes() == runs[1].tobytes() == pieces.tobytes()


NARROW = ["float16", "bfloat16", "float32"]


def _boundaries(fmt) -> list[float]:
    """Where the bit rule changes its mind: the edges of its ranges and the overflow threshold."""
    return [
        2.0 ** (fmt.emin - fmt.precision - 1),
        2.0 ** (fmt.emin - fmt.precision),
        2.0**fmt.emin,
        fmt.max_finite,
        (2.0 - 2.0**-fmt.precision) * 2.0**fmt.emax,
        2.0 ** (fmt.emax + 1),
    ]


@st.composite
def _hard_float64(draw, fmt):
    """A float64 a few ulps from a midpoint of fmt, from an edge of a range, or anywhere."""
    kind = draw(st.sampled_from(["midpoint", "edge", "any"]))
    if kind == "any":
        return draw(st.floats(-(2.0**1000), 2.0**1000))  # the error interval stays finite
    if kind == "edge":
        centre = draw(st.sampled_from(_boundaries(fmt)))
    else:
        low = draw(st.floats(fmt.smallest_subnormal, fmt.max_finite / 2))
        below = float(fmt.round(np.array([low]))[0])
        centre = (below + float(np.nextafter(fmt.np_dtype.type(below), fmt.np_dtype.type(np.inf)))) / 2
    v = np.float64(centre)
    for _ in range(abs(steps := draw(st.integers(-3 * FP64_ERROR_ULPS, 3 * FP64_ERROR_ULPS)))):
        v = np.nextafter(v, np.inf if steps > 0 else -np.inf)
    return float(v) * draw(st.sampled_from([1.0, -1.0]))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(NARROW))
def test_the_bit_rule_decides_only_values_whose_whole_error_interval_rounds_alike(data, dtype):
    """Not undecided => every value within FP64_ERROR_ULPS float64 ulps of v has v's rounding
    (rounding is monotone: the two ends of the interval suffice), by exact rational rounding."""
    fmt = get_format(dtype)
    v = data.draw(_hard_float64(fmt))
    if undecided(np.array([v]).view(np.uint64), fmt)[0]:
        return
    e = FP64_ERROR_ULPS * Fraction(np.spacing(abs(v)))
    assert exact_round(fmt, Fraction(v) - e) == exact_round(fmt, Fraction(v) + e)


@pytest.mark.parametrize("dtype", NARROW)
def test_the_bit_rule_sends_midpoints_on_and_leaves_representable_values(dtype):
    fmt = get_format(dtype)
    rng = np.random.Generator(np.random.PCG64(5))
    normal = rng.uniform(1.0, 2.0, 1000) * np.exp2(rng.integers(fmt.emin, fmt.emax, 1000)) * rng.choice([-1, 1], 1000)
    values = fmt.round(normal).astype(np.float64)
    up = np.nextafter(values.astype(fmt.np_dtype), fmt.np_dtype.type(np.inf)).astype(np.float64)
    midpoints = (values + up) / 2
    assert not undecided(values.view(np.uint64), fmt).any()
    assert undecided(midpoints.view(np.uint64), fmt).all()


def test_a_value_a_hair_above_a_midpoint_keeps_the_lo_that_breaks_the_tie():
    """f(x) = (1 + 2**-24) + 2**-80: its float64 is the float32 midpoint itself, which rounds to
    even (1.0); the exact value rounds up. mpmath's lo must survive to say so."""
    fmt, mid = get_format("float32"), 1.0 + 2.0**-24
    exact = correctly_rounded(
        lambda x: np.full_like(x, mid), lambda x: mpmath.mpf(mid) + mpmath.mpf(2) ** -80, np.array([0.5]), fmt
    )
    assert exact.hi[0] == mid and exact.lo[0] == 2.0**-80
    assert round_exact(exact, fmt)[0] == 1.0 + 2.0**-23


def test_float32_logs_whose_float64_value_is_a_midpoint_round_by_the_exact_value():
    """The 8 positive float32 x whose float64 log(x) is exactly a float32 midpoint (found by a
    scan of all of them): rounding that float64 to even would be wrong for 5 of them."""
    fmt = get_format("float32")
    x = (
        np.array(
            [0x1F116AB8, 0x3C413D3A, 0x41178FEB, 0x4C5D65A5, 0x4D604EBE, 0x65D890D3, 0x66A8C860, 0x6F31A8EC],
            dtype=np.uint32,
        )
        .view(np.float32)
        .astype(np.float64)
    )
    exact = correctly_rounded(np.log, mpmath.log, x, fmt)
    midpoint_rounding = fmt.round(exact.hi)
    want = _mp_rounded(mpmath.log, x, fmt).astype(np.float32)
    assert fmt.round(round_exact(exact, fmt)).tobytes() == want.tobytes()
    assert np.sum(midpoint_rounding != want) == 5


def _exact_product(a, b) -> list[list[Fraction]]:
    return [
        [
            sum((Fraction(a[i, k]) * Fraction(b[k, j]) for k in range(a.shape[1])), Fraction(0))
            for j in range(b.shape[1])
        ]
        for i in range(a.shape[0])
    ]


@settings(max_examples=30, deadline=None)
@given(
    m=st.integers(1, 5),
    k=st.integers(1, 7),
    n=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
    spread=st.integers(0, 200),
)
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


@pytest.mark.parametrize("dtype", NARROW)
def test_subnormal_results_and_the_rounding_to_zero_threshold_round_as_mpmath_says(dtype):
    """exp around log(smallest subnormal / 2), where results round to 0 or the smallest
    subnormal, and across the subnormal range: the bit rule's lower edge range."""
    fmt = get_format(dtype)
    to_zero, normal = np.log(fmt.smallest_subnormal / 2), np.log(2.0**fmt.emin)
    x = np.concatenate([to_zero + np.linspace(-0.05, 0.05, 41), np.linspace(to_zero, normal + 0.5, 41)])
    x = np.unique(fmt.round(x)).astype(np.float64)
    got = fmt.round(correctly_rounded(np.exp, mpmath.exp, x, fmt).hi)
    assert got.tobytes() == _mp_rounded(mpmath.exp, x, fmt).astype(fmt.np_dtype).tobytes()
    assert (got == 0).any() and ((got > 0) & (got < 2.0**fmt.emin)).any()
