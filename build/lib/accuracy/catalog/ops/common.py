"""Helpers the op modules share: row layouts, the elementwise-op template, softmax and
layer-norm pieces, and conv_transpose1d's exact form (also conv1d's input gradient).

Public by design: an op module imports from here, never from another op module.
"""

from __future__ import annotations

import mpmath
import numpy as np

from accuracy.catalog.registry import OpInfo
from accuracy.judge.error_metrics import gamma
from accuracy.reference.correctly_rounded import correctly_rounded
from accuracy.reference.exact import Exact
from accuracy.reference.exact_gemm import exact_matmul
from accuracy.reference.inputs import normal, uniform
from accuracy.reference.oracles import elementwise

# Impl.compute for a formula of several ops, each rounding its result to the stored format:
# it computes in storage even where its backend's kernels alone compute wider (accuracy.judge.precision)
IN_STORAGE = {"float16": "float16", "bfloat16": "bfloat16"}
ROWS = 16  # rows of the row-wise ops (softmax, layer_norm, their gradients)
LAYER_NORM_EPS = 1e-5
CONV_BATCH, CONV_CHANNELS, CONV_KERNEL = 4, 16, 5  # conv1d and its gradient


def rows_of(scale=1.0, mean=0.0):
    """Inputs {"x": ROWS rows of length n, N(mean, scale**2)}."""
    return lambda rng, n: {"x": normal(rng, (ROWS, n), scale) + mean}


def elementwise_op(
    name, *, low, high, np64, mp, oracle, k, impls, doc, scale_with_x=False, accurate64=None, version=1
) -> OpInfo:
    """An elementwise op: x uniform in [low, high], exact = correctly rounded f(x),
    bound k*u*|f(x)| (+ the smallest subnormal, for underflow).

    `oracle` is f again in mpmath by another formula than `mp` (the tests check one against the other).

    `scale_with_x` widens the bound to k*u*(|f(x)| + |x|) for functions defined by a formula that
    cancels (GELU's 1 + erf(x/sqrt2) for x << 0): every faithful evaluation of the formula errs
    by about u*|x| there, so the tighter bound would call rounding a bug. Such a function also gives
    `accurate64`, a float64 evaluation good to a few ulps everywhere: the correctly rounded reference
    starts from it, while the fp64 reference (and the typical-error model) keep the plain formula `np64`.
    """

    def bound(inputs, exact, fmt):
        scale = np.abs(exact.hi) + (np.abs(inputs["x"]) if scale_with_x else 0.0)
        return k * fmt.u * scale + fmt.smallest_subnormal

    return OpInfo(
        name=name,
        doc=doc,
        generate=lambda rng, n: {"x": uniform(rng, n, low, high)},
        exact=lambda inputs, fmt: correctly_rounded(accurate64 or np64, mp, inputs["x"], fmt),
        fp64=lambda x: np64(x),
        bound=bound,
        bound_doc=f"{k}*u*(|f(x)|{' + |x|' if scale_with_x else ''}): "
        + ("a few ulps, what a vectorised libm promises" if k >= 1 else "below an ulp: the result must be exact"),
        impls=tuple(impls),
        default_size=4096,
        bench_sizes=(1 << 16, 1 << 20),
        version=version,
        oracle=elementwise(oracle),
        test_size=256,  # enough values for some to fall near a rounding midpoint
    )


def mp_softmax(row):
    m = max(row)
    e = [mpmath.exp(v - m) for v in row]
    s = mpmath.fsum(e)
    return [v / s for v in e]


def spread(x):
    return x.max(axis=-1, keepdims=True) - x.min(axis=-1, keepdims=True)


def softmax_bound(inputs, exact, fmt):
    """exp(x - max) carries relative error ~u*|x - max|; the row sum adds gamma_n."""
    x = inputs["x"]
    return (gamma(x.shape[-1] + 3, fmt.u) + 2 * fmt.u * spread(x)) * np.abs(exact.hi) + fmt.smallest_subnormal


def layer_norm_inputs(rng, n):
    return {"x": normal(rng, (ROWS, n)) + 2.0, "w": normal(rng, n), "b": normal(rng, n)}


def mp_layer_norm(row, w, b):
    n = len(row)
    mean = mpmath.fsum(row) / n
    var = mpmath.fsum((v - mean) ** 2 for v in row) / n
    inv = 1 / mpmath.sqrt(var + LAYER_NORM_EPS)
    return [(v - mean) * inv * wi + bi for v, wi, bi in zip(row, w, b, strict=False)]


def layer_norm_bound(inputs, exact, fmt):
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


def _conv_t_as_conv(x, w, stride):
    """conv_transpose1d(x, w) == conv1d(zero-upsampled, padded x, flipped w^T): its im2col and weights."""
    b, cin, length = x.shape
    k = w.shape[-1]
    up = np.zeros((b, cin, (length - 1) * stride + 1))
    up[..., ::stride] = x
    up = np.pad(up, ((0, 0), (0, 0), (k - 1, k - 1)))
    win = np.lib.stride_tricks.sliding_window_view(up, k, axis=-1)  # b, cin, L', k
    cols = win.transpose(0, 2, 1, 3).reshape(b, win.shape[2], -1)
    weights = np.flip(w, -1).transpose(1, 0, 2).reshape(w.shape[1], -1)  # cout, cin*k
    return cols, weights


def conv_transpose1d_exact(x, w, b=None, stride=1) -> Exact:
    """Exact reference of conv_transpose1d (also conv1d's input gradient, at stride 1)."""
    cols, weights = _conv_t_as_conv(x, w, stride)
    if b is not None:
        cols = np.concatenate([cols, np.ones((*cols.shape[:-1], 1))], axis=-1)
        weights = np.hstack([weights, b[:, None]])
    e = exact_matmul(cols.reshape(-1, cols.shape[-1]), weights.T)
    shape = (*cols.shape[:2], weights.shape[0])
    return e.map(lambda a: a.reshape(shape).transpose(0, 2, 1))


def conv_transpose1d_magnitude(x, w, stride=1):
    cols, weights = _conv_t_as_conv(np.abs(x), np.abs(w), stride)
    return np.einsum("blk,ok->bol", cols, weights)


def np_conv_transpose1d(ns, x, w, b=None, stride=1):
    """The scatter form: each input position adds w * x[i] at output i*stride + j."""
    k = w.shape[-1]
    out = ns.zeros_like(x, shape=(x.shape[0], w.shape[1], (x.shape[-1] - 1) * stride + k))  # x's array type
    for j in range(k):
        out[..., j : j + stride * (x.shape[-1] - 1) + 1 : stride] += ns.einsum("bci,co->boi", x, w[:, :, j])
    return out if b is None else out + b[None, :, None]
