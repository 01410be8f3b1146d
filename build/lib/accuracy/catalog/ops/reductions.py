"""Reductions over long vectors: sum, mean, var, std, logsumexp, cumsum, vector and matrix norms.

Sums are exact through math.fsum; var/std/logsumexp/norms through 200-bit mpmath. The bounds
are worst-case ones valid for any summation order, so blocked, pairwise and threaded sums all
qualify and only a semantic difference (ddof, overflow) can break them.
"""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np

from accuracy.backends import TORCH_VARIANTS
from accuracy.backends.onnxruntime import single
from accuracy.catalog.ops.frameworks import JAX_DTYPES, LIBTORCH_DTYPES, ORT_FLOAT64, TF_DTYPES
from accuracy.catalog.registry import Impl, OpInfo
from accuracy.core.dtypes import ALL_DTYPES, IEEE_DTYPES, SINGLE_DOUBLE
from accuracy.judge.error_metrics import gamma
from accuracy.reference.exact import Exact, fsum_rows, mp_rows
from accuracy.reference.inputs import normal
from accuracy.reference.oracles import mp_list, mp_matrix, one_pass_var, rowwise

DDOF = 1  # the reference's explicit ddof for var and std: the unbiased estimator


def _abs_sum(x: np.ndarray) -> float:
    return float(np.sum(np.abs(x)))


def _exact_mean(inputs, fmt) -> Exact:
    total = fsum_rows(inputs["x"])
    n = inputs["x"].shape[-1]
    with mpmath.workprec(200):
        return Exact.from_mpf([(mpmath.mpf(float(total.hi)) + mpmath.mpf(float(total.lo))) / n], ())


def _mp_var(row, ddof=DDOF):
    mean = mpmath.fsum(row) / len(row)
    return mpmath.fsum((v - mean) ** 2 for v in row) / (len(row) - ddof)


def _var_relative_bound(x: np.ndarray, fmt) -> float:
    """Chan-Golub-LeVeque: two-pass variance errs by about (n u + n**2 kappa**2 u**2) relative."""
    n = x.size
    s = np.sum((x - x.mean()) ** 2)
    kappa2 = np.sum(x**2) / s
    return gamma(n + 3, fmt.u) + gamma(n, fmt.u) ** 2 * kappa2


def _cancelling(rng, n):
    """Pairs +a, -a (|a| ~ 100) plus N(0, 1e-3**2) noise, shuffled: sum|x| / |sum x| ~ 1e6."""
    a = normal(rng, n // 2) * 100.0
    x = np.concatenate([a, -a, np.zeros(n - 2 * (n // 2))]) + normal(rng, n) * 1e-3
    return {"x": rng.permutation(x)}


def _long_vector(scale=1.0, mean=0.0):
    return lambda rng, n: {"x": normal(rng, n, scale) + mean}


SUM = OpInfo(
    name="sum",
    doc="sum of a long vector: random N(0,1), or cancelling +-a pairs (sum|x|/|sum x| ~ 1e6) where the "
    "relative error is huge and only the bound ratio tells rounding from a bug",
    generate=_long_vector(),
    conditions={"cancelling": _cancelling},
    exact=lambda inputs, fmt: fsum_rows(inputs["x"]),
    fp64=lambda x: np.sum(x),
    bound=lambda inputs, exact, fmt: gamma(inputs["x"].size - 1, fmt.u) * _abs_sum(inputs["x"]),
    bound_doc="gamma_{n-1} * sum|x| (Higham 4.3: any summation order)",
    impls=(
        Impl("numpy", "np.sum", lambda ns, x: ns.sum(x), IEEE_DTYPES, note="pairwise summation"),
        Impl(
            "numpy", "np.dot(x, ones)", lambda ns, x: ns.dot(x, ns.ones_like(x)), SINGLE_DOUBLE, note="through BLAS dot"
        ),
        Impl("torch", "torch.sum", lambda ns, x: ns.sum(x), ALL_DTYPES, also=TORCH_VARIANTS),
        Impl(
            "torch",
            "torch.cumsum[-1]",
            lambda ns, x: ns.cumsum(x, 0)[-1],
            ALL_DTYPES,
            note="a running (recursive) sum: the error grows with n",
        ),
        Impl(
            "numpy",
            "math.fsum",
            lambda ns, x: ns.asarray(math.fsum(x.astype(ns.float64))),
            IEEE_DTYPES,
            compute={"float16": "float64", "float32": "float64"},
            note="correctly rounded (computed in float64, rounded once)",
        ),
        Impl("tensorflow", "tf.reduce_sum", lambda tf, x: tf.reduce_sum(x), TF_DTYPES),
        Impl("onnxruntime", "ReduceSum", single("ReduceSum", ("x",), keepdims=0), ORT_FLOAT64),
        Impl("libtorch", "torch::sum", lambda lt, x: lt.sum(x), LIBTORCH_DTYPES),
        Impl("jax", "jax.numpy.sum", lambda jax, x: jax.numpy.sum(x), JAX_DTYPES),
    ),
    default_size=1 << 16,
    bench_sizes=(1 << 16, 1 << 22),
    oracle=lambda inputs: [mpmath.fsum(mp_list(inputs["x"]))],
    test_size=64,
    flops=lambda n: n,
)

MEAN = OpInfo(
    name="mean",
    doc="mean of a long vector of N(0.5,1) values",
    generate=_long_vector(mean=0.5),
    exact=_exact_mean,
    fp64=lambda x: np.mean(x),
    bound=lambda inputs, exact, fmt: (
        gamma(inputs["x"].size, fmt.u) * _abs_sum(inputs["x"]) / inputs["x"].size + fmt.u * abs(float(exact.hi))
    ),
    bound_doc="gamma_n * sum|x| / n + u*|mean| (sum bound, then one division)",
    impls=(
        Impl("numpy", "np.mean", lambda ns, x: ns.mean(x), IEEE_DTYPES),
        Impl("torch", "torch.mean", lambda ns, x: ns.mean(x), ALL_DTYPES),
        Impl("tensorflow", "tf.reduce_mean", lambda tf, x: tf.reduce_mean(x), TF_DTYPES),
        Impl("onnxruntime", "ReduceMean", single("ReduceMean", ("x",), keepdims=0), ORT_FLOAT64),
        Impl("libtorch", "torch::mean", lambda lt, x: lt.mean(x), LIBTORCH_DTYPES),
        Impl("jax", "jax.numpy.mean", lambda jax, x: jax.numpy.mean(x), JAX_DTYPES),
    ),
    default_size=1 << 16,
    bench_sizes=(1 << 16, 1 << 22),
    oracle=lambda inputs: [mpmath.fsum(mp_list(inputs["x"])) / inputs["x"].size],
    test_size=64,
    flops=lambda n: n,
)

# ONNX has no variance op; TensorFlow's has no correction argument.
_FRAMEWORK_VARIANCES = (
    Impl(
        "tensorflow",
        "tf.math.reduce_variance",
        lambda tf, x: tf.math.reduce_variance(x),
        TF_DTYPES,
        semantics="ddof=0",
        note="TF's variance is the biased estimator and takes no correction",
    ),
    Impl("libtorch", "torch::var", lambda lt, x: lt.var(x), LIBTORCH_DTYPES),
    Impl("jax", "jax.numpy.var(ddof=1)", lambda jax, x: jax.numpy.var(x, ddof=1), JAX_DTYPES),
)


def _variance_op(name: str, root: bool) -> OpInfo:
    """var or std (root=True) with the reference's explicit ddof, and the spellings users meet."""

    def exact(inputs, fmt):
        return mp_rows(lambda row: [mpmath.sqrt(_mp_var(row)) if root else _mp_var(row)], inputs["x"])

    def bound(inputs, exact, fmt):
        rel = _var_relative_bound(inputs["x"], fmt)
        return (rel / 2 + gamma(2, fmt.u) if root else rel) * np.abs(exact.hi)

    return OpInfo(
        name=name,
        doc=f"{name} with explicit ddof={DDOF} of N(3,1) values (a mean that two-pass must remove)",
        generate=_long_vector(mean=3.0),
        exact=exact,
        fp64=lambda x: getattr(np, name)(x, ddof=DDOF),
        bound=bound,
        bound_doc="two-pass bound (n u + n^2 kappa^2 u^2) relative (Chan, Golub, LeVeque)"
        + ("; halved under sqrt" if root else ""),
        impls=(
            Impl("numpy", f"np.{name}(x, ddof=1)", lambda ns, x: getattr(ns, name)(x, ddof=1), IEEE_DTYPES),
            Impl(
                "torch",
                f"torch.{name}(x)",
                lambda ns, x: getattr(ns, name)(x),
                ALL_DTYPES,
                note="torch's default correction=1",
            ),
            Impl(
                "numpy",
                f"np.{name}(x)",
                lambda ns, x: getattr(ns, name)(x),
                IEEE_DTYPES,
                semantics="ddof=0",
                note="numpy's default ddof=0: the biased estimator",
            ),
            *(_FRAMEWORK_VARIANCES if name == "var" else ()),
        ),
        # n**2 u < 1 keeps the worst-case bound below ddof's 1/n effect in float32
        default_size=1024,
        bench_sizes=(1 << 10, 1 << 20),
        oracle=rowwise(lambda row: [mpmath.sqrt(one_pass_var(row, DDOF)) if root else one_pass_var(row, DDOF)]),
        test_size=64,
        flops=lambda n: 3 * n,
        min_size=DDOF + 1,
    )


VAR = _variance_op("var", root=False)
STD = _variance_op("std", root=True)


def _mp_logsumexp(row):
    return [mpmath.log(mpmath.fsum(mpmath.exp(v) for v in row))]


def _shifted_logsumexp(row):
    """max + log(sum exp(x - max)): the oracle's formula, the other one from the reference's."""
    m = max(row)
    return [m + mpmath.log(mpmath.fsum(mpmath.exp(v - m) for v in row))]


def _logsumexp_bound(inputs, exact, fmt):
    """Blanchard-Higham-Mary: shifted logsumexp errs by about u*(|lse| + n + max|x - max|)."""
    x = inputs["x"]
    return gamma(x.size + 3, fmt.u) * (np.abs(exact.hi) + 1.0 + np.max(x) - np.min(x))


LOGSUMEXP = OpInfo(
    name="logsumexp",
    doc="log(sum(exp(x))) of N(0, 3**2) values (naive form overflows float16)",
    generate=_long_vector(scale=3.0),
    exact=lambda inputs, fmt: mp_rows(_mp_logsumexp, inputs["x"]),
    fp64=lambda x: np.max(x) + np.log(np.sum(np.exp(x - np.max(x)))),  # shifted: emulable by the typical tier
    bound=_logsumexp_bound,
    bound_doc="gamma_{n+3} * (|lse| + 1 + max x - min x) (Blanchard, Higham, Mary 2021)",
    impls=(
        Impl("torch", "torch.logsumexp", lambda ns, x: ns.logsumexp(x, 0), ALL_DTYPES),
        Impl("scipy", "special.logsumexp", lambda ns, x: ns.special.logsumexp(x), SINGLE_DOUBLE),
        Impl("tensorflow", "tf.reduce_logsumexp", lambda tf, x: tf.reduce_logsumexp(x), TF_DTYPES),
        Impl("onnxruntime", "ReduceLogSumExp", single("ReduceLogSumExp", ("x",), keepdims=0), ORT_FLOAT64),
        Impl("libtorch", "torch::logsumexp", lambda lt, x: lt.logsumexp(x), LIBTORCH_DTYPES),
        Impl("jax", "jax.nn.logsumexp", lambda jax, x: jax.nn.logsumexp(x), JAX_DTYPES),
        Impl(
            "numpy",
            "log(sum(exp(x)))",
            lambda ns, x: ns.log(ns.sum(ns.exp(x))),
            IEEE_DTYPES,
            stable=False,
            note="unshifted: overflows where exp(max x) does",
        ),
    ),
    default_size=4096,
    bench_sizes=(1 << 12, 1 << 20),
    oracle=rowwise(_shifted_logsumexp),
    test_size=64,
    flops=lambda n: 2 * n,
)


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


CUMSUM = OpInfo(
    name="cumsum",
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
    default_size=1024,
    bench_sizes=(1 << 12, 1 << 14),
    oracle=lambda inputs: list(itertools.accumulate(mp_list(inputs["x"]))),
    test_size=64,
    flops=lambda n: n,
)


def _mp_norm(row):
    return [mpmath.sqrt(mpmath.fsum(v * v for v in row))]


def _norm_bound(inputs, exact, fmt):
    """sum of n squares: gamma_{n} relative (all terms positive), halved by sqrt, + 2 roundings."""
    x = inputs["x"]
    return gamma(x.size + 2, fmt.u) * np.abs(exact.hi)


VECTOR_NORM = OpInfo(
    name="vector_norm",
    doc="Euclidean norm ||x||_2 of an N(0,1) vector",
    generate=lambda rng, n: {"x": normal(rng, n)},
    exact=lambda inputs, fmt: mp_rows(_mp_norm, inputs["x"]),
    fp64=lambda x: np.sqrt(np.sum(x * x)),  # np.linalg.norm's formula, spelled so the typical tier can emulate it
    bound=_norm_bound,
    bound_doc="gamma_{n+2} * ||x||: a sum of n non-negative squares, then sqrt (scaled nrm2 included)",
    impls=(
        # unlike solve or inv, norm does not upcast float32: it is sqrt(x.dot(x)) in the input's dtype
        Impl("numpy", "np.linalg.norm", lambda ns, x: ns.linalg.norm(x), IEEE_DTYPES, compute={"float32": "float32"}),
        Impl("scipy", "linalg.norm", lambda ns, x: ns.linalg.norm(x), SINGLE_DOUBLE, note="BLAS ?nrm2"),
        Impl("torch", "torch.linalg.vector_norm", lambda ns, x: ns.linalg.vector_norm(x), ALL_DTYPES),
        Impl("numpy", "sqrt(sum(x*x))", lambda ns, x: ns.sqrt(ns.sum(x * x)), IEEE_DTYPES),
    ),
    default_size=1024,
    bench_sizes=(1 << 16, 1 << 20),
    oracle=lambda inputs: [mpmath.norm(mp_list(inputs["x"]), 2)],
    test_size=64,
    flops=lambda n: 2.0 * n,
)


def _scalar(e: Exact) -> Exact:
    return e.map(np.squeeze)


MATRIX_NORM = OpInfo(
    name="matrix_norm",
    doc="Frobenius norm of an n x n N(0,1) matrix",
    generate=lambda rng, n: {"x": normal(rng, (n, n))},
    exact=lambda inputs, fmt: _scalar(mp_rows(_mp_norm, inputs["x"].reshape(1, -1))),
    fp64=lambda x: np.sqrt(np.sum(x * x)),  # the Frobenius norm, spelled so the typical tier can emulate it
    bound=_norm_bound,
    bound_doc="gamma_{n*n+2} * ||A||_F: the vector norm of all n*n entries",
    impls=(
        Impl("numpy", "np.linalg.norm(fro)", lambda ns, x: ns.linalg.norm(x, "fro"), IEEE_DTYPES),
        Impl("scipy", "linalg.norm", lambda ns, x: ns.linalg.norm(x), SINGLE_DOUBLE),
        Impl("torch", "torch.linalg.matrix_norm", lambda ns, x: ns.linalg.matrix_norm(x), ALL_DTYPES),
    ),
    default_size=32,
    bench_sizes=(256, 1024),
    oracle=lambda inputs: [mpmath.mnorm(mp_matrix(inputs["x"]), "f")],
    test_size=8,
    flops=lambda n: 2.0 * n * n,
)


OPS = [SUM, MEAN, VAR, STD, LOGSUMEXP, CUMSUM, VECTOR_NORM, MATRIX_NORM]
