"""Property tests for accuracy.judge.error_metrics (and the rounding it relies on) in every measured format.

Values are drawn as raw bit patterns of each format, so subnormals, signed zeros, the largest
finite number and (where asked) NaN/Inf all turn up; exact expectations use Fractions.
"""

from __future__ import annotations

import functools
import math
import warnings
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from exact_rounding import exact_round
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from accuracy.core.dtypes import FORMATS, get_format
from accuracy.judge.error_metrics import (
    ErrorSummary,
    bound_ratio,
    gamma,
    nonfinite_count,
    normwise_relative_error,
    relative_error,
    summarize,
    ulp,
    ulp_error,
)
from accuracy.judge.precision import TF32, format_named
from accuracy.judge.verdicts import OP_VERDICTS, Verdict, bound_verdict
from accuracy.reference.exact import Exact

FMT_NAMES = ("float16", "bfloat16", "float32", "float64")
# the profile's example count (tests/conftest.py): hypothesis' 100 in `make test`, fewer in the edit loop
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


# ---------------------------------------------------------------------------- helpers


def _uint(fmt):
    return np.dtype(UINT[fmt.np_dtype.itemsize])


def from_bits(fmt, bits: int):
    """The `fmt` scalar (0-d array) whose bit pattern is `bits`."""
    return np.array(bits, dtype=_uint(fmt)).view(fmt.np_dtype)


def to_bits(value) -> int:
    a = np.asarray(value)
    return int(a.view(np.dtype(UINT[a.dtype.itemsize])))


def next_up(fmt, value):
    """The next `fmt` number above a finite non-negative `value` (bit pattern + 1)."""
    assert float(value) >= 0
    return from_bits(fmt, to_bits(np.asarray(value, dtype=fmt.np_dtype)) + 1)


@functools.cache  # one strategy per format: a new one per example was validated anew each time (most of the CPU)
def values_of(fmt, *, finite=True, nonzero=False, normal=False):
    """Scalars of `fmt` drawn uniformly over bit patterns (so every binade is equally likely)."""
    n_bits = fmt.np_dtype.itemsize * 8

    def ok(v):
        f = float(v)
        if finite and not math.isfinite(f):
            return False
        if nonzero and f == 0:
            return False
        return not (normal and not 2.0**fmt.emin <= abs(f) <= fmt.max_finite)

    p = fmt.precision

    def compose(sign, e, m):  # exact in float64 for every format here
        return np.asarray(sign * (2 ** (p - 1) + m) * 2.0 ** (e - p + 1)).astype(fmt.np_dtype)

    normals = st.builds(
        compose, st.sampled_from([1, -1]), st.integers(fmt.emin, fmt.emax), st.integers(0, 2 ** (p - 1) - 1)
    )
    if normal:
        return normals
    subnormals = st.builds(
        lambda sign, m: np.asarray(sign * m * fmt.smallest_subnormal).astype(fmt.np_dtype),
        st.sampled_from([1, -1]),
        st.integers(0, 2 ** (p - 1) - 1),
    )
    raw = st.integers(0, 2**n_bits - 1).map(lambda b: from_bits(fmt, b))
    return st.one_of(normals, normals, subnormals, raw).filter(ok)


def as64(v) -> np.ndarray:
    return np.asarray(v).astype(np.float64)


# ---------------------------------------------------------------------------- ulp itself


@pytest.mark.parametrize("name", FMT_NAMES)
@SETTINGS
@given(data=st.data())
def test_ulp_is_the_spacing_above_each_finite_value(name, data):
    fmt = get_format(name)
    x = data.draw(values_of(fmt))
    assume(abs(float(x)) < fmt.max_finite)
    ax = np.abs(x)
    expected = float(next_up(fmt, ax)) - float(ax)  # exact in float64 for every format here
    assert float(ulp(as64(x), fmt)) == expected


@pytest.mark.parametrize("name", FMT_NAMES)
def test_ulp_of_format_landmarks(name):
    fmt = get_format(name)
    sub = fmt.smallest_subnormal
    assert ulp(0.0, fmt) == sub
    assert ulp(sub, fmt) == sub
    assert ulp(2.0**fmt.emin, fmt) == sub  # the smallest normal has the subnormal spacing
    assert ulp(1.0, fmt) == 2.0 ** (1 - fmt.precision) == 2 * fmt.u
    assert ulp(fmt.max_finite, fmt) == 2.0 ** (fmt.emax - fmt.precision + 1)


# ---------------------------------------------------------------------------- ulp_error


@pytest.mark.parametrize("name", FMT_NAMES)
@SETTINGS
@given(data=st.data())
def test_ulp_error_zero_iff_numerically_equal(name, data):
    fmt = get_format(name)
    x = data.draw(values_of(fmt))
    y = data.draw(st.one_of(values_of(fmt), st.just(x), st.just(-x)))
    err = float(ulp_error(x, as64(y)))
    assert (err == 0.0) == (float(x) == float(y))
    if float(x) != 0.0 and float(y) != 0.0:
        assert (err == 0.0) == (to_bits(x) == to_bits(y))
    # ulp_error is symmetric in which side is the reference when both are format values
    assert (float(ulp_error(y, as64(x))) == 0.0) == (err == 0.0)


@pytest.mark.parametrize("name", FMT_NAMES)
@SETTINGS
@given(data=st.data())
def test_ulp_error_nonzero_when_exact_has_a_tail(name, data):
    """A double-double reference hi + lo with lo != 0 is never 'equal' to hi."""
    fmt = get_format(name)
    x = data.draw(values_of(fmt, nonzero=True, normal=True))
    lo = float(x) * data.draw(st.sampled_from([2.0**-80, -(2.0**-70), 2.0**-60]))
    assume(lo != 0.0)  # near float64's smallest normal the tail itself underflows
    assert float(ulp_error(x, Exact(as64(x), np.asarray(lo)))) > 0.0


def _ulps_apart(fmt, a, b) -> Fraction:
    """|a - b| in ulps of `fmt` at b, as an exact rational (the definition ulp_error computes)."""
    return abs(Fraction(float(a)) - Fraction(float(b))) / Fraction(float(ulp(float(b), fmt)))


@pytest.mark.parametrize("name", FMT_NAMES)
@SETTINGS
@given(data=st.data())
def test_ulp_error_matches_exact_definition_for_nearby_values(name, data):
    fmt = get_format(name)
    x = data.draw(values_of(fmt))
    k = data.draw(st.integers(-4, 4))
    assume(abs(float(x)) < fmt.max_finite / 2)
    y = float(x) + k * float(ulp(as64(x), fmt))  # exact in float64
    got = float(ulp_error(x, np.float64(y)))
    assert got == float(_ulps_apart(fmt, x, y))


@pytest.mark.parametrize("name", FMT_NAMES)
@SETTINGS
@given(data=st.data())
def test_ulp_error_invariant_under_power_of_two_scaling(name, data):
    fmt = get_format(name)
    x = data.draw(values_of(fmt, nonzero=True, normal=True))
    # the reference: any float64 near x (not necessarily a value of fmt)
    rel = data.draw(st.floats(-1e-2, 1e-2, allow_nan=False))
    hi = float(x) * (1.0 + rel)
    k = data.draw(st.integers(-40, 40))
    lo_frac = data.draw(st.sampled_from([0.0, 2.0**-60, -(2.0**-58)]))
    lo = hi * lo_frac
    xs = float(x) * 2.0**k
    his = hi * 2.0**k
    normal = 2.0**fmt.emin
    for v in (float(x), hi, xs, his):
        assume(normal <= abs(v) <= fmt.max_finite)
    assume(lo == 0 or abs(lo * 2.0**k) >= 2.0**-1000)  # keep the tail out of float64 underflow
    xs_fmt = np.asarray(xs).astype(fmt.np_dtype)
    assert float(xs_fmt) == xs  # scaling a normal value by 2**k in range is exact
    e0 = ulp_error(x, Exact(np.asarray(hi), np.asarray(lo)))
    e1 = ulp_error(xs_fmt, Exact(np.asarray(his), np.asarray(lo * 2.0**k)))
    assert float(e0) == float(e1)


@pytest.mark.parametrize("name", FMT_NAMES)
def test_ulp_error_at_format_boundaries(name):
    fmt = get_format(name)
    mx = np.asarray(fmt.max_finite).astype(fmt.np_dtype)
    assert float(mx) == fmt.max_finite
    below_max = from_bits(fmt, to_bits(mx) - 1)
    # one step below the largest finite number is 1 ulp away from it, in both directions
    assert float(ulp_error(below_max, as64(mx))) == 1.0
    assert float(ulp_error(mx, as64(below_max))) == 1.0
    # the next value past max_finite (inf in fmt, still finite in float64 for narrow formats)
    assert not np.isfinite(float(next_up(fmt, mx)))
    if fmt.precision < 53:
        past = fmt.max_finite + float(ulp(fmt.max_finite, fmt))
        assert float(ulp_error(mx, np.float64(past))) == 1.0
    sub = np.asarray(fmt.smallest_subnormal).astype(fmt.np_dtype)
    assert float(sub) == fmt.smallest_subnormal > 0
    zero = np.zeros((), fmt.np_dtype)
    assert float(ulp_error(sub, np.float64(0.0))) == 1.0
    assert float(ulp_error(zero, as64(sub))) == 1.0
    assert float(ulp_error(-sub, np.float64(0.0))) == 1.0
    two_sub = np.asarray(2 * fmt.smallest_subnormal).astype(fmt.np_dtype)
    assert float(ulp_error(two_sub, as64(sub))) == 1.0
    assert float(ulp_error(sub, as64(two_sub))) == 1.0
    # +0 and -0 are numerically equal
    assert float(ulp_error(-zero, np.float64(0.0))) == 0.0


@functools.cache  # as values_of
def _near_midpoints(fmt):
    """float64 values at, and a few float64 ulps either side of, midpoints between fmt values."""

    @st.composite
    def strat(draw):
        v = float(fmt.round(np.float64(draw(values_of(fmt)))))  # TF32's values are float32's rounded
        assume(0 <= v < fmt.max_finite)
        mid = v + float(ulp(v, fmt)) / 2  # exact in float64 for the narrow formats
        steps = draw(st.integers(-3, 3))
        x = mid
        direction = math.inf if steps > 0 else -math.inf
        for _ in range(abs(steps)):
            x = math.nextafter(x, direction)
        return x * draw(st.sampled_from([1.0, -1.0]))

    return strat()


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32", TF32.name])
@SETTINGS
@given(data=st.data())
def test_round_is_correct_rounding_and_within_half_ulp(name, data):
    """fmt.round(x64) is the nearest-even value of fmt (checked with Fractions), so <= 0.5 ulp.

    Midpoints and their float64 neighbours are drawn on purpose: a cast that rounds twice
    (float64 -> float32 -> bfloat16) gets them wrong, and a cast to the storage alone leaves
    TF32 (float32 storage, 11 bits) unrounded.
    """
    fmt = format_named(name)
    x = data.draw(
        st.one_of(
            st.floats(-fmt.max_finite, fmt.max_finite, allow_nan=False),
            _near_midpoints(fmt),
        )
    )
    r = fmt.round(np.float64(x))
    assert r.dtype == fmt.np_dtype
    assert float(r) == exact_round(fmt, Fraction(x))
    assert abs(float(r) - x) <= float(ulp(x, fmt)) / 2


@SETTINGS
@given(hi=st.floats(-(2.0**1000), 2.0**1000, allow_nan=False, allow_subnormal=False), frac=st.floats(-0.5, 0.5))
def test_correctly_rounded_float64_is_within_half_ulp_of_double_double(hi, frac):
    fmt = get_format("float64")
    assume(abs(hi) >= 2.0**-900)
    lo = frac * float(ulp(hi, fmt))
    assume(hi + lo == hi)  # hi is the correctly rounded value of hi + lo
    exact = Exact(np.asarray(hi), np.asarray(lo))
    assert float(ulp_error(np.float64(hi), exact)) <= 0.5
    assert float(ulp_error(np.float64(hi), exact)) == abs(lo) / float(ulp(hi, fmt))
    # either neighbour is at least half an ulp away (below a power of two the spacing halves)
    if math.frexp(abs(hi))[0] == 0.5:
        return
    for nb in (math.nextafter(hi, math.inf), math.nextafter(hi, -math.inf)):
        assert float(ulp_error(np.float64(nb), exact)) >= 0.5


def test_round_bfloat16_known_double_rounding_case():
    """1 + 2**-8 + 2**-40 lies above the bfloat16 midpoint 1 + 2**-8: it must round up."""
    fmt = get_format("bfloat16")
    x = np.array([1 + 2.0**-8 + 2.0**-40, 1 + 2.0**-8, 1 + 3 * 2.0**-8, -(1 + 2.0**-8 + 2.0**-40)])
    got = fmt.round(x).astype(np.float64)
    assert got.tolist() == [1 + 2.0**-7, 1.0, 1 + 2.0**-6, -(1 + 2.0**-7)]
    assert fmt.round(x).dtype == ml_dtypes.bfloat16


# ---------------------------------------------------------------------------- NaN / Inf


SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.5, 1e-300, 1e300]


def _all_metrics(result, reference, bound):
    return {
        "ulp": ulp_error(result, reference),
        "rel": relative_error(result, reference),
        "norm": normwise_relative_error(result, reference),
        "ratio": bound_ratio(result, reference, bound),
        "nonfinite": nonfinite_count(result, reference),
        "summary": summarize(result, reference, reference, bound),
    }


@pytest.mark.parametrize("name", FMT_NAMES)
@SETTINGS
@given(data=st.data())
def test_metrics_never_raise_on_nan_inf(name, data):
    fmt = get_format(name)
    n = data.draw(st.integers(1, 6))
    with np.errstate(over="ignore"):  # 1e300 is inf in the narrow formats: a special too
        res = np.array([data.draw(st.sampled_from(SPECIALS)) for _ in range(n)]).astype(fmt.np_dtype)
    ref = np.array([data.draw(st.sampled_from(SPECIALS)) for _ in range(n)])
    bound = np.abs(ref) * 1e-3
    bound = np.where(np.isfinite(bound), bound, 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even a RuntimeWarning
        m = _all_metrics(res, ref, bound)
    r64 = res.astype(np.float64)
    both_nan = np.isnan(r64) & np.isnan(ref)
    equal = r64 == ref
    finite = np.isfinite(r64) & np.isfinite(ref)
    expected_nonfinite = int(np.count_nonzero(~(both_nan | equal | finite)))
    assert m["nonfinite"] == expected_nonfinite == m["summary"].nonfinite
    assert np.all(m["ulp"][both_nan | equal] == 0)
    assert np.all(m["rel"][both_nan | equal] == 0)
    for key in ("max_ulp", "mean_ulp", "p99_ulp", "max_abs", "max_rel_exact"):
        assert math.isfinite(getattr(m["summary"], key)), key
    if expected_nonfinite:
        assert bound_verdict(m["summary"].bound_ratio, m["summary"].nonfinite) == "beyond rounding"


def test_nan_vs_nan_is_zero_error():
    for name in FMT_NAMES:
        fmt = get_format(name)
        r = np.array([np.nan, 1.0]).astype(fmt.np_dtype)
        ref = np.array([np.nan, 1.0])
        assert ulp_error(r, ref).tolist() == [0.0, 0.0]
        assert relative_error(r, ref).tolist() == [0.0, 0.0]
        s = summarize(r, ref, ref, np.zeros(2))
        assert s.nonfinite == 0 and s.max_ulp == 0 and s.bound_ratio == 0.0
        assert bound_verdict(s.bound_ratio, s.nonfinite) == "within rounding"


def test_inf_vs_finite_is_counted_and_excluded_from_finite_stats():
    fmt = get_format("float32")
    res = np.array([1.0, 2.0, np.inf, 4.0], dtype=np.float32)
    ref = np.array([1.0, 2.0 + 2.0**-22, 3.0, 4.0])  # element 1 is 1 float32 ulp off
    bound = np.full(4, 2.0**-21)
    s = summarize(res, ref, ref, bound)
    assert s.nonfinite == 1
    assert s.max_ulp == 1.0  # the inf is not in the finite statistics
    assert s.mean_ulp == pytest.approx(1.0 / 3.0)
    assert s.max_abs == 2.0**-22
    assert s.bound_ratio == 0.5
    assert bound_verdict(s.bound_ratio, s.nonfinite) == "beyond rounding"
    assert math.isinf(ulp_error(res, ref)[2])
    # a finite result where the reference is infinite counts too
    assert nonfinite_count(np.array([1.0], np.float32), np.array([np.inf])) == 1
    # equal infinities agree; opposite infinities do not
    assert nonfinite_count(np.array([np.inf, -np.inf], np.float16), np.array([np.inf, np.inf])) == 1
    assert fmt.name == "float32"


def test_all_nonfinite_result_gives_zero_stats_not_crash():
    res = np.array([np.inf, np.nan], dtype=np.float16)
    ref = np.array([1.0, 2.0])
    s = summarize(res, ref, ref, np.ones(2))
    assert s.nonfinite == 2
    assert s.max_ulp == s.mean_ulp == s.p99_ulp == s.max_abs == 0.0
    assert s.bound_ratio == 0.0


# ---------------------------------------------------------------------------- bound_ratio


@SETTINGS
@given(data=st.data())
def test_bound_ratio_at_most_one_iff_error_within_bound(data):
    """With errors exactly representable, bound_ratio <= 1 iff every |err| <= bound."""
    fmt = get_format("float32")
    n = data.draw(st.integers(1, 5))
    res, his, bounds, errs = [], [], [], []
    for _ in range(n):
        x = data.draw(values_of(fmt, normal=True))
        assume(abs(float(x)) < 2.0**100)
        k = data.draw(st.integers(-8, 8))
        u = float(ulp(as64(x), fmt))
        hi = float(x) - k * u  # exact in float64, so result - hi == k*u exactly
        err = abs(k * u)
        choice = data.draw(st.sampled_from(["equal", "below", "above", "zero", "random"]))
        if choice == "equal":
            b = err
        elif choice == "below":
            b = math.nextafter(err, 0.0)
        elif choice == "above":
            b = math.nextafter(err, math.inf)
        elif choice == "zero":
            b = 0.0
        else:
            b = data.draw(st.floats(0.0, 10 * u + 1e-30, allow_nan=False))
        res.append(float(x))
        his.append(hi)
        bounds.append(b)
        errs.append(err)
    res = np.array(res, dtype=np.float32)
    ratio = bound_ratio(res, np.array(his), np.array(bounds))
    within = all(e <= b for e, b in zip(errs, bounds, strict=False))
    assert (ratio <= 1.0) == within
    if within:
        assert ratio == max((e / b if e else 0.0) for e, b in zip(errs, bounds, strict=False))
    s = summarize(res, np.array(his), np.array(his), np.array(bounds))
    assert (bound_verdict(s.bound_ratio, s.nonfinite) == "within rounding") == within


def test_bound_ratio_exactly_at_bound_is_one():
    res = np.array([1.0 + 2.0**-23], dtype=np.float32)
    assert bound_ratio(res, np.array([1.0]), np.array([2.0**-23])) == 1.0
    assert bound_ratio(res, np.array([1.0]), np.array([2.0**-24])) == 2.0
    assert bound_ratio(np.array([1.0], np.float32), np.array([1.0]), np.array([0.0])) == 0.0


@pytest.mark.parametrize("name,n", [("float16", 2048), ("bfloat16", 256), ("float32", 2**24), ("float64", 2**53)])
def test_vacuous_bound_gives_nan_and_no_bound_verdict(name, n):
    fmt = get_format(name)
    g = gamma(n, fmt.u)
    assert g == math.inf
    x = np.array([1.0, 2.0, 0.0])
    res = (x * 1.5).astype(fmt.np_dtype)
    with np.errstate(invalid="ignore"):
        bound = g * np.abs(x)  # inf * 0 is NaN: still vacuous
    ratio = bound_ratio(res, x, bound)
    assert math.isnan(ratio)
    s = summarize(res, x, x, bound)
    assert math.isnan(s.bound_ratio)
    assert bound_verdict(s.bound_ratio, s.nonfinite) == "undetermined"
    # one below the threshold is a real (huge) bound
    assert math.isfinite(gamma(n - 1, fmt.u))


# ---------------------------------------------------------------------------- relative errors, gamma


def test_relative_error_conventions():
    res = np.array([0.0, 1.0, 0.0, 3.0, -0.0], dtype=np.float64)
    ref = np.array([0.0, 0.0, 2.0, 2.0, 0.0])
    rel = relative_error(res, ref)
    assert rel[0] == 0.0  # 0/0
    assert rel[1] == math.inf  # x/0
    assert rel[2] == 1.0
    assert rel[3] == 0.5
    assert rel[4] == 0.0
    assert normwise_relative_error(np.zeros(3), np.zeros(3)) == 0.0
    assert normwise_relative_error(np.ones(2), np.zeros(2)) == math.inf
    assert normwise_relative_error(np.array([3.0, 4.0]), np.array([3.0, 4.0 + 5e-3])) == pytest.approx(
        5e-3 / math.hypot(3, 4 + 5e-3), rel=1e-12
    )


@pytest.mark.parametrize("magnitude", [1e-300, 1e-200, 1.0, 1e200, 1e300])
def test_normwise_relative_error_does_not_over_or_underflow(magnitude):
    """The 2-norm squares its entries: unscaled, 1e300 overflows and 1e-300 underflows."""
    ref = np.array([magnitude, -magnitude / 2, 0.0])
    res = ref * (1 + 2.0**-40)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = normwise_relative_error(res, ref)
    assert got == pytest.approx(2.0**-40, rel=1e-6)


def test_relative_error_uses_the_double_double_tail():
    r = np.array([1.0])
    e = Exact(np.array([1.0]), np.array([2.0**-70]))
    assert relative_error(r, e)[0] == 2.0**-70
    assert relative_error(r, np.array([1.0]))[0] == 0.0


def test_gamma():
    u = 2.0**-53
    assert gamma(0, u) == 0.0
    assert gamma(1, u) == u / (1 - u)
    assert gamma(10, 2.0**-11) == pytest.approx(10 * 2.0**-11 / (1 - 10 * 2.0**-11), rel=1e-15)
    assert gamma(1000, u) == pytest.approx(1000 * u, rel=1e-10)  # first order for n u << 1
    assert gamma(2047, 2.0**-11) == 2047.0
    assert gamma(2048, 2.0**-11) == math.inf
    assert gamma(5000, 2.0**-11) == math.inf
    values = [gamma(n, 2.0**-8) for n in range(256)]
    assert values == sorted(values) and len(set(values)) == len(values)
    for name in FMT_NAMES:
        fmt = FORMATS[name]
        assert fmt.u == 2.0**-fmt.precision


def test_error_summary_dict_roundtrip_and_bound_only_verdicts():
    s = ErrorSummary(1, 0.5, 1, 1e-7, 1e-7, 1e-7, 1e-7, 0.25, 0)
    d = s.as_dict()
    assert list(d) == [
        "max_ulp",
        "mean_ulp",
        "p99_ulp",
        "max_abs",
        "max_rel_exact",
        "max_rel_fp64",
        "normwise_rel",
        "bound_ratio",
        "nonfinite",
    ]
    assert ErrorSummary(**d) == s
    cases = [(0.25, 0), (1.0, 0), (1.0000001, 0), (float("nan"), 0), (None, 0), (0.25, 3)]
    assert [bound_verdict(ratio, nonfinite) for ratio, nonfinite in cases] == [
        "within rounding",
        "within rounding",  # error == bound is still a proof
        "beyond rounding",
        "undetermined",  # a vacuous bound
        "undetermined",  # no bound ratio recorded
        "beyond rounding",  # a non-finite result
    ]


def test_verdict_is_the_words_users_read():
    """One verdict type: it prints, compares, is saved in JSON and numbered as the asv tier."""
    import json

    words = ["within rounding", "suspicious", "beyond rounding", "undetermined", "runtime limit"]
    words.append("within quantization noise")
    assert [str(v) for v in Verdict] == words
    assert [v.tier for v in Verdict] == [0, 1, 2, 3, 4, 5]
    assert [Verdict.of_tier(t) for t in (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)] == list(Verdict)
    # an op's output (and its asv track) gets one of the first four; a model unit may get the fifth or sixth
    assert [str(v) for v in OP_VERDICTS] == words[:4]
    assert json.dumps({"v": Verdict.BEYOND}) == '{"v": "beyond rounding"}'
    assert f"{Verdict.SUSPICIOUS}" == "suspicious" and Verdict("undetermined") is Verdict.UNDETERMINED
