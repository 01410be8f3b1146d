"""Attention: scaled_dot_product_attention without a mask.

Scores exactly (exact_gemm), the softmax in 200-bit mpmath, P @ V exactly; a first-order bound chains the
score, softmax and product errors.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import scipy

from accuracy.backends.jax import dot_product_attention
from accuracy.backends.onnxruntime import ATTENTION
from accuracy.catalog.ops.common import IN_STORAGE, mp_softmax
from accuracy.catalog.ops.frameworks import LIBTORCH_DTYPES, ORT_DTYPES, gpu_note
from accuracy.catalog.registry import Impl, OpInfo
from accuracy.core.dtypes import ALL_DTYPES, IEEE_DTYPES
from accuracy.judge.error_metrics import gamma
from accuracy.reference.exact import mp_rows
from accuracy.reference.exact_gemm import exact_matmul
from accuracy.reference.inputs import normal
from accuracy.reference.oracles import mp, mp_dot

HEADS, HEAD_DIM = 4, 16  # 1/sqrt(16) = 1/4 scales exactly


def _sdpa_inputs(rng, n):
    return {k: normal(rng, (HEADS, n, HEAD_DIM)) for k in ("q", "k", "v")}


def _sdpa_exact(inputs, fmt):
    """Scores exactly (as double-double), softmax in 200-bit mpmath, P @ V exactly on P = hi + lo."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    s = exact_matmul(q, np.swapaxes(k, -1, -2))
    scale = 1.0 / math.sqrt(HEAD_DIM)

    def row(hi, lo):
        return mp_softmax([(high + low) * scale for high, low in zip(hi, lo, strict=False)])

    p = mp_rows(row, s.hi, s.lo)
    return exact_matmul(np.concatenate([p.hi, p.lo], axis=-1), np.concatenate([v, v], axis=-2))


def _sdpa_bound(inputs, exact, fmt):
    """First order: score errors ds <= gamma_d |q||k|/sqrt(d) perturb P by <= 2 P max|ds|; the softmax
    itself errs by (gamma_{n+5} + 2u spread) P; P @ V adds gamma_n |P||V|."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    n = q.shape[-2]
    scale = 1.0 / math.sqrt(HEAD_DIM)
    s = (q @ np.swapaxes(k, -1, -2)) * scale
    ds = gamma(HEAD_DIM + 1, fmt.u) * (np.abs(q) @ np.abs(np.swapaxes(k, -1, -2))) * scale
    p = scipy.special.softmax(s, axis=-1)
    spread = s.max(axis=-1, keepdims=True) - s.min(axis=-1, keepdims=True)
    rel_p = gamma(n + 5, fmt.u) + 2 * fmt.u * spread + 2 * ds.max(axis=-1, keepdims=True)
    return (rel_p + gamma(n, fmt.u)) * (p @ np.abs(v)) + fmt.smallest_subnormal


def _np_sdpa(ns, q, k, v):
    s = q @ ns.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    e = ns.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


def _sdpa_oracle(inputs):
    """Each output row: the unshifted exp(q.k_j/sqrt(d))-weighted mean of the rows v_j."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    out = []
    for qh, kh, vh in zip(q, k, v, strict=False):
        for qi in qh:
            e = [mpmath.exp(mp_dot(qi, kj) / mpmath.sqrt(HEAD_DIM)) for kj in kh]
            total = mpmath.fsum(e)
            out += [
                mpmath.fsum(ej * mp(vj[c]) for ej, vj in zip(e, vh, strict=False)) / total for c in range(vh.shape[1])
            ]
    return out


SCALED_DOT_PRODUCT_ATTENTION = OpInfo(
    name="scaled_dot_product_attention",
    doc=f"softmax(q k^T / sqrt(d)) v, {HEADS} heads, sequence length n, head dim {HEAD_DIM}, no mask",
    generate=_sdpa_inputs,
    exact=_sdpa_exact,
    fp64=lambda q, k, v: _np_sdpa(np, q, k, v),
    bound=_sdpa_bound,
    bound_doc="first order: (gamma_{n+5} + 2u spread(s) + 2 max|ds| + gamma_n) * P|V|, ds = gamma_{d+1}|q||k|/sqrt(d)",
    impls=(
        Impl(
            "torch",
            "F.scaled_dot_product_attention",
            lambda ns, q, k, v: ns.nn.functional.scaled_dot_product_attention(q, k, v),
            ALL_DTYPES,
        ),
        Impl(
            "torch",
            "softmax(q @ k.T / sqrt(d)) @ v",
            lambda ns, q, k, v: ns.softmax(q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM), -1) @ v,
            ALL_DTYPES,
            compute=IN_STORAGE,
        ),
        Impl("numpy", "softmax(q @ k.T / sqrt(d)) @ v", _np_sdpa, IEEE_DTYPES),
        Impl("onnxruntime", "Attention (opset 23)", ATTENTION, ORT_DTYPES),
        Impl("libtorch", "torch::scaled_dot_product_attention", lambda lt, q, k, v: lt.sdpa(q, k, v), LIBTORCH_DTYPES),
        # float64 left out: measured here, it returns float32 accuracy (error 1.2e7x the float64 bound)
        Impl("jax", "jax.nn.dot_product_attention", dot_product_attention, ("float32",), note=gpu_note("jax")),
    ),
    default_size=64,
    bench_sizes=(256, 1024),
    oracle=_sdpa_oracle,
    test_size=4,
    flops=lambda n: 4.0 * HEADS * n * n * HEAD_DIM,
)


OPS = [SCALED_DOT_PRODUCT_ATTENTION]
