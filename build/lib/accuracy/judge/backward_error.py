"""Linear algebra judged by backward error, as LAPACK's own test suite judges it.

Each ratio is LAPACK's test ratio for the routine (Reference-LAPACK TESTING/LIN, commit
51b34947), with residuals computed exactly (Dot2) instead of in working precision:

- solve    dget02: ||b - A x||_1 / (||A||_1 ||x||_1 eps)
- inv      dget03: ||I - X A||_1 / (n ||A||_1 ||X||_1 eps)
- cholesky dpot01: ||L L^T - A||_1 / (n ||A||_1 eps)
- lstsq    dqrt17: ||r^T A||_1 / (max(m, n) ||A||_1 (||b||_1 + ||A||_1 ||x||_1) eps), r = b - A x, both
           residual regimes at once (see _lstsq); and where b is in A's range (a consistent system)
           dqrt16: ||b - A x||_1 / (max(m, n) ||A||_1 ||x||_1 eps)
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
    """dqrt17 with alpha = ||b|| + ||A|| ||x||, and dqrt16 where the system is consistent.

    dqrt17 divides by alpha = ||b|| for a zero-residual problem (IRESID=1, the only regime
    LAPACK's drivers test: ddrvls makes B = A X) and by ||r|| otherwise (IRESID=2). Neither holds
    for every problem: with ||r|| a consistent system's rounding-level residual made a correct
    gelsd 1.7e13 (float64), and with ||b|| an ill-conditioned one (kappa 1e6) made it ~500. A
    backward-stable x solves min ||(A + dA) x - (b + db)|| with ||dA|| <= c eps ||A||, ||db|| <=
    c eps ||b||, so A^T r = -dA^T r - A^T db + A^T dA x to first order: ||A^T r|| <= c eps ||A||
    (||r|| + ||b|| + ||A|| ||x||) <= 2 c eps ||A|| (||b|| + ||A|| ||x||), which is both regimes'
    alpha at once. The numerator is LAPACK's: the one-norm of the 1 x n row r^T A, its largest
    entry. Where b lies in A's range to working precision (the exact residual is below eps ||A||
    ||x||), the residual itself must be as small as a backward-stable solve leaves it (dqrt16):
    that is what catches the normal equations on ill-conditioned consistent systems.
    """
    a, b = inputs["a"], inputs["b"]
    r = -_product_minus(a, x[:, None], b[:, None])[:, 0]
    atr = _product_minus(a.T, r[:, None], np.zeros((a.shape[1], 1)))
    norm_a, norm_x, dims = _norm1(a), _norm1(x), max(a.shape)
    ratio = _ratio(float(np.max(np.abs(atr))), dims * norm_a * (_norm1(b) + norm_a * norm_x), eps)
    exact_x = exact.hi + exact.lo
    exact_r = -_product_minus(a, exact_x[:, None], b[:, None])[:, 0]
    if _norm1(exact_r) <= eps * norm_a * _norm1(exact_x):  # consistent: b = A x* to working precision
        ratio = max(ratio, _ratio(_norm1(r), dims * norm_a * norm_x, eps))
    return ratio


def _spectrum(inputs: Inputs, x: np.ndarray, exact: Exact, eps: float) -> float:
    a = inputs["a"]
    err = np.max(np.abs((x - exact.hi) - exact.lo))
    return _ratio(float(err), a.shape[0] * float(np.linalg.norm(a, 2)), eps)


RATIOS = {"solve": _solve, "inv": _inv, "cholesky": _cholesky, "lstsq": _lstsq, "eigh": _spectrum, "svd": _spectrum}
RATIO_DOCS = {
    "solve": "dget02 ||b - Ax||/(||A|| ||x|| eps)",
    "inv": "dget03 ||I - XA||/(n ||A|| ||X|| eps)",
    "cholesky": "dpot01 ||LL^T - A||/(n ||A|| eps)",
    "lstsq": "dqrt17 ||r^T A||/(max(m,n) ||A|| (||b|| + ||A|| ||x||) eps); dqrt16 ||r||/(max(m,n) ||A|| ||x|| eps) "
    "where b is in A's range",
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
    import scipy.linalg  # not at import: the CLI imports the judge for its help texts

    _p, low, up = scipy.linalg.lu(np.asarray(a, dtype=np.float64))
    norm_a = np.linalg.norm(a, np.inf)
    return max(1.0, float(np.linalg.norm(np.abs(low) @ np.abs(up), np.inf) / norm_a)) if norm_a > 0 else 1.0
