"""Exact values as double-double pairs, and the error-free algorithms that produce them.

A float64 alone cannot measure a float64 result's error in ulps, so an exact reference is kept
as hi + lo (|lo| <= ulp(hi)/2): accurate to about 2**-106 relative, far below any target's ulp.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import mpmath
import numpy as np

MP_PRECISION_BITS = 200  # working precision for mpmath references: ample for double-double

# The error-free transformations work on float64 scalars and arrays alike.
Real = TypeVar("Real", float, np.ndarray)


@dataclass(frozen=True)
class Exact:
    """An exact (to ~2**-106 relative) reference value per output element: hi + lo."""

    hi: np.ndarray
    lo: np.ndarray

    @classmethod
    def from_float64(cls, values: Any) -> Exact:
        hi = np.asarray(values, dtype=np.float64)
        return cls(hi, np.zeros_like(hi))

    @classmethod
    def from_mpf(cls, values: Sequence[Any], shape: tuple[int, ...]) -> Exact:
        """Split arbitrary-precision values into double-double pairs."""
        hi = np.empty(len(values))
        lo = np.empty(len(values))
        for i, v in enumerate(values):
            h = float(v)
            hi[i] = h
            lo[i] = float(v - h) if math.isfinite(h) else 0.0
        return cls(hi.reshape(shape), lo.reshape(shape))

    @property
    def shape(self) -> tuple[int, ...]:
        return self.hi.shape

    def map(self, fn: Callable[[np.ndarray], np.ndarray]) -> Exact:
        """The same values rearranged: `fn` (a reshape, transpose, ...) applied to hi and lo alike."""
        return Exact(fn(self.hi), fn(self.lo))


def two_sum(a: Real, b: Real) -> tuple[Real, Real]:
    """Knuth's TwoSum: s + e == a + b exactly."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a: Real) -> tuple[Real, Real]:
    """Veltkamp's split of a float64 into two 26-bit halves (for TwoProduct without FMA)."""
    c = 134217729.0 * a  # 2**27 + 1
    hi = c - (c - a)
    return hi, a - hi


def two_prod(a: Real, b: Real) -> tuple[Real, Real]:
    """Dekker's TwoProduct: p + e == a * b exactly (barring over/underflow)."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, al * bl - (((p - ah * bh) - al * bh) - ah * bl)


def dot2_matmul(a: np.ndarray, b: np.ndarray) -> Exact:
    """A @ B by Ogita-Rump-Oishi Dot2, vectorised over output elements.

    The pair (s, c) carries the sum of exact products with error <= gamma_k**2 |A||B|,
    i.e. about u**2 relative: exact to far below float64's ulp for well-conditioned data.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    s = np.zeros(a.shape[:-1] + b.shape[-1:])
    c = np.zeros_like(s)
    for i in range(a.shape[-1]):
        p, e = two_prod(a[..., i : i + 1], b[..., i : i + 1, :])
        s, q = two_sum(s, p)
        c += q + e
    hi = s + c
    return Exact(hi, c - (hi - s))


def fsum_rows(x: np.ndarray) -> Exact:
    """Correctly rounded sums along the last axis (math.fsum), with the exact remainder as lo."""
    x = np.asarray(x, dtype=np.float64)
    rows = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    hi = np.array([math.fsum(r) for r in rows])
    lo = np.array([math.fsum(np.append(r, -h)) if math.isfinite(h) else 0.0 for r, h in zip(rows, hi, strict=False)])
    return Exact(hi.reshape(x.shape[:-1]), lo.reshape(x.shape[:-1]))


def mp_rows(fn: Callable[..., Sequence[Any]], *arrays: np.ndarray) -> Exact:
    """Apply `fn(list_of_mpf_rows...) -> list of mpf` row by row in 200-bit arithmetic.

    For composite ops (softmax, layer_norm, var) whose exact value has no cheap error-free form.
    """
    as64 = [np.asarray(a, dtype=np.float64) for a in arrays]
    first = as64[0]
    rows = [a.reshape(-1, a.shape[-1]) for a in as64]
    out: list[Any] = []
    with mpmath.workprec(MP_PRECISION_BITS):
        for parts in zip(*rows, strict=False):
            out.extend(fn(*[[mpmath.mpf(float(v)) for v in p] for p in parts]))
    per_row = len(out) // rows[0].shape[0]
    shape = first.shape if per_row == first.shape[-1] else first.shape[:-1]
    return Exact.from_mpf(out, shape)


def mp_map(fn: Callable[[Any], Any], x: np.ndarray) -> Exact:
    """Apply a scalar mpmath function elementwise in 200-bit arithmetic."""
    x = np.asarray(x, dtype=np.float64)
    with mpmath.workprec(MP_PRECISION_BITS):
        values = [fn(mpmath.mpf(float(v))) for v in x.ravel()]
    return Exact.from_mpf(values, x.shape)
