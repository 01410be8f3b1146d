"""Backward passes through torch autograd: matmul, softmax, gelu, conv1d input gradients.

Each op takes the forward inputs plus a fixed upstream gradient g and returns the gradient
(torch: requires_grad_, backward(g), .grad; numpy: the analytic formula). Exact references are
Dot2 products (matmul, conv1d) or 200-bit mpmath formulas (softmax, gelu).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import scipy.special

from accuracy.dtypes import ALL_DTYPES, IEEE_DTYPES
from accuracy.exact import Exact, dot2_matmul, mp_rows
from accuracy.inputs import normal, uniform
from accuracy.metrics import gamma
from accuracy.ops.nn import CONV_BATCH, CONV_CHANNELS, CONV_KERNEL, ROWS, _softmax_bound
from accuracy.ops.nn_more import conv_transpose1d_exact, conv_transpose1d_magnitude, np_conv_transpose1d
from accuracy.registry import Impl, OpInfo, register


def _backward(out, g, *leaves):
    out.backward(g)
    return leaves[0].grad if len(leaves) == 1 else leaves


def _torch_matmul_grad(ns, a, b, g):
    a.requires_grad_()
    b.requires_grad_()
    (a @ b).backward(g)
    return ns.stack([a.grad, b.grad])


def _matmul_grad_exact(inputs, fmt):
    a, b, g = inputs["a"], inputs["b"], inputs["g"]
    da, db = dot2_matmul(g, b.T), dot2_matmul(a.T, g)
    return Exact(np.stack([da.hi, db.hi]), np.stack([da.lo, db.lo]))


register(OpInfo(
    name="matmul_grad", family="grad",
    doc="(dA, dB) = (g @ B^T, A^T @ g) of C = A @ B, square N(0,1) matrices, stacked",
    generate=lambda rng, n: {"a": normal(rng, (n, n)), "b": normal(rng, (n, n)), "g": normal(rng, (n, n))},
    exact=_matmul_grad_exact,
    fp64=lambda a, b, g: np.stack([g @ b.T, a.T @ g]),
    bound=lambda inputs, exact, fmt: gamma(inputs["a"].shape[0], fmt.u) * np.stack(
        [np.abs(inputs["g"]) @ np.abs(inputs["b"]).T, np.abs(inputs["a"]).T @ np.abs(inputs["g"])]),
    bound_doc="gamma_n * (|g||B|^T, |A|^T|g|): each gradient is a matrix product",
    impls=(
        Impl("torch", "autograd (a @ b).backward(g)", _torch_matmul_grad, ALL_DTYPES),
        Impl("numpy", "(g @ b.T, a.T @ g)", lambda ns, a, b, g: ns.stack([g @ b.T, a.T @ g]), IEEE_DTYPES),
    ),
    default_size=64, bench_sizes=(128, 512),
    flops=lambda n: 4.0 * n**3,
))


def _mp_softmax_grad(row, gs):
    m = max(row)
    e = [mpmath.exp(v - m) for v in row]
    s = mpmath.fsum(e)
    y = [v / s for v in e]
    dot = mpmath.fsum(gi * yi for gi, yi in zip(gs, y))
    return [yi * (gi - dot) for yi, gi in zip(y, gs)]


def _softmax_grad_bound(inputs, exact, fmt):
    """dx = y (g - <g, y>): y errs by the softmax bound d_y; the dot adds gamma_n; two more roundings."""
    x, g = inputs["x"], inputs["g"]
    n = x.shape[-1]
    y = scipy.special.softmax(x, axis=-1)
    dy = _softmax_bound({"x": x}, Exact.from_float64(y), fmt)  # absolute error of y
    rel_y = dy / np.maximum(y, np.finfo(float).tiny)
    s = np.sum(g * y, axis=-1, keepdims=True)
    ds = np.sum(np.abs(g) * (dy + gamma(n, fmt.u) * y), axis=-1, keepdims=True)
    return y * ((rel_y + gamma(2, fmt.u)) * (np.abs(g) + np.abs(s)) + ds) + fmt.smallest_subnormal


def _torch_softmax_grad(ns, x, g):
    x.requires_grad_()
    ns.softmax(x, -1).backward(g)
    return x.grad


def _np_softmax_grad(ns, x, g):
    e = ns.exp(x - x.max(axis=-1, keepdims=True))
    y = e / e.sum(axis=-1, keepdims=True)
    return y * (g - (g * y).sum(axis=-1, keepdims=True))


register(OpInfo(
    name="softmax_grad", family="grad",
    doc=f"input gradient of softmax over the last axis, {ROWS} rows of N(0, 2**2) logits, upstream g ~ N(0,1)",
    generate=lambda rng, n: {"x": normal(rng, (ROWS, n), 2.0), "g": normal(rng, (ROWS, n))},
    exact=lambda inputs, fmt: mp_rows(_mp_softmax_grad, inputs["x"], inputs["g"]),
    fp64=lambda x, g: _np_softmax_grad(np, x, g),
    bound=_softmax_grad_bound,
    bound_doc="first order: y((d_y/y + gamma_2)(|g| + |<g,y>|) + sum|g|(d_y + gamma_n y)), d_y = softmax's bound",
    impls=(
        Impl("torch", "autograd softmax.backward(g)", _torch_softmax_grad, ALL_DTYPES),
        Impl("numpy", "y * (g - sum(g * y))", _np_softmax_grad, IEEE_DTYPES),
    ),
    default_size=256, bench_sizes=(1024, 1 << 15),
    flops=lambda n: 6.0 * ROWS * n,
))


def _mp_gelu_grad(xs, gs):
    out = []
    for x, g in zip(xs, gs):
        cdf = (1 + mpmath.erf(x / mpmath.sqrt(2))) / 2
        pdf = mpmath.exp(-x * x / 2) / mpmath.sqrt(2 * mpmath.pi)
        out.append(g * (cdf + x * pdf))
    return out


def _gelu_grad64(x, g):
    return g * (0.5 * (1 + scipy.special.erf(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi))


def _torch_gelu_grad(ns, x, g):
    x.requires_grad_()
    ns.nn.functional.gelu(x).backward(g)
    return x.grad


GELU_GRAD_K = 8

register(OpInfo(
    name="gelu_grad", family="grad",
    doc="input gradient of exact-erf GELU, g * (Phi(x) + x phi(x)), x uniform in [-6, 6], g ~ N(0,1)",
    generate=lambda rng, n: {"x": uniform(rng, n, -6.0, 6.0), "g": normal(rng, n)},
    exact=lambda inputs, fmt: mp_rows(_mp_gelu_grad, inputs["x"], inputs["g"]),
    fp64=_gelu_grad64,
    bound=lambda inputs, exact, fmt: GELU_GRAD_K * fmt.u * (np.abs(exact.hi) + np.abs(inputs["g"]))
    + fmt.smallest_subnormal,
    bound_doc=f"{GELU_GRAD_K}*u*(|dx| + |g|): 1 + erf cancels for x << 0, an error of ~u|g| absolute (as for gelu)",
    impls=(
        Impl("torch", "autograd F.gelu.backward(g)", _torch_gelu_grad, ALL_DTYPES),
        Impl("scipy", "g*(Phi(x) + x phi(x))", lambda ns, x, g: g * (0.5 * (1 + ns.special.erf(x / math.sqrt(2)))
             + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)), ("float32", "float64")),
    ),
    default_size=4096, bench_sizes=(1 << 16, 1 << 20),
))


def _conv1d_grad_inputs(rng, n):
    return {
        "x": normal(rng, (CONV_BATCH, CONV_CHANNELS, n)),
        "w": normal(rng, (CONV_CHANNELS, CONV_CHANNELS, CONV_KERNEL)),
        "g": normal(rng, (CONV_BATCH, CONV_CHANNELS, n - CONV_KERNEL + 1)),
    }


def _torch_conv1d_grad(ns, x, w, g):
    x.requires_grad_()
    ns.nn.functional.conv1d(x, w).backward(g)
    return x.grad


register(OpInfo(
    name="conv1d_grad", family="grad",
    doc=f"input gradient of conv1d (batch {CONV_BATCH}, {CONV_CHANNELS} channels, kernel {CONV_KERNEL}): "
    "conv_transpose1d(g, w)",
    generate=_conv1d_grad_inputs,
    exact=lambda inputs, fmt: conv_transpose1d_exact(inputs["g"], inputs["w"]),
    fp64=lambda x, w, g: np_conv_transpose1d(np, g, w),
    bound=lambda inputs, exact, fmt: gamma(CONV_CHANNELS * CONV_KERNEL, fmt.u)
    * conv_transpose1d_magnitude(inputs["g"], inputs["w"]),
    bound_doc="gamma_{cout*k} * (|w| *T |g|): each input gradient is one dot product",
    impls=(
        Impl("torch", "autograd F.conv1d.backward(g)", _torch_conv1d_grad, ALL_DTYPES),
        Impl("numpy", "scatter-add of g * w per tap", lambda ns, x, w, g: np_conv_transpose1d(ns, g, w), IEEE_DTYPES),
    ),
    default_size=256, bench_sizes=(256, 4096),
    flops=lambda n: 2.0 * CONV_BATCH * CONV_CHANNELS**2 * CONV_KERNEL * n,
))
