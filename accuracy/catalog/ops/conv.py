"""Convolutions: conv1d, conv2d, conv_transpose1d.

Each output is one dot product, so the reference is the exact product over the im2col form and the bound is
gamma_k * (|w| * |x| + |b|).
"""

from __future__ import annotations

import mpmath
import numpy as np

from accuracy.backends import TORCH_VARIANTS
from accuracy.backends.jax import conv as jax_conv
from accuracy.backends.onnxruntime import single
from accuracy.backends.tensorflow import conv1d as tf_conv1d
from accuracy.backends.tensorflow import conv2d as tf_conv2d
from accuracy.catalog.ops.common import (
    CONV_BATCH,
    CONV_CHANNELS,
    CONV_KERNEL,
    IN_STORAGE,
    conv_transpose1d_exact,
    conv_transpose1d_magnitude,
    np_conv_transpose1d,
)
from accuracy.catalog.ops.frameworks import JAX_DTYPES, LIBTORCH_DTYPES, ORT_DTYPES, TF_DTYPES, gpu_note
from accuracy.catalog.registry import Impl, OpInfo
from accuracy.core.dtypes import ALL_DTYPES, IEEE_DTYPES
from accuracy.judge.error_metrics import gamma
from accuracy.reference.exact_gemm import exact_matmul
from accuracy.reference.inputs import normal
from accuracy.reference.oracles import mp


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
    """conv1d (cross-correlation) as the exact product [im2col(x), 1] @ [w.T; b]."""
    x, w, b = inputs["x"], inputs["w"], inputs["b"]
    cols = _im2col(x)
    a = np.concatenate([cols, np.ones((*cols.shape[:-1], 1))], axis=-1)
    weights = np.vstack([w.reshape(w.shape[0], -1).T, b[None, :]])
    e = exact_matmul(a.reshape(-1, a.shape[-1]), weights)
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


def _from_the_bias(conv, x, w, b):
    """`conv` summed from the bias (linear's `_linear_from_the_bias`): a first input channel of
    ones, whose kernel holds the bias at its first tap and zeros elsewhere (exact terms)."""
    ones = np.ones((x.shape[0], 1, *x.shape[2:]))
    first_tap = np.zeros((1, 1, *w.shape[2:]))
    first_tap[(0, 0, *(0 for _ in w.shape[2:]))] = 1.0
    kernel = b.reshape(-1, *(1 for _ in w.shape[1:])) * first_tap
    return conv(np, np.concatenate([ones, x], axis=1), np.concatenate([kernel, w], axis=1), b * 0.0)


def _direct_conv(x, w, b):
    """Cross-correlation by its definition, any number of spatial axes: each output is b[o] plus the
    sum over channels and kernel offsets of w * the input at position + offset (the oracle)."""
    out_shape = tuple(s - k + 1 for s, k in zip(x.shape[2:], w.shape[2:], strict=False))
    taps = list(np.ndindex(*w.shape[1:]))  # (channel, offset...)
    return [
        mpmath.fsum(
            [mp(b[o])]
            + [
                mp(x[(n, c, *(p + d for p, d in zip(pos, off, strict=False)))]) * mp(w[(o, c, *off)])
                for c, *off in taps
            ]
        )
        for n in range(x.shape[0])
        for o in range(w.shape[0])
        for pos in np.ndindex(*out_shape)
    ]


CONV1D = OpInfo(
    name="conv1d",
    doc=f"conv1d, batch {CONV_BATCH}, {CONV_CHANNELS}->{CONV_CHANNELS} channels, kernel {CONV_KERNEL}, length n",
    generate=_conv1d_inputs,
    exact=_conv1d_exact,
    fp64=lambda x, w, b: _np_conv1d(np, x, w, b),
    working=lambda x, w, b: _from_the_bias(_np_conv1d, x, w, b),
    bound=_conv1d_bound,
    bound_doc="gamma_{cin*k+1} * (|w| * |x| + |b|): each output is one dot product",
    impls=(
        Impl(
            "torch", "F.conv1d", lambda ns, x, w, b: ns.nn.functional.conv1d(x, w, b), ALL_DTYPES, also=TORCH_VARIANTS
        ),
        Impl("numpy", "einsum over sliding windows", _np_conv1d, IEEE_DTYPES),
        Impl("tensorflow", "tf.nn.conv1d (NWC)", tf_conv1d, TF_DTYPES, note=gpu_note("tensorflow")),
        Impl("onnxruntime", "Conv", single("Conv", ("x", "w", "b")), ORT_DTYPES),
        Impl(
            "libtorch",
            "torch::conv1d",
            lambda lt, x, w, b: lt.conv1d(x, w, b),
            LIBTORCH_DTYPES,
            note=gpu_note("libtorch"),
        ),
        Impl("jax", "lax.conv_general_dilated + b", jax_conv, JAX_DTYPES, note=gpu_note("jax")),
    ),
    default_size=256,
    bench_sizes=(256, 4096),
    oracle=lambda inputs: _direct_conv(inputs["x"], inputs["w"], inputs["b"]),
    test_size=6,
    flops=lambda n: 2.0 * CONV_BATCH * CONV_CHANNELS * CONV_CHANNELS * CONV_KERNEL * (n - CONV_KERNEL + 1),
)


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
    a = np.concatenate([cols, np.ones((*cols.shape[:-1], 1))], axis=-1)
    e = exact_matmul(a.reshape(-1, a.shape[-1]), np.vstack([w.reshape(w.shape[0], -1).T, b[None, :]]))
    shape = (*cols.shape[:-1], w.shape[0])
    return e.map(lambda a: a.reshape(shape).transpose(0, 3, 1, 2))


def _conv2d_bound(inputs, exact, fmt):
    x, w, b = inputs["x"], inputs["w"], inputs["b"]
    k = w[0].size + 1
    mag = np.einsum("bhwk,ok->bohw", np.abs(_im2col2d(x, w.shape[-1])), np.abs(w.reshape(w.shape[0], -1)))
    return gamma(k, fmt.u) * (mag + np.abs(b)[None, :, None, None])


def _np_conv2d(ns, x, w, b):
    win = ns.lib.stride_tricks.sliding_window_view(x, w.shape[-2:], axis=(2, 3))
    return ns.einsum("bchwij,ocij->bohw", win, w) + b[None, :, None, None]


CONV2D = OpInfo(
    name="conv2d",
    doc=(
        f"conv2d, batch {C2_BATCH}, {C2_CHANNELS}->{C2_CHANNELS} channels, {C2_KERNEL}x{C2_KERNEL} kernel, n x n images"
    ),
    generate=_conv2d_inputs,
    exact=_conv2d_exact,
    fp64=lambda x, w, b: _np_conv2d(np, x, w, b),
    working=lambda x, w, b: _from_the_bias(_np_conv2d, x, w, b),
    bound=_conv2d_bound,
    bound_doc="gamma_{cin*k*k+1} * (|w| * |x| + |b|): each output is one dot product (im2col + exact product)",
    impls=(
        Impl("torch", "F.conv2d", lambda ns, x, w, b: ns.nn.functional.conv2d(x, w, b), ALL_DTYPES),
        Impl("numpy", "einsum over sliding windows", _np_conv2d, IEEE_DTYPES),
        Impl("tensorflow", "tf.nn.conv2d (NHWC)", tf_conv2d, TF_DTYPES, note=gpu_note("tensorflow")),
        Impl("onnxruntime", "Conv", single("Conv", ("x", "w", "b")), ORT_DTYPES),
        Impl(
            "libtorch",
            "torch::conv2d",
            lambda lt, x, w, b: lt.conv2d(x, w, b),
            LIBTORCH_DTYPES,
            note=gpu_note("libtorch"),
        ),
        Impl("jax", "lax.conv_general_dilated + b", jax_conv, JAX_DTYPES, note=gpu_note("jax")),
    ),
    default_size=16,
    bench_sizes=(32, 128),
    oracle=lambda inputs: _direct_conv(inputs["x"], inputs["w"], inputs["b"]),
    test_size=4,
    flops=lambda n: 2.0 * C2_BATCH * C2_CHANNELS**2 * C2_KERNEL**2 * (n - C2_KERNEL + 1) ** 2,
)


CT_BATCH, CT_IN, CT_OUT, CT_KERNEL, CT_STRIDE = 4, 16, 8, 5, 2


def _direct_conv_transpose1d(inputs):
    """Output t gathers x[i] * w[:, :, t - i*stride] over the inputs i that reach it (the oracle)."""
    x, w, b = inputs["x"], inputs["w"], inputs["b"]
    length = (x.shape[2] - 1) * CT_STRIDE + w.shape[2]
    return [
        mpmath.fsum(
            [mp(b[o])]
            + [
                mp(x[n, c, i]) * mp(w[c, o, t - i * CT_STRIDE])
                for c in range(x.shape[1])
                for i in range(x.shape[2])
                if 0 <= t - i * CT_STRIDE < w.shape[2]
            ]
        )
        for n in range(x.shape[0])
        for o in range(w.shape[1])
        for t in range(length)
    ]


CONV_TRANSPOSE1D = OpInfo(
    name="conv_transpose1d",
    doc=f"conv_transpose1d, batch {CT_BATCH}, {CT_IN}->{CT_OUT} channels, kernel {CT_KERNEL}, stride {CT_STRIDE}",
    generate=lambda rng, n: {
        "x": normal(rng, (CT_BATCH, CT_IN, n)),
        "w": normal(rng, (CT_IN, CT_OUT, CT_KERNEL)),
        "b": normal(rng, CT_OUT),
    },
    exact=lambda inputs, fmt: conv_transpose1d_exact(inputs["x"], inputs["w"], inputs["b"], CT_STRIDE),
    fp64=lambda x, w, b: np_conv_transpose1d(np, x, w, b, CT_STRIDE),
    bound=lambda inputs, exact, fmt: (
        gamma(CT_IN * CT_KERNEL + 1, fmt.u)
        * (conv_transpose1d_magnitude(inputs["x"], inputs["w"], CT_STRIDE) + np.abs(inputs["b"])[None, :, None])
    ),
    bound_doc="gamma_{cin*k+1} * (|w| *T |x| + |b|): each output is a dot product of at most cin*k terms",
    impls=(
        Impl(
            "torch",
            "F.conv_transpose1d",
            lambda ns, x, w, b: ns.nn.functional.conv_transpose1d(x, w, b, stride=CT_STRIDE),
            ALL_DTYPES,
            compute=IN_STORAGE,
        ),
        Impl(
            "numpy", "scatter-add per tap", lambda ns, x, w, b: np_conv_transpose1d(ns, x, w, b, CT_STRIDE), IEEE_DTYPES
        ),
    ),
    default_size=128,
    bench_sizes=(256, 4096),
    oracle=_direct_conv_transpose1d,
    test_size=4,
    flops=lambda n: 2.0 * CT_BATCH * CT_IN * CT_OUT * CT_KERNEL * n,
)


OPS = [CONV1D, CONV2D, CONV_TRANSPOSE1D]
