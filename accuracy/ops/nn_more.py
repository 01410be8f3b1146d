"""More layers: bmm, baddbmm, conv2d, conv_transpose1d, batch_norm, group_norm, attention, losses.

Products (bmm, baddbmm, convolutions) are referenced by Dot2 over their dot-product form and
bounded by gamma_k * |A||B|; normalisations, attention and losses by 200-bit mpmath with
first-order bounds built from the sum, softmax and layer_norm bounds of nn.py.
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
from accuracy.ops.nn import LAYER_NORM_EPS, _layer_norm_bound, _mp_layer_norm, _mp_softmax
from accuracy.registry import Impl, OpInfo, register

BATCH = 4

# -- bmm, baddbmm ---------------------------------------------------------------------------


def _bmm_inputs(rng, n):
    return {"a": normal(rng, (BATCH, n, n)), "b": normal(rng, (BATCH, n, n))}


register(OpInfo(
    name="bmm", family="nn",
    doc=f"batched A @ B, {BATCH} pairs of square N(0,1) matrices of order n",
    generate=_bmm_inputs,
    exact=lambda inputs, fmt: dot2_matmul(inputs["a"], inputs["b"]),
    fp64=lambda a, b: a @ b,
    bound=lambda inputs, exact, fmt: gamma(inputs["a"].shape[-1], fmt.u) * (np.abs(inputs["a"]) @ np.abs(inputs["b"])),
    bound_doc="gamma_n * |A||B| per batch (Higham, Theorem 3.5)",
    impls=(
        Impl("torch", "torch.bmm", lambda ns, a, b: ns.bmm(a, b), ALL_DTYPES),
        Impl("torch", "torch.matmul", lambda ns, a, b: ns.matmul(a, b), ALL_DTYPES),
        Impl("numpy", "a @ b", lambda ns, a, b: a @ b, IEEE_DTYPES),
        Impl("numpy", "einsum('bik,bkj->bij')", lambda ns, a, b: ns.einsum("bik,bkj->bij", a, b), IEEE_DTYPES),
    ),
    default_size=64, bench_sizes=(64, 256),
    flops=lambda n: 2.0 * BATCH * n**3,
))


def _baddbmm_exact(inputs, fmt):
    """c + a @ b as one Dot2 over [a, I] @ [b; c]: c joins the exact sum."""
    a, b, c = inputs["a"], inputs["b"], inputs["c"]
    eye = np.broadcast_to(np.eye(a.shape[-1]), a.shape)
    return dot2_matmul(np.concatenate([a, eye], axis=-1), np.concatenate([b, c], axis=-2))


register(OpInfo(
    name="baddbmm", family="nn",
    doc=f"C + A @ B batched ({BATCH} triples of N(0,1) matrices of order n)",
    generate=lambda rng, n: {**_bmm_inputs(rng, n), "c": normal(rng, (BATCH, n, n))},
    exact=_baddbmm_exact,
    fp64=lambda a, b, c: c + a @ b,
    bound=lambda inputs, exact, fmt: gamma(inputs["a"].shape[-1] + 1, fmt.u)
    * (np.abs(inputs["a"]) @ np.abs(inputs["b"]) + np.abs(inputs["c"])),
    bound_doc="gamma_{n+1} * (|A||B| + |C|): C is one more term of each sum",
    impls=(
        Impl("torch", "torch.baddbmm", lambda ns, a, b, c: ns.baddbmm(c, a, b), ALL_DTYPES),
        Impl("torch", "c + a @ b", lambda ns, a, b, c: c + a @ b, ALL_DTYPES),
        Impl("numpy", "c + a @ b", lambda ns, a, b, c: c + a @ b, IEEE_DTYPES),
    ),
    default_size=64, bench_sizes=(64, 256),
    flops=lambda n: 2.0 * BATCH * n**3,
))

# -- conv2d ---------------------------------------------------------------------------------

C2_BATCH, C2_CHANNELS, C2_KERNEL = 2, 8, 3


def _conv2d_inputs(rng, n):
    return {
        "x": normal(rng, (C2_BATCH, C2_CHANNELS, n, n)),
        "w": normal(rng, (C2_CHANNELS, C2_CHANNELS, C2_KERNEL, C2_KERNEL)),
        "b": normal(rng, C2_CHANNELS),
    }


def _im2col2d(x, k):
    """(batch, cin, H, W) -> (batch, H', W', cin*k*k)."""
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))  # b, c, H', W', k, k
    return win.transpose(0, 2, 3, 1, 4, 5).reshape(x.shape[0], win.shape[2], win.shape[3], -1)


def _conv2d_exact(inputs, fmt):
    x, w, b = inputs["x"], inputs["w"], inputs["b"]
    cols = _im2col2d(x, w.shape[-1])
    a = np.concatenate([cols, np.ones(cols.shape[:-1] + (1,))], axis=-1)
    e = dot2_matmul(a.reshape(-1, a.shape[-1]), np.vstack([w.reshape(w.shape[0], -1).T, b[None, :]]))
    shape = cols.shape[:-1] + (w.shape[0],)
    return e.map(lambda a: a.reshape(shape).transpose(0, 3, 1, 2))


def _conv2d_bound(inputs, exact, fmt):
    x, w, b = inputs["x"], inputs["w"], inputs["b"]
    k = w[0].size + 1
    mag = np.einsum("bhwk,ok->bohw", np.abs(_im2col2d(x, w.shape[-1])), np.abs(w.reshape(w.shape[0], -1)))
    return gamma(k, fmt.u) * (mag + np.abs(b)[None, :, None, None])


def _np_conv2d(ns, x, w, b):
    win = ns.lib.stride_tricks.sliding_window_view(x, w.shape[-2:], axis=(2, 3))
    return ns.einsum("bchwij,ocij->bohw", win, w) + b[None, :, None, None]


register(OpInfo(
    name="conv2d", family="nn",
    doc=f"conv2d, batch {C2_BATCH}, {C2_CHANNELS}->{C2_CHANNELS} channels, {C2_KERNEL}x{C2_KERNEL} kernel, n x n images",
    generate=_conv2d_inputs,
    exact=_conv2d_exact,
    fp64=lambda x, w, b: _np_conv2d(np, x, w, b),
    bound=_conv2d_bound,
    bound_doc="gamma_{cin*k*k+1} * (|w| * |x| + |b|): each output is one dot product (im2col + Dot2)",
    impls=(
        Impl("torch", "F.conv2d", lambda ns, x, w, b: ns.nn.functional.conv2d(x, w, b), ALL_DTYPES),
        Impl("numpy", "einsum over sliding windows", _np_conv2d, IEEE_DTYPES),
    ),
    default_size=16, bench_sizes=(32, 128),
    flops=lambda n: 2.0 * C2_BATCH * C2_CHANNELS**2 * C2_KERNEL**2 * (n - C2_KERNEL + 1) ** 2,
))

# -- conv_transpose1d -----------------------------------------------------------------------

CT_BATCH, CT_IN, CT_OUT, CT_KERNEL, CT_STRIDE = 4, 16, 8, 5, 2


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
    """Dot2 reference of conv_transpose1d (also conv1d's input gradient, at stride 1)."""
    cols, weights = _conv_t_as_conv(x, w, stride)
    if b is not None:
        cols = np.concatenate([cols, np.ones(cols.shape[:-1] + (1,))], axis=-1)
        weights = np.hstack([weights, b[:, None]])
    e = dot2_matmul(cols.reshape(-1, cols.shape[-1]), weights.T)
    shape = cols.shape[:2] + (weights.shape[0],)
    return e.map(lambda a: a.reshape(shape).transpose(0, 2, 1))


def conv_transpose1d_magnitude(x, w, stride=1):
    cols, weights = _conv_t_as_conv(np.abs(x), np.abs(w), stride)
    return np.einsum("blk,ok->bol", cols, weights)


def np_conv_transpose1d(ns, x, w, b=None, stride=1):
    """The scatter form: each input position adds w * x[i] at output i*stride + j."""
    k = w.shape[-1]
    out = ns.zeros((x.shape[0], w.shape[1], (x.shape[-1] - 1) * stride + k), dtype=x.dtype)
    for j in range(k):
        out[..., j : j + stride * (x.shape[-1] - 1) + 1 : stride] += ns.einsum("bci,co->boi", x, w[:, :, j])
    return out if b is None else out + b[None, :, None]


register(OpInfo(
    name="conv_transpose1d", family="nn",
    doc=f"conv_transpose1d, batch {CT_BATCH}, {CT_IN}->{CT_OUT} channels, kernel {CT_KERNEL}, stride {CT_STRIDE}",
    generate=lambda rng, n: {"x": normal(rng, (CT_BATCH, CT_IN, n)), "w": normal(rng, (CT_IN, CT_OUT, CT_KERNEL)),
                             "b": normal(rng, CT_OUT)},
    exact=lambda inputs, fmt: conv_transpose1d_exact(inputs["x"], inputs["w"], inputs["b"], CT_STRIDE),
    fp64=lambda x, w, b: np_conv_transpose1d(np, x, w, b, CT_STRIDE),
    bound=lambda inputs, exact, fmt: gamma(CT_IN * CT_KERNEL + 1, fmt.u)
    * (conv_transpose1d_magnitude(inputs["x"], inputs["w"], CT_STRIDE) + np.abs(inputs["b"])[None, :, None]),
    bound_doc="gamma_{cin*k+1} * (|w| *T |x| + |b|): each output is a dot product of at most cin*k terms",
    impls=(
        Impl("torch", "F.conv_transpose1d", lambda ns, x, w, b: ns.nn.functional.conv_transpose1d(
            x, w, b, stride=CT_STRIDE), ALL_DTYPES),
        Impl("numpy", "scatter-add per tap", lambda ns, x, w, b: np_conv_transpose1d(ns, x, w, b, CT_STRIDE),
             IEEE_DTYPES),
    ),
    default_size=128, bench_sizes=(256, 4096),
    flops=lambda n: 2.0 * CT_BATCH * CT_IN * CT_OUT * CT_KERNEL * n,
))

# -- batch_norm (eval), group_norm ----------------------------------------------------------

BN_BATCH, BN_CHANNELS, BN_EPS = 8, 16, 1e-5


def _bn_inputs(rng, n):
    return {
        "x": normal(rng, (BN_BATCH, BN_CHANNELS, n)) + 1.0,
        "mean": normal(rng, BN_CHANNELS) * 0.5 + 1.0,
        "var": uniform(rng, BN_CHANNELS, 0.5, 2.0),
        "w": normal(rng, BN_CHANNELS),
        "b": normal(rng, BN_CHANNELS),
    }


def _per_channel(v, x):
    return np.broadcast_to(v[None, :, None], x.shape)


def _bn_exact(inputs, fmt):
    x = inputs["x"]
    args = [_per_channel(inputs[k], x) for k in ("mean", "var", "w", "b")]

    def row(xs, ms, vs, ws, bs):
        return [(xi - m) / mpmath.sqrt(v + BN_EPS) * w + b for xi, m, v, w, b in zip(xs, ms, vs, ws, bs)]

    return mp_rows(row, x, *args)


def _bn_bound(inputs, exact, fmt):
    """Either (x - m)*inv*w + b or x*scale + (b - m*scale): gamma_6 * ((|x| + |m|)|scale| + |b|)."""
    x = inputs["x"]
    scale = np.abs(inputs["w"]) / np.sqrt(inputs["var"] + BN_EPS)
    return gamma(6, fmt.u) * ((np.abs(x) + _per_channel(np.abs(inputs["mean"]), x)) * _per_channel(scale, x)
                              + _per_channel(np.abs(inputs["b"]), x)) + fmt.smallest_subnormal


def _np_bn(ns, x, mean, var, w, b):
    c = (slice(None), None)
    return (x - mean[c]) / ns.sqrt(var[c] + BN_EPS) * w[c] + b[c]


register(OpInfo(
    name="batch_norm", family="nn",
    doc=f"batch_norm in eval mode (given running mean/var), {BN_BATCH} x {BN_CHANNELS} channels x n, eps={BN_EPS}",
    generate=_bn_inputs,
    exact=_bn_exact,
    fp64=lambda x, mean, var, w, b: _np_bn(np, x, mean, var, w, b),
    bound=_bn_bound,
    bound_doc="gamma_6 * ((|x| + |mean|) |w|/sqrt(var + eps) + |b|): covers the folded scale/shift form",
    impls=(
        Impl("torch", "F.batch_norm(training=False)", lambda ns, x, mean, var, w, b: ns.nn.functional.batch_norm(
            x, mean, var, w, b, training=False, eps=BN_EPS), ALL_DTYPES),
        Impl("numpy", "(x - mean)/sqrt(var + eps)*w + b", _np_bn, IEEE_DTYPES),
    ),
    default_size=64, bench_sizes=(256, 4096),
    flops=lambda n: 4.0 * BN_BATCH * BN_CHANNELS * n,
))

GN_BATCH, GN_CHANNELS, GN_GROUPS = 4, 16, 4


def _gn_inputs(rng, n):
    return {"x": normal(rng, (GN_BATCH, GN_CHANNELS, n)) + 2.0, "w": normal(rng, GN_CHANNELS), "b": normal(rng, GN_CHANNELS)}


def _gn_rows(inputs):
    """Each (batch, group) as one row, with w and b broadcast along it."""
    x = inputs["x"]
    rows = (x.shape[0] * GN_GROUPS, -1)
    return x.reshape(rows), _per_channel(inputs["w"], x).reshape(rows), _per_channel(inputs["b"], x).reshape(rows)


def _gn_exact(inputs, fmt):
    e = mp_rows(_mp_layer_norm, *_gn_rows(inputs))
    return e.map(lambda a: a.reshape(inputs["x"].shape))


def _gn_bound(inputs, exact, fmt):
    x, w, b = _gn_rows(inputs)
    return _layer_norm_bound({"x": x, "w": w, "b": b}, exact, fmt).reshape(inputs["x"].shape)


def _np_gn(ns, x, w, b):
    g = x.reshape(x.shape[0], GN_GROUPS, -1)
    z = (g - g.mean(axis=-1, keepdims=True)) / ns.sqrt(g.var(axis=-1, keepdims=True) + LAYER_NORM_EPS)
    return z.reshape(x.shape) * w[:, None] + b[:, None]


register(OpInfo(
    name="group_norm", family="nn",
    doc=f"group_norm, {GN_GROUPS} groups of {GN_CHANNELS} channels x length n, batch {GN_BATCH}, N(2,1), eps={LAYER_NORM_EPS}",
    generate=_gn_inputs,
    exact=_gn_exact,
    fp64=lambda x, w, b: _np_gn(np, x, w, b),
    bound=_gn_bound,
    bound_doc="layer_norm's first-order bound per (batch, group) row of length (C/G)*n",
    impls=(
        Impl("torch", "F.group_norm", lambda ns, x, w, b: ns.nn.functional.group_norm(
            x, GN_GROUPS, w, b, eps=LAYER_NORM_EPS), ALL_DTYPES),
        Impl("numpy", "grouped (x - mean)/sqrt(var + eps)*w + b", _np_gn, IEEE_DTYPES),
    ),
    default_size=64, bench_sizes=(256, 4096),
    flops=lambda n: 8.0 * GN_BATCH * GN_CHANNELS * n,
))

# -- scaled_dot_product_attention -----------------------------------------------------------

HEADS, HEAD_DIM = 4, 16  # 1/sqrt(16) = 1/4 scales exactly


def _sdpa_inputs(rng, n):
    return {k: normal(rng, (HEADS, n, HEAD_DIM)) for k in ("q", "k", "v")}


def _sdpa_exact(inputs, fmt):
    """Scores by Dot2 (exact as double-double), softmax in 200-bit mpmath, P @ V by Dot2 on P = hi + lo."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    s = dot2_matmul(q, np.swapaxes(k, -1, -2))
    scale = 1.0 / math.sqrt(HEAD_DIM)

    def row(hi, lo):
        return _mp_softmax([(h + l) * scale for h, l in zip(hi, lo)])

    p = mp_rows(row, s.hi, s.lo)
    return dot2_matmul(np.concatenate([p.hi, p.lo], axis=-1), np.concatenate([v, v], axis=-2))


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


register(OpInfo(
    name="scaled_dot_product_attention", family="nn",
    doc=f"softmax(q k^T / sqrt(d)) v, {HEADS} heads, sequence length n, head dim {HEAD_DIM}, no mask",
    generate=_sdpa_inputs,
    exact=_sdpa_exact,
    fp64=lambda q, k, v: _np_sdpa(np, q, k, v),
    bound=_sdpa_bound,
    bound_doc="first order: (gamma_{n+5} + 2u spread(s) + 2 max|ds| + gamma_n) * P|V|, ds = gamma_{d+1}|q||k|/sqrt(d)",
    impls=(
        Impl("torch", "F.scaled_dot_product_attention", lambda ns, q, k, v:
             ns.nn.functional.scaled_dot_product_attention(q, k, v), ALL_DTYPES),
        Impl("torch", "softmax(q @ k.T / sqrt(d)) @ v", lambda ns, q, k, v: ns.softmax(
            q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM), -1) @ v, ALL_DTYPES),
        Impl("numpy", "softmax(q @ k.T / sqrt(d)) @ v", _np_sdpa, IEEE_DTYPES),
    ),
    default_size=64, bench_sizes=(256, 1024),
    flops=lambda n: 4.0 * HEADS * n * n * HEAD_DIM,
))

# -- losses ---------------------------------------------------------------------------------

CE_BATCH = 64


def _ce_inputs(rng, n):
    # class indices travel as floats: exact in every format for n <= 256
    return {"x": normal(rng, (CE_BATCH, n)) * 2.0, "target": rng.integers(0, n, CE_BATCH).astype(np.float64)}


def _ce_exact(inputs, fmt):
    x, t = inputs["x"], inputs["target"].astype(int)
    with mpmath.workprec(200):
        total = mpmath.fsum(
            mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(float(v))) for v in row)) - mpmath.mpf(float(row[ti]))
            for row, ti in zip(x, t)
        )
        return Exact.from_mpf([total / len(t)], ())


def _ce_bound(inputs, exact, fmt):
    """Each row's -log_softmax errs by gamma_{n+3}(|l| + spread + 1); their mean adds gamma_B."""
    x, t = inputs["x"], inputs["target"].astype(int)
    n, batch = x.shape[-1], x.shape[0]
    lse = scipy.special.logsumexp(x, axis=-1)
    loss = lse - x[np.arange(batch), t]
    spread = x.max(axis=-1) - x.min(axis=-1)
    per_row = gamma(n + 3, fmt.u) * (np.abs(loss) + spread + 1.0)
    return per_row.mean() + gamma(batch, fmt.u) * np.abs(loss).mean()


def _np_ce(ns, x, target):
    shifted = x - x.max(axis=-1, keepdims=True)
    logp = shifted - ns.log(ns.exp(shifted).sum(axis=-1, keepdims=True))
    return -logp[ns.arange(x.shape[0]), target.astype(int)].mean()


register(OpInfo(
    name="cross_entropy", family="nn",
    doc=f"mean cross-entropy of {CE_BATCH} rows of N(0, 2**2) logits over n classes (class-index targets)",
    generate=_ce_inputs,
    exact=_ce_exact,
    fp64=lambda x, target: _np_ce(np, x, target),
    bound=_ce_bound,
    bound_doc="mean over rows of gamma_{n+3}(|loss| + max x - min x + 1) + gamma_B * mean|loss|",
    impls=(
        Impl("torch", "F.cross_entropy", lambda ns, x, target: ns.nn.functional.cross_entropy(x, target.long()),
             ALL_DTYPES),
        Impl("torch", "F.nll_loss(F.log_softmax)", lambda ns, x, target: ns.nn.functional.nll_loss(
            ns.nn.functional.log_softmax(x, -1), target.long()), ALL_DTYPES),
        Impl("numpy", "-mean(log_softmax[t])", _np_ce, IEEE_DTYPES),
    ),
    default_size=256, bench_sizes=(128, 256),
    flops=lambda n: 4.0 * CE_BATCH * n,
))


def _mse_exact(inputs, fmt):
    return mp_rows(lambda xs, ys: [mpmath.fsum((a - b) ** 2 for a, b in zip(xs, ys)) / len(xs)],
                   inputs["x"], inputs["y"])


register(OpInfo(
    name="mse_loss", family="nn",
    doc="mean((x - y)**2) of N(0,1) vectors",
    generate=lambda rng, n: {"x": normal(rng, n), "y": normal(rng, n)},
    exact=_mse_exact,
    fp64=lambda x, y: np.mean((x - y) ** 2),
    bound=lambda inputs, exact, fmt: gamma(inputs["x"].size + 3, fmt.u) * np.abs(exact.hi),
    bound_doc="gamma_{n+3} * mse: each (x-y)**2 is 2 roundings of non-negative terms, the sum n-1, the division 1",
    impls=(
        Impl("torch", "F.mse_loss", lambda ns, x, y: ns.nn.functional.mse_loss(x, y), ALL_DTYPES),
        Impl("numpy", "mean((x - y)**2)", lambda ns, x, y: ns.mean((x - y) ** 2), IEEE_DTYPES),
    ),
    default_size=1024, bench_sizes=(1 << 16, 1 << 20),  # float16's gamma_n is vacuous beyond n = 2048
    flops=lambda n: 3.0 * n,
))
