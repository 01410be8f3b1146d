"""Products: matmul, linear (x @ W.T + b, five spellings), gemv, dot, bmm, baddbmm.

Exact references come from Ozaki's error-free splitting (accuracy/reference/exact_gemm.py, validated against
mpmath in the tests); bounds are Higham's gamma_k * |A||B| (Theorem 3.5), which any blocking,
ordering or threading of the sums satisfies.
"""

from __future__ import annotations

import numpy as np

from accuracy.backends import TORCH_VARIANTS
from accuracy.backends.onnxruntime import LINEAR_MATMUL_ADD, ORT_VARIANTS, single
from accuracy.backends.tensorflow import dense
from accuracy.catalog.ops.common import IN_STORAGE
from accuracy.catalog.ops.frameworks import JAX_DTYPES, LIBTORCH_DTYPES, ORT_FLOAT64, TF_DTYPES, gpu_note
from accuracy.catalog.registry import Impl, OpInfo
from accuracy.core.dtypes import ALL_DTYPES, IEEE_DTYPES, SINGLE_DOUBLE
from accuracy.judge.error_metrics import gamma
from accuracy.reference.exact_gemm import exact_matmul
from accuracy.reference.inputs import normal
from accuracy.reference.oracles import mp, mp_dot, mp_matmul


def _scipy_gemm(ns, a, b):
    gemm = ns.linalg.blas.sgemm if a.dtype == np.float32 else ns.linalg.blas.dgemm
    return gemm(1.0, a, b)


def _scipy_dot(ns, x, y):
    dot = ns.linalg.blas.sdot if x.dtype == np.float32 else ns.linalg.blas.ddot
    return dot(x, y)


MATMUL = OpInfo(
    name="matmul",
    doc="C = A @ B for square N(0,1) matrices of order n",
    generate=lambda rng, n: {"a": normal(rng, (n, n)), "b": normal(rng, (n, n))},
    exact=lambda inputs, fmt: exact_matmul(inputs["a"], inputs["b"]),
    fp64=lambda a, b: a @ b,
    bound=lambda inputs, exact, fmt: gamma(inputs["a"].shape[1], fmt.u) * (np.abs(inputs["a"]) @ np.abs(inputs["b"])),
    bound_doc="gamma_n * |A||B| (Higham, Theorem 3.5)",
    impls=(
        Impl("numpy", "a @ b", lambda ns, a, b: a @ b, IEEE_DTYPES),
        Impl(
            "numpy",
            "einsum('ik,kj->ij')",
            lambda ns, a, b: ns.einsum("ik,kj->ij", a, b),
            IEEE_DTYPES,
            note="numpy's own loops unless optimize=True: no BLAS",
        ),
        Impl("scipy", "linalg.blas.?gemm", _scipy_gemm, SINGLE_DOUBLE),
        Impl("torch", "torch.matmul", lambda ns, a, b: ns.matmul(a, b), ALL_DTYPES, also=TORCH_VARIANTS),
        Impl(
            "tensorflow",
            "tf.linalg.matmul",
            lambda tf, a, b: tf.linalg.matmul(a, b),
            TF_DTYPES,
            note=gpu_note("tensorflow"),
        ),
        Impl("onnxruntime", "MatMul", single("MatMul", ("a", "b")), ORT_FLOAT64, note=gpu_note("onnxruntime")),
        Impl("libtorch", "torch::matmul", lambda lt, a, b: lt.matmul(a, b), LIBTORCH_DTYPES, note=gpu_note("libtorch")),
        Impl("jax", "jax.numpy.matmul", lambda jax, a, b: jax.numpy.matmul(a, b), JAX_DTYPES, note=gpu_note("jax")),
        Impl(
            "blas",
            "gemm",
            lambda ns, a, b: ns.call("gemm", a, b),
            SINGLE_DOUBLE,
            note="cblas_?gemm called through ctypes, one implementation per BLAS library found",
        ),
    ),
    default_size=128,
    bench_sizes=(128, 512),
    oracle=lambda inputs: mp_matmul(inputs["a"], inputs["b"]),
    test_size=8,
    flops=lambda n: 2.0 * n**3,
)

_LINEAR_BATCH = 32


def _linear_shapes(rng, n):
    """x (32, n) @ W.T with W (n/4, n), as in a projection layer."""
    out = max(n // 4, 1)
    return {"x": normal(rng, (_LINEAR_BATCH, n)), "W": normal(rng, (out, n)), "b": normal(rng, out)}


def _linear_exact(inputs, fmt):
    """x @ W.T + b as one exact product [x, 1] @ [W.T; b]: the bias joins the exact sum."""
    x, W, b = inputs["x"], inputs["W"], inputs["b"]
    ones = np.ones((x.shape[0], 1))
    return exact_matmul(np.hstack([x, ones]), np.vstack([W.T, b[None, :]]))


def _linear_bound(inputs, exact, fmt):
    x, W, b = inputs["x"], inputs["W"], inputs["b"]
    return gamma(x.shape[1] + 1, fmt.u) * (np.abs(x) @ np.abs(W.T) + np.abs(b))


def _linear_from_the_bias(x, W, b):
    """x @ W.T + b summed from the bias, as a GEMM kernel that starts its accumulators at the
    bias does (XNNPACK's): every term is then rounded at the bias's magnitude, which is far the
    larger error where the bias outweighs the products. Elsewhere both orders err alike."""
    ones = np.ones((*x.shape[:-1], 1))
    return np.concatenate([ones, x], axis=-1) @ np.concatenate([b[:, None], W], axis=1).T


LINEAR = OpInfo(
    name="linear",
    doc="y = x @ W.T + b, the fully connected layer",
    generate=_linear_shapes,
    exact=_linear_exact,
    fp64=lambda x, W, b: x @ W.T + b,
    working=_linear_from_the_bias,
    bound=_linear_bound,
    bound_doc="gamma_{n+1} * (|x||W.T| + |b|): the bias is one more term of the sum",
    impls=(
        Impl(
            "torch", "F.linear", lambda ns, x, W, b: ns.nn.functional.linear(x, W, b), ALL_DTYPES, also=TORCH_VARIANTS
        ),
        Impl(
            "torch", "x @ W.T + b", lambda ns, x, W, b: x @ W.T + b, ALL_DTYPES, also=TORCH_VARIANTS, compute=IN_STORAGE
        ),
        Impl("torch", "addmm(b, x, W.T)", lambda ns, x, W, b: ns.addmm(b, x, W.T), ALL_DTYPES),
        Impl("numpy", "x @ W.T + b", lambda ns, x, W, b: x @ W.T + b, IEEE_DTYPES),
        Impl("numpy", "einsum('bi,oi->bo') + b", lambda ns, x, W, b: ns.einsum("bi,oi->bo", x, W) + b, IEEE_DTYPES),
        Impl("tensorflow", "Dense: bias_add(matmul(x, W.T), b)", dense, TF_DTYPES, note=gpu_note("tensorflow")),
        Impl("onnxruntime", "Gemm(transB=1)", single("Gemm", ("x", "W", "b"), transB=1), ORT_FLOAT64),
        Impl(
            "onnxruntime",
            "MatMul(x, Transpose(W)) + b graph",
            LINEAR_MATMUL_ADD,
            ORT_FLOAT64,
            also=ORT_VARIANTS,
            note="what exporters write for a 2-D linear; ORT's optimizer fuses it into Gemm",
        ),
        Impl("libtorch", "torch::linear", lambda lt, x, W, b: lt.linear(x, W, b), LIBTORCH_DTYPES),
        Impl("jax", "x @ W.T + b (flax Dense)", lambda jax, x, W, b: jax.numpy.dot(x, W.T) + b, JAX_DTYPES),
    ),
    default_size=2048,
    bench_sizes=(512, 2048),
    oracle=lambda inputs: [
        v + mp(b)
        for v, b in zip(mp_matmul(inputs["x"], inputs["W"].T), np.tile(inputs["b"], len(inputs["x"])), strict=False)
    ],
    test_size=8,
    flops=lambda n: 2.0 * _LINEAR_BATCH * n * max(n // 4, 1),
)

GEMV = OpInfo(
    name="gemv",
    doc="y = A @ x for an n x n N(0,1) matrix",
    generate=lambda rng, n: {"a": normal(rng, (n, n)), "x": normal(rng, n)},
    exact=lambda inputs, fmt: exact_matmul(inputs["a"], inputs["x"][:, None]).map(np.ravel),
    fp64=lambda a, x: a @ x,
    bound=lambda inputs, exact, fmt: gamma(inputs["a"].shape[1], fmt.u) * (np.abs(inputs["a"]) @ np.abs(inputs["x"])),
    bound_doc="gamma_n * |A||x|",
    impls=(
        Impl("numpy", "a @ x", lambda ns, a, x: a @ x, IEEE_DTYPES),
        Impl("torch", "torch.mv", lambda ns, a, x: ns.mv(a, x), ALL_DTYPES),
        Impl("blas", "gemv", lambda ns, a, x: ns.call("gemv", a, x), SINGLE_DOUBLE),
    ),
    default_size=512,
    bench_sizes=(512, 2048),
    oracle=lambda inputs: mp_matmul(inputs["a"], inputs["x"][:, None]),
    test_size=16,
    flops=lambda n: 2.0 * n**2,
    version=2,  # 2: the reference is a vector, as the output is
)

DOT = OpInfo(
    name="dot",
    doc="x . y for N(0,1) vectors",
    generate=lambda rng, n: {"x": normal(rng, n), "y": normal(rng, n)},
    exact=lambda inputs, fmt: exact_matmul(inputs["x"][None, :], inputs["y"][:, None]).map(np.squeeze),
    fp64=lambda x, y: np.dot(x, y),
    bound=lambda inputs, exact, fmt: gamma(inputs["x"].size, fmt.u) * np.abs(inputs["x"]) @ np.abs(inputs["y"]),
    bound_doc="gamma_n * |x|.|y|",
    impls=(
        Impl("numpy", "np.dot", lambda ns, x, y: ns.dot(x, y), IEEE_DTYPES),
        Impl("numpy", "np.sum(x * y)", lambda ns, x, y: ns.sum(x * y), IEEE_DTYPES),
        Impl("scipy", "linalg.blas.?dot", _scipy_dot, SINGLE_DOUBLE),
        Impl("torch", "torch.dot", lambda ns, x, y: ns.dot(x, y), ALL_DTYPES),
        Impl("blas", "dot", lambda ns, x, y: ns.call("dot", x, y), SINGLE_DOUBLE),
    ),
    default_size=1 << 16,
    bench_sizes=(1 << 12, 1 << 20),
    oracle=lambda inputs: [mp_dot(inputs["x"], inputs["y"])],
    test_size=64,
    flops=lambda n: 2.0 * n,
    version=2,  # 2: the reference is a scalar, as the output is
)


BATCH = 4

# -- bmm, baddbmm ---------------------------------------------------------------------------


def _bmm_inputs(rng, n):
    return {"a": normal(rng, (BATCH, n, n)), "b": normal(rng, (BATCH, n, n))}


BMM = OpInfo(
    name="bmm",
    doc=f"batched A @ B, {BATCH} pairs of square N(0,1) matrices of order n",
    generate=_bmm_inputs,
    exact=lambda inputs, fmt: exact_matmul(inputs["a"], inputs["b"]),
    fp64=lambda a, b: a @ b,
    bound=lambda inputs, exact, fmt: gamma(inputs["a"].shape[-1], fmt.u) * (np.abs(inputs["a"]) @ np.abs(inputs["b"])),
    bound_doc="gamma_n * |A||B| per batch (Higham, Theorem 3.5)",
    impls=(
        Impl("torch", "torch.bmm", lambda ns, a, b: ns.bmm(a, b), ALL_DTYPES),
        Impl("torch", "torch.matmul", lambda ns, a, b: ns.matmul(a, b), ALL_DTYPES),
        Impl("numpy", "a @ b", lambda ns, a, b: a @ b, IEEE_DTYPES),
        Impl("numpy", "einsum('bik,bkj->bij')", lambda ns, a, b: ns.einsum("bik,bkj->bij", a, b), IEEE_DTYPES),
    ),
    default_size=64,
    bench_sizes=(64, 256),
    oracle=lambda inputs: mp_matmul(inputs["a"], inputs["b"]),
    test_size=4,
    flops=lambda n: 2.0 * BATCH * n**3,
)


def _baddbmm_exact(inputs, fmt):
    """c + a @ b as one exact product [a, I] @ [b; c]: c joins the exact sum."""
    a, b, c = inputs["a"], inputs["b"], inputs["c"]
    eye = np.broadcast_to(np.eye(a.shape[-1]), a.shape)
    return exact_matmul(np.concatenate([a, eye], axis=-1), np.concatenate([b, c], axis=-2))


BADDBMM = OpInfo(
    name="baddbmm",
    doc=f"C + A @ B batched ({BATCH} triples of N(0,1) matrices of order n)",
    generate=lambda rng, n: {**_bmm_inputs(rng, n), "c": normal(rng, (BATCH, n, n))},
    exact=_baddbmm_exact,
    fp64=lambda a, b, c: c + a @ b,
    bound=lambda inputs, exact, fmt: (
        gamma(inputs["a"].shape[-1] + 1, fmt.u) * (np.abs(inputs["a"]) @ np.abs(inputs["b"]) + np.abs(inputs["c"]))
    ),
    bound_doc="gamma_{n+1} * (|A||B| + |C|): C is one more term of each sum",
    impls=(
        Impl("torch", "torch.baddbmm", lambda ns, a, b, c: ns.baddbmm(c, a, b), ALL_DTYPES),
        Impl("torch", "c + a @ b", lambda ns, a, b, c: c + a @ b, ALL_DTYPES, compute=IN_STORAGE),
        Impl("numpy", "c + a @ b", lambda ns, a, b, c: c + a @ b, IEEE_DTYPES),
    ),
    default_size=64,
    bench_sizes=(64, 256),
    oracle=lambda inputs: [
        v + mp(c) for v, c in zip(mp_matmul(inputs["a"], inputs["b"]), inputs["c"].ravel(), strict=False)
    ],
    test_size=4,
    flops=lambda n: 2.0 * BATCH * n**3,
)


OPS = [MATMUL, LINEAR, GEMV, DOT, BMM, BADDBMM]
