"""More reductions: cumsum, vector and Frobenius norms.

cumsum's exact prefixes come from math.fsum; norms from 200-bit mpmath.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np

from accuracy.dtypes import ALL_DTYPES, IEEE_DTYPES
from accuracy.exact import Exact, mp_rows
from accuracy.inputs import normal
from accuracy.metrics import gamma
from accuracy.registry import Impl, OpInfo, register

SCIPY_DTYPES = ("float32", "float64")


def _cumsum_exact(inputs, fmt):
    xs = inputs["x"].tolist()
    hi, lo = np.empty(len(xs)), np.empty(len(xs))
    for i in range(len(xs)):
        prefix = xs[: i + 1]
        hi[i] = math.fsum(prefix)
        prefix.append(-hi[i])
        lo[i] = math.fsum(prefix)
    return Exact(hi, lo)


def _cumsum_bound(inputs, exact, fmt):
    x = inputs["x"]
    steps = np.arange(x.size)  # position i (0-based) has i additions
    nu = steps * fmt.u
    g = np.where(nu < 1, nu / np.maximum(1 - nu, 1e-300), np.inf)
    return g * np.cumsum(np.abs(x))


register(OpInfo(
    name="cumsum", family="reduction",
    doc="prefix sums of an N(0,1) vector",
    generate=lambda rng, n: {"x": normal(rng, n)},
    exact=_cumsum_exact,
    fp64=lambda x: np.cumsum(x),
    bound=_cumsum_bound,
    bound_doc="gamma_i * sum_{j<=i}|x_j| at 0-based position i (any order of the i additions)",
    impls=(
        Impl("numpy", "np.cumsum", lambda ns, x: ns.cumsum(x), IEEE_DTYPES),
        Impl("torch", "torch.cumsum", lambda ns, x: ns.cumsum(x, 0), ALL_DTYPES),
    ),
    default_size=1024, bench_sizes=(1 << 12, 1 << 14),
    flops=lambda n: n,
))


def _mp_norm(row):
    return [mpmath.sqrt(mpmath.fsum(v * v for v in row))]


def _norm_bound(inputs, exact, fmt):
    """sum of n squares: gamma_{n} relative (all terms positive), halved by sqrt, + 2 roundings."""
    x = inputs["x"]
    return gamma(x.size + 2, fmt.u) * np.abs(exact.hi)


register(OpInfo(
    name="vector_norm", family="reduction",
    doc="Euclidean norm ||x||_2 of an N(0,1) vector",
    generate=lambda rng, n: {"x": normal(rng, n)},
    exact=lambda inputs, fmt: mp_rows(_mp_norm, inputs["x"]),
    fp64=lambda x: np.linalg.norm(x),
    bound=_norm_bound,
    bound_doc="gamma_{n+2} * ||x||: a sum of n non-negative squares, then sqrt (scaled nrm2 included)",
    impls=(
        Impl("numpy", "np.linalg.norm", lambda ns, x: ns.linalg.norm(x), IEEE_DTYPES),
        Impl("scipy", "linalg.norm", lambda ns, x: ns.linalg.norm(x), SCIPY_DTYPES, note="BLAS ?nrm2"),
        Impl("torch", "torch.linalg.vector_norm", lambda ns, x: ns.linalg.vector_norm(x), ALL_DTYPES),
        Impl("numpy", "sqrt(sum(x*x))", lambda ns, x: ns.sqrt(ns.sum(x * x)), IEEE_DTYPES),
    ),
    default_size=1024, bench_sizes=(1 << 16, 1 << 20),
    flops=lambda n: 2.0 * n,
))

def _scalar(e: Exact) -> Exact:
    return e.map(np.squeeze)


register(OpInfo(
    name="matrix_norm", family="reduction",
    doc="Frobenius norm of an n x n N(0,1) matrix",
    generate=lambda rng, n: {"x": normal(rng, (n, n))},
    exact=lambda inputs, fmt: _scalar(mp_rows(_mp_norm, inputs["x"].reshape(1, -1))),
    fp64=lambda x: np.linalg.norm(x, "fro"),
    bound=_norm_bound,
    bound_doc="gamma_{n*n+2} * ||A||_F: the vector norm of all n*n entries",
    impls=(
        Impl("numpy", "np.linalg.norm(fro)", lambda ns, x: ns.linalg.norm(x, "fro"), IEEE_DTYPES),
        Impl("scipy", "linalg.norm", lambda ns, x: ns.linalg.norm(x), SCIPY_DTYPES),
        Impl("torch", "torch.linalg.matrix_norm", lambda ns, x: ns.linalg.matrix_norm(x), ALL_DTYPES),
    ),
    default_size=32, bench_sizes=(256, 1024),
    flops=lambda n: 2.0 * n * n,
))
