"""Error metrics: ULP error, relative errors and the ratio of the error to its rounding bound.

Every metric takes the op's result (in its own dtype) and a reference (float64 array or an
`Exact` double-double) and never raises on NaN/Inf: a non-finite result where the reference is
finite is counted on its own (`nonfinite`) and kept out of the finite statistics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from accuracy.core.dtypes import FloatFormat, format_of, ulp
from accuracy.reference.exact import Exact


def gamma(n: int, u: float) -> float:
    """Higham's gamma_n = n u / (1 - n u); infinite where the bound is vacuous (n u >= 1)."""
    nu = n * u
    return nu / (1.0 - nu) if nu < 1.0 else np.inf


def _split_reference(reference: Exact | ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(reference, Exact):
        return reference.hi, reference.lo
    hi = np.asarray(reference, dtype=np.float64)
    return hi, np.zeros_like(hi)


def _signed_error(result: np.ndarray, reference: Exact | ArrayLike) -> tuple[np.ndarray, np.ndarray]:
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
    overflow = np.isinf(r) & np.isfinite(hi)
    if isinstance(reference, Exact) and np.any(overflow):  # +-inf is the correct rounding past the range
        with np.errstate(over="ignore"):
            agree = agree | (overflow & (format_of(np.asarray(result)).round(hi).astype(np.float64) == r))
    diff = np.where(agree, 0.0, np.where(finite, diff, np.inf))
    return diff, finite | agree


def ulp_error(result: np.ndarray, exact: Exact | ArrayLike) -> np.ndarray:
    """Fractional ULP error per element, in ulps of the result's dtype at the exact value.

    0 means equal, 0.5 is the most a correctly rounded result can be off; inf marks a
    non-finite result where the reference is finite (or vice versa).
    """
    fmt = format_of(np.asarray(result))
    diff, _ = _signed_error(result, exact)
    hi, _ = _split_reference(exact)
    with np.errstate(over="ignore"):  # e.g. float64 1.0 vs exact 0: 2**1074 ulps overflows to inf
        return np.abs(diff) / ulp(np.broadcast_to(hi, diff.shape), fmt)


def ulps_apart(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| in ulps of their format at the larger magnitude of the two: a 0 on one side does
    not turn one rounding step into 1e38 ulps. Equal values (NaN included) are 0 apart, a
    non-finite value against a different one is inf."""
    fmt = format_of(np.asarray(a))
    x, y = np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64)
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    with np.errstate(invalid="ignore", over="ignore"):
        apart = np.abs(x - y) / ulp(np.maximum(np.abs(x), np.abs(y)), fmt)
    return np.where(same, 0.0, np.where(np.isfinite(apart), apart, np.inf))


def relative_error(result: np.ndarray, reference: Exact | ArrayLike) -> np.ndarray:
    """|result - ref| / |ref| per element; 0/0 is 0 and x/0 is inf."""
    diff, _ = _signed_error(result, reference)
    hi, _ = _split_reference(reference)
    mag = np.abs(np.broadcast_to(hi, diff.shape))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rel = np.abs(diff) / mag
    return np.where(diff == 0, 0.0, rel)


def normwise_relative_error(result: np.ndarray, reference: Exact | ArrayLike) -> float:
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


def correctly_rounded(exact: Exact, fmt: FloatFormat) -> np.ndarray:
    """The exact value rounded to `fmt` (as float64): hi rounded, unless hi sits exactly on a
    rounding midpoint of fmt and lo breaks the tie."""
    hi, lo = np.asarray(exact.hi, dtype=np.float64), np.asarray(exact.lo, dtype=np.float64)
    with np.errstate(all="ignore"):
        rounded = fmt.round(hi).astype(np.float64)
        if fmt.precision < 53:
            tie = (np.abs(hi - rounded) == ulp(rounded, fmt) / 2) & (lo != 0)
            if np.any(tie):
                nudged = np.nextafter(hi, np.where(lo > 0, np.inf, -np.inf))
                rounded = np.where(tie, fmt.round(nudged).astype(np.float64), rounded)
    return rounded


def rounding_error(result: np.ndarray, exact: Exact, fmt: FloatFormat) -> np.ndarray:
    """|result - exact| per element: 0 where the result is the correctly rounded value, inf
    where it is non-finite (or finite) against a correctly rounded value that is not."""
    r = np.asarray(result).astype(np.float64)
    rounded = correctly_rounded(exact, fmt)
    with np.errstate(all="ignore"):
        diff = np.abs(np.asarray((r.astype(np.longdouble) - exact.hi) - exact.lo, dtype=np.float64))
    exact_match = (r == rounded) | (np.isnan(r) & np.isnan(rounded))
    comparable = np.isfinite(r) & np.isfinite(rounded)
    return np.where(exact_match, 0.0, np.where(comparable, diff, np.inf))


def bound_ratio(result: np.ndarray, exact: Exact | ArrayLike, bound: ArrayLike) -> float:
    """max |error| / bound over finite errors: <= 1 proves the error is within rounding. The one
    ratio the asv track, explain and the verdicts report (accuracy.judge.verdicts passes the bound
    at the implementation's compute precision).

    Against an `Exact` reference a correctly rounded element has error 0 (correct rounding is
    never an error). NaN where the bound is vacuous (gamma_n with n*u >= 1) and some error is
    not 0: no claim either way is provable.
    """
    if isinstance(exact, Exact):
        err = rounding_error(result, exact, format_of(np.asarray(result)))
    else:
        err = np.abs(_signed_error(result, exact)[0])
    return error_over_bound(err, bound)


def error_over_bound(err: np.ndarray, bound: ArrayLike) -> float:
    """`bound_ratio` from errors already measured (the verdicts have them): max err / bound over
    finite errors, 0 with no finite error, NaN where the bound is vacuous."""
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), err.shape)
    ok = np.isfinite(err)
    if not np.any(err[ok]):
        return 0.0  # no finite error: nothing to bound, even where the bound is vacuous
    if not np.all(np.isfinite(bound)):
        return float("nan")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.where(err[ok] == 0, 0.0, err[ok] / bound[ok])
    return float(np.max(ratio))


def nonfinite_count(result: np.ndarray, reference: Exact | ArrayLike) -> int:
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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _finite_stat(values: np.ndarray, fn: Callable[[np.ndarray], Any]) -> float:
    finite = values[np.isfinite(values)]
    return float(fn(finite)) if finite.size else 0.0


def summarize(result: np.ndarray, exact: Exact, fp64: ArrayLike, bound: ArrayLike) -> ErrorSummary:
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
