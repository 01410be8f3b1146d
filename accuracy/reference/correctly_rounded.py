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
  Where numpy's float64 function is glibc's scalar code (sin, cos, tanh, expm1, log1p on AVX2:
  20-30 ns an element), w comes from torch's float64 twin instead (TORCH_TWINS): SLEEF's u10
  kernels on AVX2/AVX-512, documented at 1.0 ulp (sin and cos for |x| <= 1e299, beyond any
  float32), with glibc's scalar function on the last few elements of a call and on CPUs without
  vector kernels. Both are inside the same E; tests/judge/test_fast_references.py measures each twin
  against mpmath.
- float64 targets: w = the same function in x87 extended precision (numpy `longdouble`, 64-bit
  significand), E = 16 long-double ulps = 2**-59 |w|; glibc's measured maxima for x86 long double
  (libm-test-ulps) are at most a few ulps. A function without a longdouble loop (scipy.special)
  goes to mpmath outright. The double-double lo carries w's extra 11 bits: ulp readings of a
  float64 result are off by at most E/ulp = 2**-7 ulp (about 2**-11 at glibc's usual error), and
  correct rounding is decided exactly.

The narrow path decides on the bits of w alone, six integer passes over arrays that stay in
cache: with d = 53 - p dropped bits, w is within M float64 ulps of a midpoint of the p-bit target
iff its low d bits lie within M of 2**(d-1) (the M-ulp window never reaches a power of two, where
the float64 spacing changes, as midpoints lie 2**(d-1) ulps from any). Outside the target's
normal range: |w| < 2**(emin-p-1) rounds to zero and |w| >= 2**(emax+1) to infinity (or is NaN)
with a relative margin of 2**-(p+1) >> E; the two edge ranges in between, near subnormal
midpoints and the overflow threshold, take the generic distance test in target ulps. A value
mpmath decides keeps its lo, so a value within 2**-53 of a midpoint still rounds correctly.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from accuracy.core.dtypes import FloatFormat, ulp
from accuracy.reference.exact import Exact, mp_map

FP64_ERROR_ULPS = 64  # E for the narrow targets, in float64 ulps
LONGDOUBLE_ERROR = 16 * 2.0**-63  # E for float64 targets, relative to |w|
NARROW_CHUNK = 1 << 17  # elements per step of the decision rule: 1.3 MB of working arrays stay in L2+L3;
# smaller steps pay more per-call overhead than they save (2**15: tanh 121 M/s, 2**17: 162 M/s here)
_ABS = np.uint64(0x7FFF_FFFF_FFFF_FFFF)


def cores() -> int:
    """Cores this process may use: numpy's ufuncs release the GIL, so chunks run in parallel."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def correctly_rounded(np_fn: Callable[..., Any], mp_fn: Callable[[Any], Any], x: np.ndarray, fmt: FloatFormat) -> Exact:
    """The exact value of f(x), good enough to round correctly to `fmt` (see the module doc).

    Narrow targets run on every core. The float64 values: a torch twin in one call over the
    whole array (torch spreads it over its own threads), a numpy function per part in our
    threads. The decision rule: each thread over one contiguous part in cache-sized steps with
    its own scratch arrays (a pool task or a fresh temporary per step costs more than the step).
    Called from a worker thread (a scan's), everything runs in that thread, as the caller keeps
    the cores busy already. No value depends on the thread count (for the twins, a test checks it).
    """
    x = np.asarray(x, dtype=np.float64)
    if fmt.precision >= 53:
        return _float64_target(np_fn, mp_fn, x)
    hi, lo = np.empty(x.shape), np.zeros(x.shape)  # zeros: calloc'd pages, touched only where mpmath writes
    flat_x, flat_hi, flat_lo = x.reshape(-1), hi.reshape(-1), lo.reshape(-1)
    wide = wide_evaluator(np_fn)
    steps = -(-x.size // NARROW_CHUNK)
    threads = max(1, min(cores(), steps)) if threading.current_thread() is threading.main_thread() else 1
    bounds = [NARROW_CHUNK * (steps * i // threads) for i in range(threads + 1)]
    with np.errstate(all="ignore"):
        if wide.own_threads:
            wide.evaluate(flat_x, flat_hi)

    def part(start: int, stop: int) -> None:
        stop = min(stop, x.size)
        with np.errstate(all="ignore"):
            if not wide.own_threads:
                wide.evaluate(flat_x[start:stop], flat_hi[start:stop])
        scratch = _Scratch(min(NARROW_CHUNK, x.size))
        for begin in range(start, stop, NARROW_CHUNK):
            end = min(begin + NARROW_CHUNK, stop)
            _decide(mp_fn, fmt, flat_x[begin:end], flat_hi[begin:end], flat_lo[begin:end], scratch)

    if threads > 1:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(part, bounds[:-1], bounds[1:]))
    else:
        part(0, x.size)
    return Exact(hi, lo)


TORCH_TWINS = ("exp", "log", "tanh", "sin", "cos", "expm1", "log1p")  # faster than numpy's here (docs/references.md)


@dataclass(frozen=True)
class WideEvaluator:
    """The float64 w of the narrow path: `evaluate(x, out)`; `own_threads` if it spreads one
    call over every core itself (torch's intra-op threads) rather than running in the caller's."""

    evaluate: Callable[[np.ndarray, np.ndarray], None]
    own_threads: bool


@functools.cache
def wide_evaluator(np_fn: Callable[..., Any]) -> WideEvaluator:
    """torch's vectorised twin of a numpy ufunc named in TORCH_TWINS (module doc), else `np_fn`."""
    name = getattr(np_fn, "__name__", "")
    if isinstance(np_fn, np.ufunc) and name in TORCH_TWINS and getattr(np, name) is np_fn:
        import torch  # a core dependency; imported here so the registry loads without it

        twin = getattr(torch, name)

        def evaluate_twin(x: np.ndarray, out: np.ndarray) -> None:
            twin(torch.from_numpy(x if x.flags.writeable else x.copy()), out=torch.from_numpy(out))
            # one NaN: the sign and payload a NaN comes out with depend on which libm path took the
            # element (torch's SLEEF loop or, where the mkl wheel loaded first, MKL's VML)
            np.copyto(out, np.nan, where=np.isnan(out))

        return WideEvaluator(evaluate_twin, own_threads=True)
    if isinstance(np_fn, np.ufunc):
        return WideEvaluator(lambda x, out: np_fn(x, out=out), own_threads=False)

    def evaluate(x: np.ndarray, out: np.ndarray) -> None:
        out[...] = np_fn(x)

    return WideEvaluator(evaluate, own_threads=False)


class _Scratch:
    """One thread's working arrays for the bit rule, reused step after step."""

    def __init__(self, size: int):
        self.bits = np.empty(size, dtype=np.uint64)
        self.slow = np.empty(size, dtype=bool)
        self.flag = np.empty(size, dtype=bool)

    def view(self, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.bits[:size], self.slow[:size], self.flag[:size]


@dataclass(frozen=True)
class _BitRule:
    """The narrow decision rule of one format as constants on float64 bit patterns (module doc)."""

    offset: np.uint64  # low d bits + offset wrap to 0 .. 2M exactly within M ulps of 2**(d-1)
    mask: np.uint64
    window: np.uint64
    normal_low: np.uint64  # bits of 2**emin
    normal_span: np.uint64  # bits of max_finite - bits of 2**emin
    below_normal: np.uint64  # a - normal_low wrapped: at least this for 2**(emin-p-1) <= |v| < 2**emin
    beyond: np.uint64  # bits of max_finite + 1 - bits of 2**emin
    beyond_span: np.uint64  # max_finite < |v| < 2**(emax+1)


@functools.cache
def _bit_rule(fmt: FloatFormat) -> _BitRule:
    def bits(v: float) -> int:
        return int(np.float64(v).view(np.uint64))

    drop, m = 53 - fmt.precision, FP64_ERROR_ULPS
    low, top = bits(2.0**fmt.emin), bits(fmt.max_finite)
    return _BitRule(
        offset=np.uint64((m - (1 << (drop - 1))) % (1 << drop)),
        mask=np.uint64((1 << drop) - 1),
        window=np.uint64(2 * m),
        normal_low=np.uint64(low),
        normal_span=np.uint64(top - low),
        below_normal=np.uint64((bits(2.0 ** (fmt.emin - fmt.precision - 1)) - low) % (1 << 64)),
        beyond=np.uint64(top + 1 - low),
        beyond_span=np.uint64(bits(2.0 ** (fmt.emax + 1)) - top - 1),
    )


def undecided(bits: np.ndarray, fmt: FloatFormat, scratch: _Scratch | None = None) -> np.ndarray:
    """Which float64 values (as bit patterns) the bit rule cannot round to `fmt` on its own: those
    within FP64_ERROR_ULPS of a midpoint in fmt's normal range, and those in the two edge ranges
    [2**(emin-p-1), 2**emin) and (max_finite, 2**(emax+1)), which the distance test decides.
    Everything else rounds as the exact value does: below 2**(emin-p-1) to zero, from
    2**(emax+1) on (infinity and NaN included) to infinity or NaN, both with room to spare.

    The range tests are skipped when every magnitude lies in the normal range (the usual case):
    two reductions instead of five passes. The result is in `scratch`'s arrays when given.
    """
    rule = _bit_rule(fmt)
    t, slow, flag = (scratch or _Scratch(bits.size)).view(bits.size)
    np.add(bits, rule.offset, out=t)
    t &= rule.mask
    np.less_equal(t, rule.window, out=slow)
    np.bitwise_and(bits, _ABS, out=t)
    t -= rule.normal_low  # wraps below 2**emin: the normal range is t <= normal_span
    if bits.size and t.max() <= rule.normal_span:
        return slow
    np.less_equal(t, rule.normal_span, out=flag)
    slow &= flag
    np.greater_equal(t, rule.below_normal, out=flag)
    slow |= flag
    t -= rule.beyond
    np.less(t, rule.beyond_span, out=flag)
    slow |= flag
    return slow


def _decide(
    mp_fn: Callable[[Any], Any], fmt: FloatFormat, x: np.ndarray, hi: np.ndarray, lo: np.ndarray, scratch: _Scratch
) -> None:
    """Keep hi = w wherever it provably rounds as f(x) does; elsewhere put the distance test's
    (or mpmath's) hi and lo, lo nonzero only where mpmath decided."""
    slow = undecided(hi.view(np.uint64), fmt, scratch)
    if slow.any():
        idx = np.flatnonzero(slow)
        hi[idx], lo[idx] = _generic(mp_fn, x[idx], hi[idx], fmt)


def _generic(
    mp_fn: Callable[[Any], Any], x: np.ndarray, v: np.ndarray, fmt: FloatFormat
) -> tuple[np.ndarray, np.ndarray]:
    """The distance test in target ulps, for any value; mpmath where it cannot decide (hi, lo:
    a value on or a hair from a midpoint needs lo to break the tie).

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
    threshold = (2.0 - 2.0**-fmt.precision) * 2.0**fmt.emax
    near_threshold = np.abs(np.abs(v) - threshold) <= FP64_ERROR_ULPS * 2.0**-52 * np.abs(v)
    risky = np.where(beyond, near_threshold, finite & (0.5 - distance <= margin))
    lo = np.zeros_like(v)
    if risky.any():
        v = v.copy()
        fixed = mp_map(mp_fn, x[risky])
        v[risky], lo[risky] = fixed.hi, fixed.lo
    return v, lo


def _float64_target(np_fn: Callable[..., Any], mp_fn: Callable[[Any], Any], x: np.ndarray) -> Exact:
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
