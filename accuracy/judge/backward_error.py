"""Linear algebra judged by backward error, as LAPACK's own test suite judges it.

Each ratio is LAPACK's test ratio for the routine (Reference-LAPACK TESTING/LIN, commit
51b34947), with residuals computed exactly (Dot2) instead of in working precision:

- solve    dget02: ||b - A x||_1 / (||A||_1 ||x||_1 eps)
- inv      dget03: ||I - X A||_1 / (n ||A||_1 ||X||_1 eps)
- cholesky dpot01: ||L L^T - A||_1 / (n ||A||_1 eps)
- lstsq    dqrt17: ||A^T r||_1 / (max(m, n) ||A||_1 ||r||_1 eps), r = b - A x (non-zero residual)
- eigh, svd (values only, Weyl): max |lambda - lambda_exact| / (n ||A||_2 eps)

A ratio above LAPACK_THRESHOLD (TESTING/dtest.in: "30.0 Threshold value of test ratio") is
what LAPACK's tests report as a failure: a result no backward-stable algorithm would give, the
signature of an explicit inverse or the normal equations on inputs where they lose accuracy.
eps is the unit roundoff of the stored format: the user gets that format back.

GEPP's growth enters both tiers through `lu_growth`: Higham's Theorem 9.4 bounds the backward
error by gamma_3n |L||U|, which is ||A|| only when pivots do not grow, so for LU-based ops the
ratio's ||A|| becomes || |L||U| || (a correct GEPP on Wilkinson's growth matrix passes).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import scipy.linalg
from numpy.typing import ArrayLike

from accuracy.reference.exact import Exact, dot2_matmul

LAPACK_THRESHOLD = 30.0
Inputs = Mapping[str, np.ndarray]  # an op's float64 inputs by name
LU_BASED = ("solve", "inv", "det")  # ops computed through GEPP: their bounds carry its growth


def _norm1(m: ArrayLike) -> float:
    m = np.asarray(m, dtype=np.float64)
    return float(np.linalg.norm(m, 1)) if m.ndim == 2 else float(np.sum(np.abs(m)))


def _product_minus(a: ArrayLike, b: ArrayLike, c: ArrayLike) -> np.ndarray:
    """a @ b - c, exact to ~u**2 (Dot2 over [a, c] @ [b; -I])."""
    a, b, c = (np.atleast_2d(np.asarray(v, dtype=np.float64)) for v in (a, b, c))
    stacked = dot2_matmul(np.hstack([a, c]), np.vstack([b, -np.eye(c.shape[1])]))
    return stacked.hi + stacked.lo


def _ratio(residual_norm: float, scale: float, eps: float) -> float:
    if residual_norm == 0:
        return 0.0
    return residual_norm / (scale * eps) if scale > 0 and np.isfinite(scale) else float("inf")


def _solve(inputs: Inputs, x: np.ndarray, exact: Exact, eps: float) -> float:
    a, b = inputs["a"], inputs["b"]
    r = _product_minus(a, x[:, None], b[:, None])
    return _ratio(_norm1(r), _norm1(a) * _norm1(x), eps)


def _inv(inputs: Inputs, x: np.ndarray, exact: Exact, eps: float) -> float:
    a = inputs["a"]
    r = _product_minus(x, a, np.eye(a.shape[0]))
    return _ratio(_norm1(r), a.shape[0] * _norm1(a) * _norm1(x), eps)


def _cholesky(inputs: Inputs, x: np.ndarray, exact: Exact, eps: float) -> float:
    a = inputs["a"]
    low = np.tril(x)
    r = _product_minus(low, low.T, a)
    return _ratio(_norm1(r), a.shape[0] * _norm1(a), eps)


def _lstsq(inputs: Inputs, x: np.ndarray, exact: Exact, eps: float) -> float:
    a, b = inputs["a"], inputs["b"]
    r = -_product_minus(a, x[:, None], b[:, None])[:, 0]
    atr = _product_minus(a.T, r[:, None], np.zeros((a.shape[1], 1)))
    return _ratio(_norm1(atr), max(a.shape) * _norm1(a) * _norm1(r), eps)


def _spectrum(inputs: Inputs, x: np.ndarray, exact: Exact, eps: float) -> float:
    a = inputs["a"]
    err = np.max(np.abs((x - exact.hi) - exact.lo))
    return _ratio(float(err), a.shape[0] * float(np.linalg.norm(a, 2)), eps)


RATIOS = {"solve": _solve, "inv": _inv, "cholesky": _cholesky, "lstsq": _lstsq, "eigh": _spectrum, "svd": _spectrum}
RATIO_DOCS = {
    "solve": "dget02 ||b - Ax||/(||A|| ||x|| eps)",
    "inv": "dget03 ||I - XA||/(n ||A|| ||X|| eps)",
    "cholesky": "dpot01 ||LL^T - A||/(n ||A|| eps)",
    "lstsq": "dqrt17 ||A^T r||/(max(m,n) ||A|| ||r|| eps)",
    "eigh": "|dlambda|/(n ||A||_2 eps)",
    "svd": "|dsigma|/(n ||A||_2 eps)",
}


def lapack_ratio(
    op_name: str, inputs64: Inputs, result: np.ndarray, exact: Exact, eps: float, growth: float = 1.0
) -> float | None:
    """LAPACK's test ratio for this result, or None where the op has none (qr, det, ...);
    `growth` (GEPP's, for LU-based ops) scales ||A|| to || |L||U| ||."""
    fn = RATIOS.get(op_name)
    if fn is None:
        return None
    x = np.asarray(result, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        return float("inf")
    return float(fn(inputs64, x, exact, eps * growth))


def lu_growth(a: np.ndarray) -> float:
    """|| |L||U| ||_inf / ||A||_inf of GEPP on `a` (>= 1): the factor by which pivot growth
    widens the backward error gamma_3n |L||U| beyond gamma_3n |A|."""
    _p, low, up = scipy.linalg.lu(np.asarray(a, dtype=np.float64))
    norm_a = np.linalg.norm(a, np.inf)
    return max(1.0, float(np.linalg.norm(np.abs(low) @ np.abs(up), np.inf) / norm_a)) if norm_a > 0 else 1.0
