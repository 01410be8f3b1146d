"""Correctly rounded elementwise references, fast: evaluate in a wider format, go to mpmath only
where the wide value lies too close to a rounding boundary of the target to decide.

Decision rule (why a fast value is trusted). Let w be the wide evaluation of f(x) and E a bound
on |w - f(x)|. If no rounding boundary of the target (a midpoint between two neighbours) lies
within E of w, then f(x) and w round to the same target number, so round(w) is the correctly
rounded result. Every element where that cannot be shown is recomputed in 200-bit mpmath.

- float16 / bfloat16 / float32 targets: w = the op's float64 function, E = 64 float64 ulps.
  numpy's own validation data gives at most 2 float64 ulps for its transcendental functions
  (numpy/_core/tests/data/umath-validation-set-*.csv); glibc's documented float64 maxima are
  within that too. The 32x slack covers a composite formula of a few such steps.
- float64 targets: w = the same function in x87 extended precision (numpy `longdouble`, 64-bit
  significand), E = 16 long-double ulps = 2**-59 |w|; glibc's measured maxima for x86 long double
  (libm-test-ulps) are at most a few ulps. A function without a longdouble loop (scipy.special)
  goes to mpmath outright. The double-double lo carries w's extra 11 bits: ulp readings of a
  float64 result are off by at most E/ulp = 2**-7 ulp (about 2**-11 at glibc's usual error), and
  correct rounding is decided exactly.

The narrow path works on the bits of w: with d = 53 - p dropped bits, w is within M float64
ulps of a midpoint of the p-bit target iff its low d bits lie within M of 2**(d-1). Values
outside the target's normal range (subnormal, overflow) take the generic distance test.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from accuracy.dtypes import FloatFormat
from accuracy.exact import Exact, mp_map
from accuracy.metrics import ulp

FP64_ERROR_ULPS = 64  # E for the narrow targets, in float64 ulps
LONGDOUBLE_ERROR = 16 * 2.0**-63  # E for float64 targets, relative to |w|
PARALLEL_CHUNK = 1 << 18  # elements per thread task: numpy's ufuncs release the GIL
_THREADS = max(1, min(4, os.cpu_count() or 1))


def correctly_rounded(np_fn, mp_fn, x: np.ndarray, fmt: FloatFormat) -> Exact:
    """The exact value of f(x), good enough to round correctly to `fmt` (see the module doc)."""
    x = np.asarray(x, dtype=np.float64)
    if fmt.precision >= 53:
        return _float64_target(np_fn, mp_fn, x)
    hi = np.empty_like(x)
    flat_x, flat_hi = x.reshape(-1), hi.reshape(-1)
    starts = range(0, flat_x.size, PARALLEL_CHUNK)

    def part(start):
        stop = start + PARALLEL_CHUNK
        flat_hi[start:stop] = _narrow_target(np_fn, mp_fn, flat_x[start:stop], fmt)

    if len(starts) > 1:
        with ThreadPoolExecutor(_THREADS) as pool:
            list(pool.map(part, starts))
    else:
        for start in starts:
            part(start)
    return Exact(hi, np.zeros_like(hi))


def _narrow_target(np_fn, mp_fn, x: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """float64 values that round to the correctly rounded `fmt` result of f(x)."""
    with np.errstate(all="ignore"):
        v = np.asarray(np_fn(x), dtype=np.float64)
    bits = v.view(np.uint64)
    drop = 53 - fmt.precision
    window = np.uint64(2 * FP64_ERROR_ULPS)
    # low d bits in [2**(d-1) - M, 2**(d-1) + M]  <=>  (bits + M - 2**(d-1)) mod 2**d <= 2M
    offset = np.uint64((FP64_ERROR_ULPS - (1 << (drop - 1))) % (1 << drop))
    near_midpoint = ((bits + offset) & np.uint64((1 << drop) - 1)) <= window
    # |v| in the target's normal range [2**emin, max_finite], as an unsigned range test on bits
    low_edge = np.float64(2.0**fmt.emin).view(np.uint64)
    span = np.float64(fmt.max_finite).view(np.uint64) - low_edge
    outside = ((bits & np.uint64(0x7FFF_FFFF_FFFF_FFFF)) - low_edge) > span
    slow = near_midpoint | outside
    if slow.any():
        idx = np.flatnonzero(slow)
        v[idx] = _generic(mp_fn, x[idx], v[idx], fmt)
    return v


def _generic(mp_fn, x: np.ndarray, v: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """The distance test in target ulps, for any value; mpmath where it cannot decide.

    Non-finite float64 values are kept: NaN is a domain error in every format, and a float64
    overflow is an overflow of every narrower format too.
    """
    with np.errstate(all="ignore"):
        nearest = fmt.round(v).astype(np.float64)
        distance = np.abs(v - nearest) / ulp(v, fmt)  # in target ulps, 0 .. 0.5
    margin = FP64_ERROR_ULPS * 2.0 ** (fmt.precision - 53)
    finite = np.isfinite(v)
    # beyond the largest finite number the one boundary left is the overflow threshold
    beyond = finite & (np.abs(v) > fmt.max_finite)
    threshold = (2.0 - 2.0 ** -fmt.precision) * 2.0**fmt.emax
    near_threshold = np.abs(np.abs(v) - threshold) <= FP64_ERROR_ULPS * 2.0**-52 * np.abs(v)
    risky = np.where(beyond, near_threshold, finite & (0.5 - distance <= margin))
    if risky.any():
        v = v.copy()
        v[risky] = mp_map(mp_fn, x[risky]).hi
    return v


def _float64_target(np_fn, mp_fn, x: np.ndarray) -> Exact:
    """hi = correctly rounded f(x), lo = the rest, from an x87 long-double evaluation."""
    with np.errstate(all="ignore"):
        try:
            w = np_fn(x.astype(np.longdouble))
        except TypeError:  # no longdouble loop
            w = None
    if not (isinstance(w, np.ndarray) and w.dtype == np.longdouble and w.shape == x.shape):
        return mp_map(mp_fn, x)
    with np.errstate(all="ignore"):
        hi = w.astype(np.float64)
        lo = (w - hi.astype(np.longdouble)).astype(np.float64)  # exact in long double
        # half the gap to hi's neighbour on lo's side: the distance from hi to the midpoint
        half_gap = np.abs(np.nextafter(hi, np.copysign(np.inf, lo)) - hi) / 2
        decided = (half_gap - np.abs(lo)) > LONGDOUBLE_ERROR * np.abs(hi)
        # subnormal results have a coarser grid than the relative bound assumes
        decided &= np.abs(hi) >= np.finfo(np.float64).tiny * 2.0**12
    exact = ~np.isfinite(hi) & np.isnan(hi)  # NaN: a domain error, exact in any format
    slow = ~(decided | exact)
    lo = np.where(exact, 0.0, lo)
    if slow.any():
        fixed = mp_map(mp_fn, x[slow])
        hi[slow], lo[slow] = fixed.hi, fixed.lo
    return Exact(hi, lo)
