"""Normalisations: layer_norm, batch_norm (eval mode), group_norm.

References from 200-bit mpmath; bounds first order, built from the sum and variance bounds.
"""

from __future__ import annotations

import mpmath
import numpy as np

from accuracy.backends import TORCH_VARIANTS
from accuracy.backends.onnxruntime import single
from accuracy.backends.tensorflow import keras_layer_norm
from accuracy.catalog.ops.common import LAYER_NORM_EPS, ROWS, layer_norm_bound, layer_norm_inputs, mp_layer_norm
from accuracy.catalog.ops.frameworks import JAX_DTYPES, LIBTORCH_DTYPES, ORT_DTYPES, TF_DTYPES
from accuracy.catalog.registry import Impl, OpInfo
from accuracy.core.dtypes import ALL_DTYPES, IEEE_DTYPES
from accuracy.judge.error_metrics import gamma
from accuracy.reference.exact import MP_PRECISION_BITS, Exact, fsum_rows, mp_rows, two_prod, two_sum
from accuracy.reference.inputs import normal, uniform
from accuracy.reference.oracles import mp, mp_list, one_pass_var, rowwise


def _row_values(hi: np.ndarray, lo: np.ndarray, fn) -> tuple[np.ndarray, np.ndarray]:
    """fn of each row's double-double statistic at 200 bits, as a double-double."""
    with mpmath.workprec(MP_PRECISION_BITS):
        values = [fn(mp(h) + mp(low)) for h, low in zip(hi.ravel(), lo.ravel(), strict=True)]
        first = np.array([float(v) for v in values], dtype=np.float64).reshape(hi.shape)
        rest = np.array([float(v - float(v)) for v in values], dtype=np.float64).reshape(hi.shape)
    return first, rest


def _layer_norm_exact(inputs, fmt):
    """(x - mean) / sqrt(var + eps) * w + b over the last axis: each row's mean and 1/sqrt(var + eps)
    at 200 bits from exact sums (math.fsum of the values, then of the squared deviations as
    TwoProduct pairs), the elementwise part by TwoSum/TwoProduct in one vectorised pass. Accurate
    to about 2**-100 of |w z| + |b| + |w| |mean| / sigma (the mean is a double-double), far below
    any format's rounding (the bound's own term is gamma_n |w| |mean| / sigma), where 200-bit
    arithmetic per element took minutes for a transformer's layer norms."""
    x = np.asarray(inputs["x"], dtype=np.float64)
    w = np.broadcast_to(np.asarray(inputs["w"], dtype=np.float64), x.shape)
    b = np.broadcast_to(np.asarray(inputs["b"], dtype=np.float64), x.shape)
    n = x.shape[-1]
    with np.errstate(all="ignore"):
        total = fsum_rows(x)
        mean, mean_lo = _row_values(total.hi, total.lo, lambda s: s / n)
        d, d_lo = two_sum(x, -mean[..., None])
        d_lo = d_lo - mean_lo[..., None]
        p, e = two_prod(d, d)
        squares = fsum_rows(np.concatenate([p, e + 2 * d * d_lo], axis=-1))
        inv, inv_lo = _row_values(squares.hi, squares.lo, lambda q: 1 / mpmath.sqrt(q / n + LAYER_NORM_EPS))
        z, z_e = two_prod(d, inv[..., None])
        z_e = z_e + (d * inv_lo[..., None] + d_lo * inv[..., None])
        y, y_e = two_prod(z, w)
        s, q = two_sum(y, b)
        tail = q + (y_e + z_e * w)
        hi = s + tail
        lo = tail - (hi - s)
        plain = _np_layer_norm(np, x, w, b)
    finite = np.isfinite(hi) & np.isfinite(lo)
    return Exact(np.where(finite, hi, plain), np.where(finite, lo, 0.0))


def _normalized(row, w, b):
    """(x - mean) / sqrt(var + eps) * w + b with the one-pass variance (the oracle's formula)."""
    mean = mpmath.fsum(row) / len(row)
    rstd = 1 / mpmath.sqrt(one_pass_var(row) + LAYER_NORM_EPS)
    return [(v - mean) * rstd * wi + bi for v, wi, bi in zip(row, w, b, strict=False)]


def _np_layer_norm(ns, x, w, b):
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / ns.sqrt(var + LAYER_NORM_EPS) * w + b


_ORT_LAYER_NORM = single("LayerNormalization", ("x", "w", "b"), axis=-1, epsilon=LAYER_NORM_EPS)

LAYER_NORM = OpInfo(
    name="layer_norm",
    doc=f"layer_norm over the last axis of {ROWS} rows of N(2,1), eps={LAYER_NORM_EPS}, affine w, b",
    generate=layer_norm_inputs,
    exact=_layer_norm_exact,
    fp64=lambda x, w, b: _np_layer_norm(np, x, w, b),
    bound=layer_norm_bound,
    bound_doc="first-order: |w|*(|z| rel(sigma) + gamma_{n+1} mean|x|/sigma) + gamma_2(|w z| + |b|)",
    impls=(
        Impl(
            "torch",
            "F.layer_norm",
            lambda ns, x, w, b: ns.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps=LAYER_NORM_EPS),
            ALL_DTYPES,
            also=TORCH_VARIANTS,
        ),
        Impl("numpy", "(x - mean)/sqrt(var + eps)*w + b", _np_layer_norm, IEEE_DTYPES),
        Impl(
            "tensorflow",
            f"keras LayerNormalization(epsilon={LAYER_NORM_EPS})",
            lambda tf, x, w, b: keras_layer_norm(tf, x, w, b, LAYER_NORM_EPS),
            TF_DTYPES,
        ),
        Impl(
            "tensorflow",
            "keras LayerNormalization()",
            keras_layer_norm,
            TF_DTYPES,
            semantics="epsilon=1e-3",
            note="Keras's default epsilon is 1e-3, torch's 1e-5: a different function on rows of small variance",
        ),
        Impl("onnxruntime", "LayerNormalization", _ORT_LAYER_NORM, ORT_DTYPES),
        # ONNX stores a FLOAT attribute in 32 bits: epsilon becomes float32(1e-5) = 1e-5 - 2.5e-14. Measured
        # here (n=64, unit variance): 5.5e-13 absolute off the exact result with eps=1e-5, and 8.9e-16 off
        # the exact result with eps=float32(1e-5). Harmless in float32, a different function in float64.
        Impl(
            "onnxruntime",
            "LayerNormalization (float64)",
            _ORT_LAYER_NORM,
            ("float64",),
            semantics="epsilon=float32(1e-5)",
            note="ONNX attributes are float32: the kernel adds float32(1e-5), not 1e-5, to the variance",
        ),
        Impl(
            "libtorch", "torch::layer_norm", lambda lt, x, w, b: lt.layer_norm(x, w, b, LAYER_NORM_EPS), LIBTORCH_DTYPES
        ),
        Impl(
            "jax",
            "jax.nn.standardize(algorithm='stable') * w + b",
            lambda jax, x, w, b: jax.nn.standardize(x, axis=-1, epsilon=LAYER_NORM_EPS, algorithm="stable") * w + b,
            JAX_DTYPES,
            note="JAX has no layer_norm; flax.linen.LayerNorm computes the same (with epsilon=1e-6 by default)",
        ),
        Impl(
            "jax",
            "jax.nn.standardize * w + b",
            lambda jax, x, w, b: jax.nn.standardize(x, axis=-1, epsilon=LAYER_NORM_EPS) * w + b,
            JAX_DTYPES,
            stable=False,
            note="standardize's default algorithm='fast' is mean(x**2) - mean(x)**2, which cancels when |mean| >> std",
        ),
    ),
    default_size=1024,
    bench_sizes=(1024, 1 << 14),
    oracle=rowwise(_normalized, "x", "w", "b"),
    test_size=8,
    flops=lambda n: 8.0 * ROWS * n,
)


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
    """(x - mean) * scale + b, scale = w / sqrt(var + eps): the per-channel scale at 200 bits as a
    double-double, the elementwise part by error-free float64 transformations (TwoSum, Dekker's
    TwoProduct) in one vectorised pass. Accurate to about 2**-100 (|x - mean| |scale| + |b|), as
    far below any format's rounding as mpmath per element was, which took seconds per activation
    of a model (a ResNet's batch norms: minutes)."""
    x = np.asarray(inputs["x"], dtype=np.float64)
    with mpmath.workprec(MP_PRECISION_BITS):
        scales = [mp(w) / mpmath.sqrt(mp(v) + BN_EPS) for w, v in zip(inputs["w"], inputs["var"], strict=True)]
        scale_hi = np.array([float(s) for s in scales], dtype=np.float64)
        scale_lo = np.array([float(s - float(s)) for s in scales], dtype=np.float64)
    scale, scale_lo = _per_channel(scale_hi, x), _per_channel(scale_lo, x)
    with np.errstate(all="ignore"):
        d, d_lo = two_sum(x, -_per_channel(np.asarray(inputs["mean"], dtype=np.float64), x))
        p, e = two_prod(d, scale)
        s, q = two_sum(p, _per_channel(np.asarray(inputs["b"], dtype=np.float64), x))
        tail = q + (e + (d * scale_lo + d_lo * scale))
        hi = s + tail
        lo = tail - (hi - s)
        plain = d * scale + _per_channel(np.asarray(inputs["b"], dtype=np.float64), x)
    finite = np.isfinite(hi) & np.isfinite(lo)
    return Exact(np.where(finite, hi, plain), np.where(finite, lo, 0.0))


def _bn_folded(inputs):
    """The folded form x * scale + (b - mean * scale), scale = w / sqrt(var + eps), channel by channel."""
    x = inputs["x"]
    scale = [mp(w) / mpmath.sqrt(mp(v) + BN_EPS) for w, v in zip(inputs["w"], inputs["var"], strict=False)]
    shift = [mp(b) - mp(m) * s for b, m, s in zip(inputs["b"], inputs["mean"], scale, strict=False)]
    return [mp(v) * scale[c] + shift[c] for n in range(x.shape[0]) for c in range(x.shape[1]) for v in x[n, c]]


def _bn_bound(inputs, exact, fmt):
    """Either (x - m)*inv*w + b or x*scale + (b - m*scale): gamma_6 * ((|x| + |m|)|scale| + |b|)."""
    x = inputs["x"]
    scale = np.abs(inputs["w"]) / np.sqrt(inputs["var"] + BN_EPS)
    return (
        gamma(6, fmt.u)
        * (
            (np.abs(x) + _per_channel(np.abs(inputs["mean"]), x)) * _per_channel(scale, x)
            + _per_channel(np.abs(inputs["b"]), x)
        )
        + fmt.smallest_subnormal
    )


def _folded_bn(x, mean, var, w, b):
    """y = x * scale + (b - mean * scale), scale = w / sqrt(var + eps)."""
    c = (slice(None), None)
    scale = w / np.sqrt(var + BN_EPS)
    return x * scale[c] + (b - mean * scale)[c]


def _np_bn(ns, x, mean, var, w, b):
    c = (slice(None), None)
    return (x - mean[c]) / ns.sqrt(var[c] + BN_EPS) * w[c] + b[c]


BATCH_NORM = OpInfo(
    name="batch_norm",
    doc=f"batch_norm in eval mode (given running mean/var), {BN_BATCH} x {BN_CHANNELS} channels x n, eps={BN_EPS}",
    generate=_bn_inputs,
    exact=_bn_exact,
    # the folded form frameworks use (scale, then shift): in float64 it is as good a reference as
    # the direct one, and the typical tier emulates it, the less accurate of the two correct algorithms
    fp64=lambda x, mean, var, w, b: _folded_bn(x, mean, var, w, b),
    bound=_bn_bound,
    bound_doc="gamma_6 * ((|x| + |mean|) |w|/sqrt(var + eps) + |b|): covers the folded scale/shift form",
    impls=(
        Impl(
            "torch",
            "F.batch_norm(training=False)",
            lambda ns, x, mean, var, w, b: ns.nn.functional.batch_norm(x, mean, var, w, b, training=False, eps=BN_EPS),
            ALL_DTYPES,
        ),
        Impl("numpy", "(x - mean)/sqrt(var + eps)*w + b", _np_bn, IEEE_DTYPES),
    ),
    default_size=64,
    bench_sizes=(256, 4096),
    oracle=_bn_folded,
    test_size=4,
    flops=lambda n: 4.0 * BN_BATCH * BN_CHANNELS * n,
)

GN_BATCH, GN_CHANNELS, GN_GROUPS = 4, 16, 4


def _gn_inputs(rng, n):
    return {
        "x": normal(rng, (GN_BATCH, GN_CHANNELS, n)) + 2.0,
        "w": normal(rng, GN_CHANNELS),
        "b": normal(rng, GN_CHANNELS),
    }


def _gn_rows(inputs):
    """Each (batch, group) as one row, with w and b broadcast along it."""
    x = inputs["x"]
    rows = (x.shape[0] * GN_GROUPS, -1)
    return x.reshape(rows), _per_channel(inputs["w"], x).reshape(rows), _per_channel(inputs["b"], x).reshape(rows)


def _gn_exact(inputs, fmt):
    e = mp_rows(mp_layer_norm, *_gn_rows(inputs))
    return e.map(lambda a: a.reshape(inputs["x"].shape))


def _gn_by_group(inputs):
    """Each (batch, group)'s values normalised together, then scaled and shifted by their channel's w, b."""
    x, w, b = inputs["x"], inputs["w"], inputs["b"]
    channel = np.arange(x.shape[1]).repeat(x.shape[2])  # the channel of each value of a flattened sample
    out = []
    for sample in x:
        for group, cs in zip(np.split(sample.ravel(), GN_GROUPS), np.split(channel, GN_GROUPS), strict=False):
            out += _normalized(mp_list(group), mp_list(w[cs]), mp_list(b[cs]))
    return out


def _gn_bound(inputs, exact, fmt):
    x, w, b = _gn_rows(inputs)
    return layer_norm_bound({"x": x, "w": w, "b": b}, exact, fmt).reshape(inputs["x"].shape)


def _np_gn(ns, x, w, b):
    g = x.reshape(x.shape[0], GN_GROUPS, -1)
    z = (g - g.mean(axis=-1, keepdims=True)) / ns.sqrt(g.var(axis=-1, keepdims=True) + LAYER_NORM_EPS)
    return z.reshape(x.shape) * w[:, None] + b[:, None]


GROUP_NORM = OpInfo(
    name="group_norm",
    doc=(
        f"group_norm, {GN_GROUPS} groups of {GN_CHANNELS} channels x length n, "
        f"batch {GN_BATCH}, N(2,1), eps={LAYER_NORM_EPS}"
    ),
    generate=_gn_inputs,
    exact=_gn_exact,
    fp64=lambda x, w, b: _np_gn(np, x, w, b),
    bound=_gn_bound,
    bound_doc="layer_norm's first-order bound per (batch, group) row of length (C/G)*n",
    impls=(
        Impl(
            "torch",
            "F.group_norm",
            lambda ns, x, w, b: ns.nn.functional.group_norm(x, GN_GROUPS, w, b, eps=LAYER_NORM_EPS),
            ALL_DTYPES,
        ),
        Impl("numpy", "grouped (x - mean)/sqrt(var + eps)*w + b", _np_gn, IEEE_DTYPES),
    ),
    default_size=64,
    bench_sizes=(256, 4096),
    oracle=_gn_by_group,
    test_size=4,
    flops=lambda n: 8.0 * GN_BATCH * GN_CHANNELS * n,
)


OPS = [LAYER_NORM, BATCH_NORM, GROUP_NORM]
