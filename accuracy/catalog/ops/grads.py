"""Backward passes through torch autograd: matmul, softmax, gelu, conv1d, linear, layer_norm gradients.

Each op takes the forward inputs plus a fixed upstream gradient g and returns the gradient
(torch: requires_grad_, backward(g), .grad; numpy: the analytic formula). Exact references are
Exact products and fsum (matmul, conv1d, linear) or 200-bit mpmath formulas (softmax, gelu, layer_norm).
"""

from __future__ import annotations

import math
from functools import partial

import mpmath
import numpy as np
import scipy

from accuracy.catalog.ops.common import (
    CONV_BATCH,
    CONV_CHANNELS,
    CONV_KERNEL,
    IN_STORAGE,
    LAYER_NORM_EPS,
    ROWS,
    conv_transpose1d_exact,
    conv_transpose1d_magnitude,
    layer_norm_inputs,
    np_conv_transpose1d,
    softmax_bound,
)
from accuracy.catalog.registry import Impl, OpInfo
from accuracy.core.dtypes import ALL_DTYPES, IEEE_DTYPES, SINGLE_DOUBLE
from accuracy.judge.error_metrics import gamma
from accuracy.reference.exact import Exact, fsum_rows, mp_rows
from accuracy.reference.exact_gemm import exact_matmul
from accuracy.reference.inputs import normal, uniform
from accuracy.reference.oracles import elementwise, mp, mp_dot, mp_list, mp_matmul, rowwise


def _torch_matmul_grad(ns, a, b, g):
    a.requires_grad_()
    b.requires_grad_()
    (a @ b).backward(g)
    return ns.stack([a.grad, b.grad])


def _matmul_grad_exact(inputs, fmt):
    a, b, g = inputs["a"], inputs["b"], inputs["g"]
    da, db = exact_matmul(g, b.T), exact_matmul(a.T, g)
    return Exact(np.stack([da.hi, db.hi]), np.stack([da.lo, db.lo]))


MATMUL_GRAD = OpInfo(
    name="matmul_grad",
    doc="(dA, dB) = (g @ B^T, A^T @ g) of C = A @ B, square N(0,1) matrices, stacked",
    generate=lambda rng, n: {"a": normal(rng, (n, n)), "b": normal(rng, (n, n)), "g": normal(rng, (n, n))},
    exact=_matmul_grad_exact,
    fp64=lambda a, b, g: np.stack([g @ b.T, a.T @ g]),
    bound=lambda inputs, exact, fmt: (
        gamma(inputs["a"].shape[0], fmt.u)
        * np.stack([np.abs(inputs["g"]) @ np.abs(inputs["b"]).T, np.abs(inputs["a"]).T @ np.abs(inputs["g"])])
    ),
    bound_doc="gamma_n * (|g||B|^T, |A|^T|g|): each gradient is a matrix product",
    impls=(
        Impl("torch", "autograd (a @ b).backward(g)", _torch_matmul_grad, ALL_DTYPES),
        Impl("numpy", "(g @ b.T, a.T @ g)", lambda ns, a, b, g: ns.stack([g @ b.T, a.T @ g]), IEEE_DTYPES),
    ),
    default_size=64,
    bench_sizes=(128, 512),
    oracle=lambda inputs: mp_matmul(inputs["g"], inputs["b"].T) + mp_matmul(inputs["a"].T, inputs["g"]),
    test_size=6,
    flops=lambda n: 4.0 * n**3,
)


def _mp_softmax_grad(row, gs):
    m = max(row)
    e = [mpmath.exp(v - m) for v in row]
    s = mpmath.fsum(e)
    y = [v / s for v in e]
    dot = mpmath.fsum(gi * yi for gi, yi in zip(gs, y, strict=False))
    return [yi * (gi - dot) for yi, gi in zip(y, gs, strict=False)]


def _softmax_grad_bound(inputs, exact, fmt):
    """dx = y (g - <g, y>): y errs by the softmax bound d_y; the dot adds gamma_n; two more roundings."""
    x, g = inputs["x"], inputs["g"]
    n = x.shape[-1]
    y = scipy.special.softmax(x, axis=-1)
    dy = softmax_bound({"x": x}, Exact.from_float64(y), fmt)  # absolute error of y
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


def _softmax_grad_by_jacobian(row, gs):
    """dx_i = sum_j g_j dy_j/dx_i with dy_j/dx_i = y_j (delta_ij - y_i), y the unshifted softmax."""
    e = [mpmath.exp(v) for v in row]
    total = mpmath.fsum(e)
    y = [v / total for v in e]
    return [
        mpmath.fsum(gj * yj * ((i == j) - yi) for j, (gj, yj) in enumerate(zip(gs, y, strict=False)))
        for i, yi in enumerate(y)
    ]


SOFTMAX_GRAD = OpInfo(
    name="softmax_grad",
    doc=f"input gradient of softmax over the last axis, {ROWS} rows of N(0, 2**2) logits, upstream g ~ N(0,1)",
    generate=lambda rng, n: {"x": normal(rng, (ROWS, n), 2.0), "g": normal(rng, (ROWS, n))},
    exact=lambda inputs, fmt: mp_rows(_mp_softmax_grad, inputs["x"], inputs["g"]),
    fp64=lambda x, g: _np_softmax_grad(np, x, g),
    bound=_softmax_grad_bound,
    bound_doc="first order: y((d_y/y + gamma_2)(|g| + |<g,y>|) + sum|g|(d_y + gamma_n y)), d_y = softmax's bound",
    impls=(
        Impl("torch", "autograd softmax.backward(g)", _torch_softmax_grad, ALL_DTYPES, compute=IN_STORAGE),
        Impl("numpy", "y * (g - sum(g * y))", _np_softmax_grad, IEEE_DTYPES),
    ),
    default_size=256,
    bench_sizes=(1024, 1 << 15),
    oracle=rowwise(_softmax_grad_by_jacobian, "x", "g"),
    test_size=8,
    flops=lambda n: 6.0 * ROWS * n,
)


def _mp_gelu_grad(xs, gs):
    out = []
    for x, g in zip(xs, gs, strict=False):
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

GELU_GRAD = OpInfo(
    name="gelu_grad",
    doc="input gradient of exact-erf GELU, g * (Phi(x) + x phi(x)), x uniform in [-6, 6], g ~ N(0,1)",
    generate=lambda rng, n: {"x": uniform(rng, n, -6.0, 6.0), "g": normal(rng, n)},
    exact=lambda inputs, fmt: mp_rows(_mp_gelu_grad, inputs["x"], inputs["g"]),
    fp64=_gelu_grad64,
    bound=lambda inputs, exact, fmt: (
        GELU_GRAD_K * fmt.u * (np.abs(exact.hi) + np.abs(inputs["g"])) + fmt.smallest_subnormal
    ),
    bound_doc=f"{GELU_GRAD_K}*u*(|dx| + |g|): 1 + erf cancels for x << 0, an error of ~u|g| absolute (as for gelu)",
    impls=(
        Impl("torch", "autograd F.gelu.backward(g)", _torch_gelu_grad, ALL_DTYPES),
        Impl(
            "scipy",
            "g*(Phi(x) + x phi(x))",
            lambda ns, x, g: (
                g * (0.5 * (1 + ns.special.erf(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi))
            ),
            SINGLE_DOUBLE,
        ),
    ),
    default_size=4096,
    bench_sizes=(1 << 16, 1 << 20),
    oracle=elementwise(lambda x, g: g * mpmath.diff(lambda t: t * mpmath.ncdf(t), x), "x", "g"),
    test_size=32,
)


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


def _conv1d_input_grad_by_sum(inputs):
    """dx[n, c, t] = sum_{o, k} g[n, o, t - k] w[o, c, k] over the outputs t - k that input t reached."""
    w, g = inputs["w"], inputs["g"]
    length = g.shape[2] + w.shape[2] - 1
    return [
        mpmath.fsum(
            mp(g[n, o, t - k]) * mp(w[o, c, k])
            for o in range(w.shape[0])
            for k in range(w.shape[2])
            if 0 <= t - k < g.shape[2]
        )
        for n in range(g.shape[0])
        for c in range(w.shape[1])
        for t in range(length)
    ]


CONV1D_GRAD = OpInfo(
    name="conv1d_grad",
    doc=f"input gradient of conv1d (batch {CONV_BATCH}, {CONV_CHANNELS} channels, kernel {CONV_KERNEL}): "
    "conv_transpose1d(g, w)",
    generate=_conv1d_grad_inputs,
    exact=lambda inputs, fmt: conv_transpose1d_exact(inputs["g"], inputs["w"]),
    fp64=lambda x, w, g: np_conv_transpose1d(np, g, w),
    bound=lambda inputs, exact, fmt: (
        gamma(CONV_CHANNELS * CONV_KERNEL, fmt.u) * conv_transpose1d_magnitude(inputs["g"], inputs["w"])
    ),
    bound_doc="gamma_{cout*k} * (|w| *T |g|): each input gradient is one dot product",
    impls=(
        Impl("torch", "autograd F.conv1d.backward(g)", _torch_conv1d_grad, ALL_DTYPES, compute=IN_STORAGE),
        Impl("numpy", "scatter-add of g * w per tap", lambda ns, x, w, g: np_conv_transpose1d(ns, g, w), IEEE_DTYPES),
    ),
    default_size=256,
    bench_sizes=(256, 4096),
    oracle=_conv1d_input_grad_by_sum,
    test_size=6,
    flops=lambda n: 2.0 * CONV_BATCH * CONV_CHANNELS**2 * CONV_KERNEL * n,
)


LINEAR_GRAD_BATCH = 8


def _linear_grad_inputs(rng, n):
    """x (8, n), W (n/4, n), b (n/4) as in `linear` (a smaller batch), upstream g (8, n/4)."""
    out = max(n // 4, 1)
    return {
        "x": normal(rng, (LINEAR_GRAD_BATCH, n)),
        "W": normal(rng, (out, n)),
        "b": normal(rng, out),
        "g": normal(rng, (LINEAR_GRAD_BATCH, out)),
    }


def _np_linear_grad(ns, x, W, b, g):
    return ns.concatenate([(g @ W).ravel(), (g.T @ x).ravel(), g.sum(axis=0)])


def _torch_linear_grad(ns, x, W, b, g):
    for t in (x, W, b):
        t.requires_grad_()
    ns.nn.functional.linear(x, W, b).backward(g)
    return ns.cat([x.grad.ravel(), W.grad.ravel(), b.grad])


def _linear_grad_exact(inputs, fmt):
    """dx = g @ W and dW = g^T @ x exactly, db = sum_i g_i correctly rounded (fsum)."""
    x, W, g = inputs["x"], inputs["W"], inputs["g"]
    dx, dw, db = exact_matmul(g, W), exact_matmul(g.T, x), fsum_rows(g.T)
    return Exact(
        np.concatenate([dx.hi.ravel(), dw.hi.ravel(), db.hi]), np.concatenate([dx.lo.ravel(), dw.lo.ravel(), db.lo])
    )


def _linear_grad_bound(inputs, exact, fmt):
    x, W, g = np.abs(inputs["x"]), np.abs(inputs["W"]), np.abs(inputs["g"])
    batch, out = g.shape
    return np.concatenate(
        [
            (gamma(out, fmt.u) * (g @ W)).ravel(),
            (gamma(batch, fmt.u) * (g.T @ x)).ravel(),
            gamma(batch - 1, fmt.u) * g.sum(axis=0),
        ]
    )


def _linear_grad_by_sums(inputs):
    """dx_ik = sum_o g_io W_ok, dW_ok = sum_i g_io x_ik, db_o = sum_i g_io, each summed on its own."""
    x, W, g = inputs["x"], inputs["W"], inputs["g"]
    dx = [mp_dot(g[i], W[:, k]) for i in range(x.shape[0]) for k in range(x.shape[1])]
    dw = [mp_dot(g[:, o], x[:, k]) for o in range(W.shape[0]) for k in range(W.shape[1])]
    return dx + dw + [mpmath.fsum(mp_list(g[:, o])) for o in range(W.shape[0])]


LINEAR_GRAD = OpInfo(
    name="linear_grad",
    doc=f"(dx, dW, db) = (g @ W, g^T @ x, sum_i g) of y = x @ W.T + b, x ({LINEAR_GRAD_BATCH}, n), W (n/4, n), "
    "N(0,1) inputs and g; the three raveled and concatenated into one vector",
    generate=_linear_grad_inputs,
    exact=_linear_grad_exact,
    fp64=lambda x, W, b, g: _np_linear_grad(np, x, W, b, g),
    bound=_linear_grad_bound,
    bound_doc="per block: gamma_{n/4} |g||W| (dx), gamma_batch |g|^T|x| (dW), gamma_{batch-1} sum_i|g| (db)",
    impls=(
        Impl("torch", "autograd F.linear(x, W, b).backward(g)", _torch_linear_grad, ALL_DTYPES),
        Impl("numpy", "(g @ W, g.T @ x, g.sum(0))", _np_linear_grad, IEEE_DTYPES),
    ),
    default_size=64,
    bench_sizes=(64, 256),
    oracle=_linear_grad_by_sums,
    test_size=8,
    flops=lambda n: 4.0 * LINEAR_GRAD_BATCH * n * max(n // 4, 1),
)


def _layer_norm_grad_inputs(rng, n):
    inputs = layer_norm_inputs(rng, n)  # rows of N(2,1), affine w, b ~ N(0,1), as in layer_norm
    return {**inputs, "g": normal(rng, (ROWS, n))}


def _mp_layer_norm_grad(row, w, g):
    n = len(row)
    mean = mpmath.fsum(row) / n
    var = mpmath.fsum((v - mean) ** 2 for v in row) / n
    rstd = 1 / mpmath.sqrt(var + LAYER_NORM_EPS)
    xhat = [(v - mean) * rstd for v in row]
    gh = [gi * wi for gi, wi in zip(g, w, strict=False)]
    mean_gh = mpmath.fsum(gh) / n
    mean_ghx = mpmath.fsum(a * b for a, b in zip(gh, xhat, strict=False)) / n
    return [rstd * (a - mean_gh - xh * mean_ghx) for a, xh in zip(gh, xhat, strict=False)]


def _layer_norm_grad_exact(inputs, fmt):
    x, w, g = inputs["x"], inputs["w"], inputs["g"]
    return mp_rows(_mp_layer_norm_grad, x, np.broadcast_to(w, x.shape), g)


def _layer_norm_grad_bound(inputs, exact, fmt):
    """First order, for dx = r (gh - mean(gh) - xhat m), r = 1/sqrt(var + eps), gh = g w, m = mean(gh xhat).

    Three sources: (1) r's relative error rel_r: the forward's rel(sigma) (nn.layer_norm_bound, kappa
    term included) plus the reciprocal's rounding; r enters the xhat m term cubed. (2) the mean's
    error e_mu = gamma_{n+1} mean|x|, which shifts xhat by e_mu r and m by e_mu r mean(gh). (3) the
    formula's own roundings. Numpy's centred form needs gamma_{n+5}(mean|gh| + |xhat| mean|gh xhat|)
    + gamma_5(|gh| + |xhat m|). Torch's uncentred form dx = r gh + b x + c, b = (mean(gh) mu -
    mean(gh x)) r^3, c = -b mu - mean(gh) r, sums gh x over |gh|(|x| + |mu|): b errs by
    gamma_{n+9} r^2 mean(|gh| X), X = r(|x| + |mu|) >= |xhat|, and as c reuses b that error reaches
    dx times (x - mu) only; rounding b x + c costs gamma_3 r X |m|. Both sit inside
    r (gamma_{n+10}(mean|gh| + |xhat| mean(|gh| X)) + gamma_5(|gh| + X|m|)).
    """
    x, w, g = inputs["x"], inputs["w"], inputs["g"]
    n = x.shape[-1]
    mu = x.mean(axis=-1, keepdims=True)
    d = x - mu
    sigma = np.sqrt((d**2).mean(axis=-1, keepdims=True) + LAYER_NORM_EPS)
    r = 1 / sigma
    xhat = d * r
    gh = g * w
    mean_gh = gh.mean(axis=-1, keepdims=True)
    mean_ghx = (gh * xhat).mean(axis=-1, keepdims=True)
    kappa2 = (x**2).sum(axis=-1, keepdims=True) / (d**2).sum(axis=-1, keepdims=True)
    rel_r = (gamma(n + 3, fmt.u) + gamma(n, fmt.u) ** 2 * kappa2) / 2 + gamma(4, fmt.u)  # as in layer_norm, + 1/sigma
    e_mu = gamma(n + 1, fmt.u) * np.abs(x).mean(axis=-1, keepdims=True)
    big_x = r * (np.abs(x) + np.abs(mu))
    rounding = gamma(n + 10, fmt.u) * (
        np.abs(gh).mean(axis=-1, keepdims=True) + np.abs(xhat) * (np.abs(gh) * big_x).mean(axis=-1, keepdims=True)
    ) + gamma(5, fmt.u) * (np.abs(gh) + big_x * np.abs(mean_ghx))
    r_err = rel_r * (np.abs(gh) + np.abs(mean_gh) + 3 * np.abs(xhat * mean_ghx))
    mu_err = e_mu * r * (np.abs(mean_ghx) + np.abs(xhat * mean_gh))
    return r * (rounding + r_err + mu_err) + fmt.smallest_subnormal


def _np_layer_norm_grad(ns, x, w, b, g):
    mean = x.mean(axis=-1, keepdims=True)
    rstd = 1 / ns.sqrt(x.var(axis=-1, keepdims=True) + LAYER_NORM_EPS)
    xhat = (x - mean) * rstd
    gh = g * w
    return rstd * (gh - gh.mean(axis=-1, keepdims=True) - xhat * (gh * xhat).mean(axis=-1, keepdims=True))


def _torch_layer_norm_grad(ns, x, w, b, g):
    x.requires_grad_()
    ns.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps=LAYER_NORM_EPS).backward(g)
    return x.grad


def _layer_norm_grad_by_diff(inputs):
    """dx_i = d/dx_i sum_j g_j layer_norm(x)_j, by mpmath's numerical derivative of the forward formula."""

    def loss(row, w, b, g, i, t):
        v = [*row[:i], t, *row[i + 1 :]]
        mean = mpmath.fsum(v) / len(v)
        rstd = 1 / mpmath.sqrt(mpmath.fsum((a - mean) ** 2 for a in v) / len(v) + LAYER_NORM_EPS)
        return mpmath.fsum(gj * ((a - mean) * rstd * wj + bj) for a, gj, wj, bj in zip(v, g, w, b, strict=False))

    def row_grad(row, w, b, g):
        return [mpmath.diff(partial(loss, row, w, b, g, i), row[i]) for i in range(len(row))]

    return rowwise(row_grad, "x", "w", "b", "g")(inputs)


LAYER_NORM_GRAD = OpInfo(
    name="layer_norm_grad",
    doc=f"input gradient of layer_norm (eps={LAYER_NORM_EPS}, affine w, b) over {ROWS} rows of N(2,1), "
    "upstream g ~ N(0,1): r (g w - mean(g w) - xhat mean(g w xhat))",
    generate=_layer_norm_grad_inputs,
    exact=_layer_norm_grad_exact,
    fp64=lambda x, w, b, g: _np_layer_norm_grad(np, x, w, b, g),
    bound=_layer_norm_grad_bound,
    bound_doc="first order: r(gamma_{n+10}(mean|gh| + |xhat| mean(|gh| X)) + gamma_5(|gh| + X|m|) "
    "+ rel_r(|gh| + |mean gh| + 3|xhat m|) + e_mu r(|m| + |xhat mean gh|)), gh = g w, m = mean(gh xhat), "
    "X = r(|x| + |mu|), rel_r = layer_norm's rel(sigma) + u, e_mu = gamma_{n+1} mean|x|",
    impls=(
        Impl("torch", "autograd F.layer_norm.backward(g)", _torch_layer_norm_grad, ALL_DTYPES, compute=IN_STORAGE),
        Impl("numpy", "r * (gh - mean(gh) - xhat * mean(gh * xhat))", _np_layer_norm_grad, IEEE_DTYPES),
    ),
    default_size=1024,
    bench_sizes=(1024, 1 << 14),
    oracle=_layer_norm_grad_by_diff,
    test_size=8,
    flops=lambda n: 12.0 * ROWS * n,
)


OPS = [MATMUL_GRAD, SOFTMAX_GRAD, GELU_GRAD, CONV1D_GRAD, LINEAR_GRAD, LAYER_NORM_GRAD]
