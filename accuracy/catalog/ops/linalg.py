"""Dense linear algebra (LAPACK-backed): solve, inv, cholesky, qr, svd, eigh, lstsq, det.

The exact reference is the true answer for the rounded inputs, computed by 200-bit mpmath on
small matrices. The bound is the forward error a *backward-stable* algorithm may commit:
condition number x backward error eta (normwise, eta = gamma_{cn}, the scale LAPACK's own tests
use), so bound_ratio <= 1 says "consistent with backward stability" and a large raw error on an
ill-conditioned matrix (solve and inv under condition 'ill', cond_2(A) = 1e6) is not, by itself,
a verdict.
Where kappa*eta >= 1 the bound is vacuous and the verdict says so instead of guessing.
Low-precision dtypes are absent: neither numpy nor torch factorises float16/bfloat16 on CPU.
"""

from __future__ import annotations

import mpmath
import numpy as np

from accuracy.catalog.registry import Impl, OpInfo
from accuracy.core.dtypes import SINGLE_DOUBLE
from accuracy.judge.error_metrics import gamma
from accuracy.reference.exact import MP_PRECISION_BITS, Exact
from accuracy.reference.inputs import normal
from accuracy.reference.oracles import mp_matrix

ILL_COND = 1e6
SIZES = (32, 64)


# -- inputs ---------------------------------------------------------------------------------


def _orthogonal(rng, n):
    q, r = np.linalg.qr(rng.standard_normal((n, n)))
    return q * np.sign(np.diag(r))


def _illcond(rng, n, cond=ILL_COND):
    """U diag(s) V^T with s log-spaced from 1 to 1/cond: cond_2 = `cond` (before rounding)."""
    s = np.logspace(0, -np.log10(cond), n)
    return (_orthogonal(rng, n) * s) @ _orthogonal(rng, n).T


def _spd(rng, n):
    m = normal(rng, (n, n))
    return m @ m.T / n + 0.1 * np.eye(n)


def _symmetric(rng, n):
    m = normal(rng, (n, n))
    return (m + m.T) / 2


# -- mpmath helpers -------------------------------------------------------------------------


def _mp(a):
    a = np.asarray(a, dtype=np.float64)
    return mpmath.matrix(a.tolist()) if a.ndim == 2 else mpmath.matrix([float(v) for v in a])


def _to_exact(m, shape) -> Exact:
    flat = [m[i, j] for i in range(m.rows) for j in range(m.cols)] if len(shape) == 2 else list(m)
    return Exact.from_mpf(flat, shape)


def _forward(kappa, eta):
    """First-order forward error kappa*eta/(1 - kappa*eta); infinite (vacuous) once kappa*eta >= 1."""
    ke = kappa * eta
    return ke / (1.0 - ke) if ke < 1.0 else np.inf


def _cond(a, p=2):
    return float(np.linalg.cond(a, p))


# -- oracles: each by another route than its exact reference ----------------------------------


def _inverse_by_columns(inputs):
    """Column j of A^-1 solves A x = e_j, here by QR (the reference inverts by LU)."""
    a = mp_matrix(inputs["a"])
    n = a.rows
    cols = [mpmath.qr_solve(a, mpmath.matrix([int(i == j) for i in range(n)]))[0] for j in range(n)]
    return [cols[j][i] for i in range(n) for j in range(n)]


def _cholesky_by_minors(inputs):
    """L_ij = det A[1..j-1 + i, 1..j] / sqrt(D_j D_{j-1}), D_j the leading principal minors."""
    a = inputs["a"]
    n = len(a)
    lead = [mpmath.mpf(1)] + [mpmath.det(mp_matrix(a[:j, :j])) for j in range(1, n + 1)]

    def entry(i, j):  # 0-based row i, column j - 1
        if j > i + 1:
            return mpmath.mpf(0)
        minor = a[np.ix_([*range(j - 1), i], range(j))]
        return mpmath.det(mp_matrix(minor)) / mpmath.sqrt(lead[j] * lead[j - 1])

    return [entry(i, j) for i in range(n) for j in range(1, n + 1)]


def _r_by_householder(inputs):
    """|R| from mpmath's Householder QR of A (the reference takes the Cholesky factor of A^T A)."""
    r = mpmath.qr(mp_matrix(inputs["a"]))[1]
    return [abs(r[i, j]) if j >= i else mpmath.mpf(0) for i in range(r.rows) for j in range(r.cols)]


def _singular_values_by_eigsy(inputs):
    """sqrt of the eigenvalues of A^T A, descending (the reference uses mpmath's SVD)."""
    a = mp_matrix(inputs["a"])
    return sorted((mpmath.sqrt(v) for v in mpmath.eigsy(a.T * a, eigvals_only=True)), reverse=True)


def _eigenvalues_by_eig(inputs):
    """The general (nonsymmetric) eigensolver's values, real parts, ascending (the reference uses eigsy)."""
    return sorted(mpmath.re(v) for v in mpmath.eig(mp_matrix(inputs["a"]), left=False, right=False))


# -- solve ----------------------------------------------------------------------------------


def _solve_exact(inputs, fmt):
    with mpmath.workprec(MP_PRECISION_BITS):
        return _to_exact(mpmath.lu_solve(_mp(inputs["a"]), _mp(inputs["b"])), inputs["b"].shape)


def _solve_bound(inputs, exact, fmt):
    a = inputs["a"]
    n = a.shape[0]
    x = exact.hi
    return np.full(x.shape, _forward(_cond(a, np.inf), gamma(3 * n, fmt.u)) * np.max(np.abs(x)))


def _inv_exact(inputs, fmt):
    with mpmath.workprec(MP_PRECISION_BITS):
        return _to_exact(mpmath.inverse(_mp(inputs["a"])), inputs["a"].shape)


def _inv_bound(inputs, exact, fmt):
    a = inputs["a"]
    n = a.shape[0]
    return np.full(a.shape, _forward(_cond(a, np.inf), gamma(3 * n, fmt.u)) * np.linalg.norm(exact.hi, np.inf))


def _random_matrix(rng, n):
    return normal(rng, (n, n))


_CONDITIONING = f"random: N(0,1) (cond ~ n); ill: U diag(s) V^T with cond_2 = {ILL_COND:.0e}"

SOLVE = OpInfo(
    name="solve",
    doc=f"x = A^-1 b for an n x n matrix ({_CONDITIONING})",
    generate=lambda rng, n: {"a": _random_matrix(rng, n), "b": normal(rng, n)},
    conditions={"ill": lambda rng, n: {"a": _illcond(rng, n), "b": normal(rng, n)}},
    exact=_solve_exact,
    fp64=lambda a, b: np.linalg.solve(a, b),
    bound=_solve_bound,
    bound_doc="kappa_inf(A) eta/(1 - kappa eta) * ||x||_inf, eta = gamma_{3n} (GEPP backward error, Higham 9.4)",
    impls=(
        Impl("numpy", "np.linalg.solve", lambda ns, a, b: ns.linalg.solve(a, b), SINGLE_DOUBLE),
        Impl("scipy", "linalg.solve", lambda ns, a, b: ns.linalg.solve(a, b), SINGLE_DOUBLE),
        Impl("torch", "torch.linalg.solve", lambda ns, a, b: ns.linalg.solve(a, b), SINGLE_DOUBLE),
        Impl(
            "numpy",
            "inv(a) @ b",
            lambda ns, a, b: ns.linalg.inv(a) @ b,
            SINGLE_DOUBLE,
            stable=False,
            note="not backward stable, though its forward error is usually of the same order",
        ),
    ),
    default_size=32,
    bench_sizes=SIZES,
    oracle=lambda inputs: list(mpmath.qr_solve(mp_matrix(inputs["a"]), mp_matrix(inputs["b"]))[0]),
    test_size=8,
)

INV = OpInfo(
    name="inv",
    doc=f"A^-1 for an n x n matrix ({_CONDITIONING})",
    generate=lambda rng, n: {"a": _random_matrix(rng, n)},
    conditions={"ill": lambda rng, n: {"a": _illcond(rng, n)}},
    exact=_inv_exact,
    fp64=lambda a: np.linalg.inv(a),
    bound=_inv_bound,
    bound_doc="kappa_inf(A) eta/(1 - kappa eta) * ||A^-1||_inf, eta = gamma_{3n} (Higham 14.3)",
    impls=(
        Impl("numpy", "np.linalg.inv", lambda ns, a: ns.linalg.inv(a), SINGLE_DOUBLE),
        Impl("scipy", "linalg.inv", lambda ns, a: ns.linalg.inv(a), SINGLE_DOUBLE),
        Impl("torch", "torch.linalg.inv", lambda ns, a: ns.linalg.inv(a), SINGLE_DOUBLE),
    ),
    default_size=32,
    bench_sizes=SIZES,
    oracle=_inverse_by_columns,
    test_size=8,
)


# -- cholesky, qr ---------------------------------------------------------------------------


def _cholesky_exact(inputs, fmt):
    with mpmath.workprec(MP_PRECISION_BITS):
        return _to_exact(mpmath.cholesky(_mp(inputs["a"])), inputs["a"].shape)


def _cholesky_bound(inputs, exact, fmt):
    a = inputs["a"]
    n = a.shape[0]
    scale = np.sqrt(np.linalg.norm(a, 2))  # ||L||_2
    return np.tril(np.full(a.shape, _forward(_cond(a), gamma(3 * n, fmt.u)) * scale))


CHOLESKY = OpInfo(
    name="cholesky",
    doc="lower Cholesky factor of M M^T/n + 0.1 I (symmetric positive definite, cond ~ 40)",
    generate=lambda rng, n: {"a": _spd(rng, n)},
    exact=_cholesky_exact,
    fp64=lambda a: np.linalg.cholesky(a),
    bound=_cholesky_bound,
    bound_doc=(
        "kappa_2(A) eta/(1 - kappa eta) * ||L||_2 on the lower triangle, eta = gamma_{3n} (Sun 1991 perturbation)"
    ),
    impls=(
        Impl("numpy", "np.linalg.cholesky", lambda ns, a: ns.linalg.cholesky(a), SINGLE_DOUBLE),
        Impl("scipy", "linalg.cholesky(lower=True)", lambda ns, a: ns.linalg.cholesky(a, lower=True), SINGLE_DOUBLE),
        Impl("torch", "torch.linalg.cholesky", lambda ns, a: ns.linalg.cholesky(a), SINGLE_DOUBLE),
    ),
    default_size=32,
    bench_sizes=SIZES,
    oracle=_cholesky_by_minors,
    test_size=8,
)


def _qr_exact(inputs, fmt):
    """|R| from the Cholesky factor of A^T A (exact in 200 bits): R is unique up to row signs."""
    a = _mp(inputs["a"])
    with mpmath.workprec(MP_PRECISION_BITS):
        r = mpmath.cholesky(a.T * a).T
        return _to_exact(r.apply(abs), inputs["a"].shape)


def _qr_bound(inputs, exact, fmt):
    a = inputs["a"]
    n = a.shape[0]
    return np.triu(np.full(a.shape, _forward(_cond(a), gamma(6 * n, fmt.u)) * np.linalg.norm(a, 2)))


QR = OpInfo(
    name="qr",
    doc="|R| of A = QR for an N(0,1) matrix (absolute values: R is unique up to the signs of its rows)",
    generate=lambda rng, n: {"a": normal(rng, (n, n))},
    exact=_qr_exact,
    fp64=lambda a: np.abs(np.linalg.qr(a)[1]),
    bound=_qr_bound,
    bound_doc=(
        "kappa_2(A) eta/(1 - kappa eta) * ||A||_2 on the upper triangle, "
        "eta = gamma_{6n} (Householder QR; Sun's R perturbation)"
    ),
    impls=(
        Impl("numpy", "abs(np.linalg.qr(a).R)", lambda ns, a: ns.abs(ns.linalg.qr(a)[1]), SINGLE_DOUBLE),
        Impl(
            "scipy",
            "abs(linalg.qr(a, mode='r'))",
            lambda ns, a: (
                ns.absolute(ns.linalg.qr(a, mode="r")[0])
                if hasattr(ns, "absolute")
                else abs(ns.linalg.qr(a, mode="r")[0])
            ),
            SINGLE_DOUBLE,
        ),
        Impl("torch", "abs(torch.linalg.qr(a).R)", lambda ns, a: ns.abs(ns.linalg.qr(a).R), SINGLE_DOUBLE),
    ),
    default_size=32,
    bench_sizes=SIZES,
    oracle=_r_by_householder,
    test_size=8,
)


# -- spectra: svd, eigh ---------------------------------------------------------------------


def _svd_exact(inputs, fmt):
    with mpmath.workprec(MP_PRECISION_BITS):
        s = sorted(mpmath.svd_r(_mp(inputs["a"]), compute_uv=False), reverse=True)
        return Exact.from_mpf(s, (len(s),))


def _eigh_exact(inputs, fmt):
    with mpmath.workprec(MP_PRECISION_BITS):
        e = sorted(mpmath.eigsy(_mp(inputs["a"]), eigvals_only=True))
        return Exact.from_mpf(e, (len(e),))


def _weyl_bound(inputs, exact, fmt):
    a = inputs["a"]
    n = a.shape[0]
    return np.full(n, gamma(4 * n, fmt.u) * np.linalg.norm(a, 2))


SVD = OpInfo(
    name="svd",
    doc=f"singular values (descending) of an n x n matrix with cond_2 = {ILL_COND:.0e}",
    generate=lambda rng, n: {"a": _illcond(rng, n)},
    exact=_svd_exact,
    fp64=lambda a: np.linalg.svd(a, compute_uv=False),
    bound=_weyl_bound,
    bound_doc=(
        "gamma_{4n} * ||A||_2 per value "
        "(Weyl: backward-stable SVD, absolute error; small sigmas lose relative accuracy)"
    ),
    impls=(
        Impl(
            "numpy", "np.linalg.svd(compute_uv=False)", lambda ns, a: ns.linalg.svd(a, compute_uv=False), SINGLE_DOUBLE
        ),
        Impl("scipy", "linalg.svdvals", lambda ns, a: ns.linalg.svdvals(a), SINGLE_DOUBLE),
        Impl("torch", "torch.linalg.svdvals", lambda ns, a: ns.linalg.svdvals(a), SINGLE_DOUBLE),
    ),
    default_size=32,
    bench_sizes=SIZES,
    oracle=_singular_values_by_eigsy,
    test_size=8,
)

EIGH = OpInfo(
    name="eigh",
    doc="eigenvalues (ascending) of a symmetric (M + M^T)/2, M ~ N(0,1)",
    generate=lambda rng, n: {"a": _symmetric(rng, n)},
    exact=_eigh_exact,
    fp64=lambda a: np.linalg.eigvalsh(a),
    bound=_weyl_bound,
    bound_doc="gamma_{4n} * ||A||_2 per value (Weyl: backward-stable symmetric eigensolver)",
    impls=(
        Impl("numpy", "np.linalg.eigvalsh", lambda ns, a: ns.linalg.eigvalsh(a), SINGLE_DOUBLE),
        Impl("scipy", "linalg.eigvalsh", lambda ns, a: ns.linalg.eigvalsh(a), SINGLE_DOUBLE),
        Impl("torch", "torch.linalg.eigvalsh", lambda ns, a: ns.linalg.eigvalsh(a), SINGLE_DOUBLE),
    ),
    default_size=32,
    bench_sizes=SIZES,
    oracle=_eigenvalues_by_eig,
    test_size=8,
)


# -- lstsq, det -----------------------------------------------------------------------------


def _lstsq_exact(inputs, fmt):
    a, b = _mp(inputs["a"]), _mp(inputs["b"])
    with mpmath.workprec(MP_PRECISION_BITS):
        return _to_exact(mpmath.lu_solve(a.T * a, a.T * b), (inputs["a"].shape[1],))


def _lstsq_bound(inputs, exact, fmt):
    """Higham Thm 20.1: ||dx||/||x|| <= k eps/(1 - k eps) * (2 + (k + 1) ||r||/(||A|| ||x||))."""
    a, b = inputs["a"], inputs["b"]
    m, n = a.shape
    x = exact.hi
    kappa = _cond(a)
    r = np.linalg.norm(b - a @ x)
    an, xn = np.linalg.norm(a, 2), np.linalg.norm(x)
    rel = _forward(kappa, gamma(6 * m, fmt.u)) * (2 + (kappa + 1) * r / (an * xn))
    return np.full(n, rel * xn)


def _lstsq_inputs(rng, n):
    return {"a": normal(rng, (2 * n, n)), "b": normal(rng, 2 * n)}


def _consistent(rng, n):
    """b = A x0: a zero-residual problem (the regime LAPACK's own tests use, ddrvls)."""
    a = normal(rng, (2 * n, n))
    return {"a": a, "b": a @ normal(rng, n)}


def _large_residual(rng, n):
    """b far from A's range: a residual 1000x the part A can fit (Higham 20.1's (kappa + 1)||r|| term)."""
    a = normal(rng, (2 * n, n))
    q = np.linalg.qr(a, mode="complete")[0][:, n:]
    return {"a": a, "b": a @ normal(rng, n) + 1e3 * q @ normal(rng, n)}


def _ill_lstsq(rng, n, cond=ILL_COND):
    """A = U diag(s) V^T of shape 2n x n with s log-spaced from 1 to 1/cond: ill-conditioned, but
    of full rank, so the least-squares solution is unique (well-posed); b random."""
    u = np.linalg.qr(rng.standard_normal((2 * n, n)))[0]
    s = np.logspace(0, -np.log10(cond), n)
    return {"a": (u * s) @ _orthogonal(rng, n).T, "b": normal(rng, 2 * n)}


LSTSQ = OpInfo(
    name="lstsq",
    doc="least-squares x = argmin ||A x - b||_2, A ~ N(0,1) of shape 2n x n (a non-zero residual)",
    generate=_lstsq_inputs,
    exact=_lstsq_exact,
    fp64=lambda a, b: np.linalg.lstsq(a, b, rcond=None)[0],
    bound=_lstsq_bound,
    bound_doc=(
        "kappa eta/(1 - kappa eta) * (2 + (kappa + 1)||r||/(||A|| ||x||)) * ||x||, eta = gamma_{6m} (Higham 20.1)"
    ),
    impls=(
        Impl("numpy", "np.linalg.lstsq", lambda ns, a, b: ns.linalg.lstsq(a, b, rcond=None)[0], SINGLE_DOUBLE),
        Impl("scipy", "linalg.lstsq", lambda ns, a, b: ns.linalg.lstsq(a, b)[0], SINGLE_DOUBLE),
        Impl(
            "torch",
            "torch.linalg.lstsq",
            lambda ns, a, b: ns.linalg.lstsq(a, b[:, None]).solution[:, 0],
            SINGLE_DOUBLE,
            note="CPU default driver gelsy (QR with column pivoting)",
            varies_run_to_run=(
                "torch hands gelsy its column-pivot array uninitialized (at::empty), and gelsy keeps the "
                "columns it marks nonzero in front: 7 different float32 results in 20 calls on one thread (16 x 8)"
            ),
        ),
        Impl(
            "numpy",
            "solve(A^T A, A^T b)",
            lambda ns, a, b: ns.linalg.solve(a.T @ a, a.T @ b),
            SINGLE_DOUBLE,
            stable=False,
            note="normal equations: squares the condition number",
        ),
    ),
    default_size=32,
    bench_sizes=SIZES,
    oracle=lambda inputs: list(mpmath.qr_solve(mp_matrix(inputs["a"]), mp_matrix(inputs["b"]))[0]),
    test_size=8,
    # the residual regimes a backward-error test must get right (accuracy.judge.backward_error._lstsq)
    conditions={"consistent": _consistent, "large_residual": _large_residual, "ill": _ill_lstsq},
)


def _det_exact(inputs, fmt):
    with mpmath.workprec(MP_PRECISION_BITS):
        return Exact.from_mpf([mpmath.det(_mp(inputs["a"]))], ())


def _det_bound(inputs, exact, fmt):
    """d log det = tr(A^-1 dA): |d det| <= |det| (expm1(n kappa eta) + gamma_n), eta = gamma_{3n}."""
    a = inputs["a"]
    n = a.shape[0]
    t = n * _cond(a) * gamma(3 * n, fmt.u)
    return np.abs(exact.hi) * (np.expm1(t) + gamma(n, fmt.u)) if t < 1 else np.full(exact.hi.shape, np.inf)


DET = OpInfo(
    name="det",
    doc="determinant of an N(0,1) matrix (via LU)",
    generate=lambda rng, n: {"a": normal(rng, (n, n))},
    exact=_det_exact,
    fp64=lambda a: np.linalg.det(a),
    bound=_det_bound,
    bound_doc="|det| * (expm1(n kappa_2 eta) + gamma_n), eta = gamma_{3n} (tr(A^-1 dA), then the product of n pivots)",
    impls=(
        Impl("numpy", "np.linalg.det", lambda ns, a: ns.linalg.det(a), SINGLE_DOUBLE),
        Impl("scipy", "linalg.det", lambda ns, a: ns.linalg.det(a), SINGLE_DOUBLE),
        Impl("torch", "torch.linalg.det", lambda ns, a: ns.linalg.det(a), SINGLE_DOUBLE),
    ),
    default_size=32,
    bench_sizes=SIZES,
    oracle=lambda inputs: [mpmath.re(mpmath.fprod(mpmath.eig(mp_matrix(inputs["a"]), left=False, right=False)))],
    test_size=6,
)


OPS = [SOLVE, INV, CHOLESKY, QR, SVD, EIGH, LSTSQ, DET]
