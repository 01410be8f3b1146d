"""Error metrics: ULP error, relative errors and the ratio of the error to its rounding bound.

Every metric takes the op's result (in its own dtype) and a reference (float64 array or an
`Exact` double-double) and never raises on NaN/Inf: a non-finite result where the reference is
finite is counted on its own (`nonfinite`) and kept out of the finite statistics.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from accuracy.dtypes import FloatFormat, format_of
from accuracy.exact import Exact


def gamma(n: int, u: float) -> float:
    """Higham's gamma_n = n u / (1 - n u); infinite where the bound is vacuous (n u >= 1)."""
    nu = n * u
    return nu / (1.0 - nu) if nu < 1.0 else np.inf


def ulp(values, fmt: FloatFormat) -> np.ndarray:
    """The spacing of `fmt` at each value (subnormal spacing below the normal range)."""
    a = np.abs(np.asarray(values, dtype=np.float64))
    _, e = np.frexp(a)  # a = m * 2**e with 0.5 <= m < 1
    exponent = np.where(np.isfinite(a) & (a > 0), e - 1, fmt.emin)
    exponent = np.clip(exponent, fmt.emin, fmt.emax)
    return np.ldexp(1.0, exponent - (fmt.precision - 1))


def _split_reference(reference) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(reference, Exact):
        return reference.hi, reference.lo
    hi = np.asarray(reference, dtype=np.float64)
    return hi, np.zeros_like(hi)


def _signed_error(result: np.ndarray, reference) -> tuple[np.ndarray, np.ndarray]:
    """(result - reference) in float64 and a mask of elements whose error is finite-comparable.

    Equal values (equal infinities included) and NaN-vs-NaN count as error 0; any other pairing
    involving a non-finite value is 'not comparable' and gets an infinite error.
    """
    r = np.asarray(result).astype(np.float64)
    hi, lo = _split_reference(reference)
    r, hi, lo = np.broadcast_arrays(r, hi, lo)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = (r - hi) - lo
    finite = np.isfinite(r) & np.isfinite(hi)
    agree = ((r == hi) & (lo == 0)) | (np.isnan(r) & np.isnan(hi))
    diff = np.where(agree, 0.0, np.where(finite, diff, np.inf))
    return diff, finite | agree


def ulp_error(result: np.ndarray, exact) -> np.ndarray:
    """Fractional ULP error per element, in ulps of the result's dtype at the exact value.

    0 means equal, 0.5 is the most a correctly rounded result can be off; inf marks a
    non-finite result where the reference is finite (or vice versa).
    """
    fmt = format_of(np.asarray(result))
    diff, _ = _signed_error(result, exact)
    hi, _ = _split_reference(exact)
    with np.errstate(over="ignore"):  # e.g. float64 1.0 vs exact 0: 2**1074 ulps overflows to inf
        return np.abs(diff) / ulp(np.broadcast_to(hi, diff.shape), fmt)


def relative_error(result: np.ndarray, reference) -> np.ndarray:
    """|result - ref| / |ref| per element; 0/0 is 0 and x/0 is inf."""
    diff, _ = _signed_error(result, reference)
    hi, _ = _split_reference(reference)
    mag = np.abs(np.broadcast_to(hi, diff.shape))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rel = np.abs(diff) / mag
    return np.where(diff == 0, 0.0, rel)


def normwise_relative_error(result: np.ndarray, reference) -> float:
    """||result - ref||_2 / ||ref||_2 over finite-comparable elements."""
    diff, comparable = _signed_error(result, reference)
    hi, _ = _split_reference(reference)
    hi = np.broadcast_to(hi, diff.shape)
    ok = comparable & np.isfinite(diff)
    d = diff[ok]
    h = np.where(np.isfinite(hi), hi, 0.0)[ok]
    if not np.any(d):
        return 0.0
    # scale by a power of two first: the 2-norm squares, so it over/underflows beyond ~1e+-154
    scale = np.ldexp(1.0, int(np.frexp(max(np.max(np.abs(d)), np.max(np.abs(h), initial=0.0)))[1]))
    num = np.linalg.norm(d / scale)
    den = np.linalg.norm(h / scale)
    return float(num / den) if den > 0 else float("inf")


def bound_ratio(result: np.ndarray, exact, bound) -> float:
    """max |error| / bound over finite elements: <= 1 proves the error is within rounding.

    NaN where the bound is vacuous (gamma_n with n*u >= 1): no claim either way is provable.
    """
    diff, _ = _signed_error(result, exact)
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), diff.shape)
    if not np.all(np.isfinite(bound)):
        return float("nan")
    ok = np.isfinite(diff)
    if not ok.any():
        return 0.0
    err = np.abs(diff[ok])
    b = bound[ok]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.where(err == 0, 0.0, err / b)
    return float(np.max(ratio))


def nonfinite_count(result: np.ndarray, reference) -> int:
    """Elements that are NaN/Inf in the result but not equally so in the reference."""
    diff, _ = _signed_error(result, reference)
    return int(np.count_nonzero(np.isinf(diff)))


@dataclass(frozen=True)
class ErrorSummary:
    """One implementation's error on one input set, against the exact and fp64 references."""

    max_ulp: float
    mean_ulp: float
    p99_ulp: float
    max_abs: float
    max_rel_exact: float
    max_rel_fp64: float
    normwise_rel: float
    bound_ratio: float
    nonfinite: int

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def verdict(self) -> str:
        """'within rounding' is a proof (error <= bound); anything else says why not."""
        if self.nonfinite:
            return "beyond rounding (non-finite)"
        if np.isnan(self.bound_ratio):
            return "no bound (vacuous at this n, u)"
        return "within rounding" if self.bound_ratio <= 1.0 else "beyond rounding"


def _finite_stat(values: np.ndarray, fn) -> float:
    finite = values[np.isfinite(values)]
    return float(fn(finite)) if finite.size else 0.0


def summarize(result: np.ndarray, exact, fp64, bound) -> ErrorSummary:
    """All metrics for one result; statistics run over finite errors, non-finites are counted."""
    ulps = ulp_error(result, exact)
    diff, _ = _signed_error(result, exact)
    return ErrorSummary(
        max_ulp=_finite_stat(ulps, np.max),
        mean_ulp=_finite_stat(ulps, np.mean),
        p99_ulp=_finite_stat(ulps, lambda v: np.percentile(v, 99)),
        max_abs=_finite_stat(np.abs(diff), np.max),
        max_rel_exact=_finite_stat(relative_error(result, exact), np.max),
        max_rel_fp64=_finite_stat(relative_error(result, fp64), np.max),
        normwise_rel=normwise_relative_error(result, exact),
        bound_ratio=bound_ratio(result, exact, bound),
        nonfinite=nonfinite_count(result, exact),
    )
