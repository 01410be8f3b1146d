"""Neural-network layers: softmax, log_softmax, layer_norm, conv1d (rows of length n).

Row-wise exact references come from 200-bit mpmath; conv1d's from Dot2 over its im2col form.
Bounds are first-order ones from the shifted-exponential analysis of Blanchard, Higham and Mary
(softmax) and from the sum/variance bounds (layer_norm), so every stable algorithm meets them.
"""

from __future__ import annotations

import mpmath
import numpy as np
import scipy.special

from accuracy.backends import TORCH_VARIANTS
from accuracy.dtypes import ALL_DTYPES, IEEE_DTYPES
from accuracy.exact import dot2_matmul, mp_rows
from accuracy.inputs import normal
from accuracy.metrics import gamma
from accuracy.registry import Impl, OpInfo, register

ROWS = 16
SCIPY_DTYPES = ("float32", "float64")
LAYER_NORM_EPS = 1e-5


def _rows(scale=1.0, mean=0.0):
    return lambda rng, n: {"x": normal(rng, (ROWS, n), scale) + mean}


def _mp_softmax(row):
    m = max(row)
    e = [mpmath.exp(v - m) for v in row]
    s = mpmath.fsum(e)
    return [v / s for v in e]


def _mp_log_softmax(row):
    m = max(row)
    lse = m + mpmath.log(mpmath.fsum(mpmath.exp(v - m) for v in row))
    return [v - lse for v in row]


def _spread(x):
    return (x.max(axis=-1, keepdims=True) - x.min(axis=-1, keepdims=True))


def _softmax_bound(inputs, exact, fmt):
    """exp(x - max) carries relative error ~u*|x - max|; the row sum adds gamma_n."""
    x = inputs["x"]
    return (gamma(x.shape[-1] + 3, fmt.u) + 2 * fmt.u * _spread(x)) * np.abs(exact.hi) + fmt.smallest_subnormal


def _log_softmax_bound(inputs, exact, fmt):
    x = inputs["x"]
    return gamma(x.shape[-1] + 3, fmt.u) * (np.abs(exact.hi) + _spread(x) + 1.0)


def _np_softmax(ns, x):
    e = ns.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _np_log_softmax(ns, x):
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - ns.log(ns.exp(shifted).sum(axis=-1, keepdims=True))


register(OpInfo(
    name="softmax", family="nn",
    doc=f"softmax over the last axis of {ROWS} rows of N(0, 2**2) logits",
    generate=_rows(scale=2.0),
    exact=lambda inputs, fmt: mp_rows(_mp_softmax, inputs["x"]),
    fp64=lambda x: scipy.special.softmax(x, axis=-1),
    bound=_softmax_bound,
    bound_doc="(gamma_{n+3} + 2u*(max x - min x)) * softmax(x) (Blanchard, Higham, Mary 2021)",
    impls=(
        Impl("torch", "torch.softmax", lambda ns, x: ns.softmax(x, -1), ALL_DTYPES, also=TORCH_VARIANTS),
        Impl("scipy", "special.softmax", lambda ns, x: ns.special.softmax(x, axis=-1), SCIPY_DTYPES),
        Impl("numpy", "exp(x - max) / sum", _np_softmax, IEEE_DTYPES),
    ),
    default_size=1024, bench_sizes=(1024, 1 << 15),
    flops=lambda n: 4.0 * ROWS * n,
))

register(OpInfo(
    name="log_softmax", family="nn",
    doc=f"log_softmax over the last axis of {ROWS} rows of N(0, 2**2) logits",
    generate=_rows(scale=2.0),
    exact=lambda inputs, fmt: mp_rows(_mp_log_softmax, inputs["x"]),
    fp64=lambda x: scipy.special.log_softmax(x, axis=-1),
    bound=_log_softmax_bound,
    bound_doc="gamma_{n+3} * (|y| + max x - min x + 1)",
    impls=(
        Impl("torch", "F.log_softmax", lambda ns, x: ns.nn.functional.log_softmax(x, -1), ALL_DTYPES),
        Impl("scipy", "special.log_softmax", lambda ns, x: ns.special.log_softmax(x, axis=-1), SCIPY_DTYPES),
        Impl("numpy", "x - max - log(sum(exp))", _np_log_softmax, IEEE_DTYPES),
        Impl("torch", "log(softmax(x))", lambda ns, x: ns.log(ns.softmax(x, -1)), ALL_DTYPES,
             note="log of a rounded probability: loses the tail where softmax underflows"),
    ),
    default_size=1024, bench_sizes=(1024, 1 << 15),
    flops=lambda n: 4.0 * ROWS * n,
))


def _layer_norm_inputs(rng, n):
    return {"x": normal(rng, (ROWS, n)) + 2.0, "w": normal(rng, n), "b": normal(rng, n)}


def _mp_layer_norm(row, w, b):
    n = len(row)
    mean = mpmath.fsum(row) / n
    var = mpmath.fsum((v - mean) ** 2 for v in row) / n
    inv = 1 / mpmath.sqrt(var + LAYER_NORM_EPS)
    return [(v - mean) * inv * wi + bi for v, wi, bi in zip(row, w, b)]


def _layer_norm_exact(inputs, fmt):
    x, w, b = inputs["x"], inputs["w"], inputs["b"]
    return mp_rows(_mp_layer_norm, x, np.broadcast_to(w, x.shape), np.broadcast_to(b, x.shape))


def _layer_norm_bound(inputs, exact, fmt):
    """First order: z = (x - mean)/sigma errs by |z|*rel(sigma) + gamma_n*mean|x|/sigma; then w*z + b."""
    x, w, b = inputs["x"], inputs["w"], inputs["b"]
    n = x.shape[-1]
    mean = x.mean(axis=-1, keepdims=True)
    sigma = np.sqrt(x.var(axis=-1, keepdims=True) + LAYER_NORM_EPS)
    z = (x - mean) / sigma
    kappa2 = (x**2).sum(axis=-1, keepdims=True) / ((x - mean) ** 2).sum(axis=-1, keepdims=True)
    rel_sigma = (gamma(n + 3, fmt.u) + gamma(n, fmt.u) ** 2 * kappa2) / 2 + gamma(3, fmt.u)
    z_err = np.abs(z) * rel_sigma + gamma(n + 1, fmt.u) * np.abs(x).mean(axis=-1, keepdims=True) / sigma
    return np.abs(w) * z_err + gamma(2, fmt.u) * (np.abs(w * z) + np.abs(b))


def _np_layer_norm(ns, x, w, b):
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / ns.sqrt(var + LAYER_NORM_EPS) * w + b


register(OpInfo(
    name="layer_norm", family="nn",
    doc=f"layer_norm over the last axis of {ROWS} rows of N(2,1), eps={LAYER_NORM_EPS}, affine w, b",
    generate=_layer_norm_inputs,
    exact=_layer_norm_exact,
    fp64=lambda x, w, b: _np_layer_norm(np, x, w, b),
    bound=_layer_norm_bound,
    bound_doc="first-order: |w|*(|z| rel(sigma) + gamma_{n+1} mean|x|/sigma) + gamma_2(|w z| + |b|)",
    impls=(
        Impl("torch", "F.layer_norm", lambda ns, x, w, b: ns.nn.functional.layer_norm(
            x, (x.shape[-1],), w, b, eps=LAYER_NORM_EPS), ALL_DTYPES, also=TORCH_VARIANTS),
        Impl("numpy", "(x - mean)/sqrt(var + eps)*w + b", _np_layer_norm, IEEE_DTYPES),
    ),
    default_size=1024, bench_sizes=(1024, 1 << 14),
    flops=lambda n: 8.0 * ROWS * n,
))

CONV_BATCH, CONV_CHANNELS, CONV_KERNEL = 4, 16, 5


def _conv1d_inputs(rng, n):
    return {
        "x": normal(rng, (CONV_BATCH, CONV_CHANNELS, n)),
        "w": normal(rng, (CONV_CHANNELS, CONV_CHANNELS, CONV_KERNEL)),
        "b": normal(rng, CONV_CHANNELS),
    }


def _im2col(x):
    """(batch, cin, L) -> (batch, L-k+1, cin*k): each output position's receptive field."""
    windows = np.lib.stride_tricks.sliding_window_view(x, CONV_KERNEL, axis=-1)  # b, cin, L', k
    return windows.transpose(0, 2, 1, 3).reshape(x.shape[0], windows.shape[2], -1)


def _conv1d_exact(inputs, fmt):
    """conv1d (cross-correlation) as Dot2 over [im2col(x), 1] @ [w.T; b]."""
    x, w, b = inputs["x"], inputs["w"], inputs["b"]
    cols = _im2col(x)
    a = np.concatenate([cols, np.ones(cols.shape[:-1] + (1,))], axis=-1)
    weights = np.vstack([w.reshape(w.shape[0], -1).T, b[None, :]])
    e = dot2_matmul(a.reshape(-1, a.shape[-1]), weights)
    shape = (x.shape[0], cols.shape[1], w.shape[0])
    return e.map(lambda a: a.reshape(shape).transpose(0, 2, 1))


def _conv1d_bound(inputs, exact, fmt):
    x, w, b = inputs["x"], inputs["w"], inputs["b"]
    k = w.shape[1] * w.shape[2] + 1
    mag = np.einsum("blk,ok->bol", np.abs(_im2col(x)), np.abs(w.reshape(w.shape[0], -1)))
    return gamma(k, fmt.u) * (mag + np.abs(b)[None, :, None])


def _np_conv1d(ns, x, w, b):
    windows = ns.lib.stride_tricks.sliding_window_view(x, w.shape[-1], axis=-1)
    return ns.einsum("bclk,ock->bol", windows, w) + b[None, :, None]


register(OpInfo(
    name="conv1d", family="nn",
    doc=f"conv1d, batch {CONV_BATCH}, {CONV_CHANNELS}->{CONV_CHANNELS} channels, kernel {CONV_KERNEL}, length n",
    generate=_conv1d_inputs,
    exact=_conv1d_exact,
    fp64=lambda x, w, b: _np_conv1d(np, x, w, b),
    bound=_conv1d_bound,
    bound_doc="gamma_{cin*k+1} * (|w| * |x| + |b|): each output is one dot product",
    impls=(
        Impl("torch", "F.conv1d", lambda ns, x, w, b: ns.nn.functional.conv1d(x, w, b), ALL_DTYPES,
             also=TORCH_VARIANTS),
        Impl("numpy", "einsum over sliding windows", _np_conv1d, IEEE_DTYPES),
    ),
    default_size=256, bench_sizes=(256, 4096),
    flops=lambda n: 2.0 * CONV_BATCH * CONV_CHANNELS * CONV_CHANNELS * CONV_KERNEL * (n - CONV_KERNEL + 1),
))
