"""Activations: relu, sigmoid, gelu, softplus, silu (elementwise, correctly rounded references) and
softmax, log_softmax over the last axis of rows (200-bit mpmath references, first-order bounds
from the shifted-exponential analysis of Blanchard, Higham and Mary).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import scipy

from accuracy.backends import TORCH_VARIANTS
from accuracy.backends.onnxruntime import GELU_ERF_FORMULA, ORT_VARIANTS, single
from accuracy.backends.tensorflow import keras_gelu
from accuracy.catalog.ops.common import IN_STORAGE, ROWS, elementwise_op, mp_softmax, rows_of, softmax_bound, spread
from accuracy.catalog.ops.frameworks import JAX_DTYPES, LIBTORCH_DTYPES, ORT_DTYPES, ORT_FLOAT64, TF_DTYPES, unary
from accuracy.catalog.registry import Impl, OpInfo
from accuracy.core.dtypes import ALL_DTYPES, IEEE_DTYPES, SINGLE_DOUBLE
from accuracy.judge.error_metrics import gamma
from accuracy.reference.exact import mp_rows
from accuracy.reference.oracles import rowwise


def _gelu64(x):
    return 0.5 * x * (1.0 + scipy.special.erf(x / math.sqrt(2.0)))


def _gelu64_accurate(x):
    """x/2 * erfc(-x/sqrt2): GELU without 1 + erf's cancellation for x << 0 (a few float64 ulps everywhere)."""
    return 0.5 * x * scipy.special.erfc(-x / math.sqrt(2.0))


def _gelu_mp(x):
    return x / 2 * (1 + mpmath.erf(x / mpmath.sqrt(2)))


SIGMOID = elementwise_op(
    "sigmoid",
    low=-12.0,
    high=12.0,
    np64=lambda x: scipy.special.expit(x),
    mp=lambda x: 1 / (1 + mpmath.exp(-x)),
    k=4,
    oracle=lambda x: mpmath.exp(x) / (1 + mpmath.exp(x)),
    doc="logistic sigmoid 1/(1+e**-x) on [-12, 12]",
    impls=[
        Impl("torch", "torch.sigmoid", lambda ns, x: ns.sigmoid(x), ALL_DTYPES),
        Impl("scipy", "special.expit", lambda ns, x: ns.special.expit(x), SINGLE_DOUBLE),
        Impl(
            "numpy",
            "1/(1+exp(-x))",
            lambda ns, x: 1 / (1 + ns.exp(-x)),
            IEEE_DTYPES,
            compute=IN_STORAGE,
            stable=False,
            note="naive: exp(-x) overflows float16 below x = -11, and 1/inf = 0",
        ),
        *unary(
            "math.sigmoid",
            "Sigmoid",
            "sigmoid",
            "nn.sigmoid",
            ORT_FLOAT64,
            findings={
                "onnxruntime": "MLAS keeps absolute, not relative, accuracy: 1.4% relative error at x = -11.6",
                "tensorflow": "TF's sigmoid kernel errs up to 5.2 ulp in float32, 1.75x the bound",
            },
        ),
    ],
)


GELU = elementwise_op(
    "gelu",
    low=-6.0,
    high=6.0,
    np64=_gelu64,
    accurate64=_gelu64_accurate,
    mp=_gelu_mp,
    k=8,
    scale_with_x=True,
    version=2,  # 2: narrow-format references no longer inherit float64's cancellation for x << 0
    oracle=lambda x: x * mpmath.ncdf(x),
    doc="GELU, exact erf form x/2*(1+erf(x/sqrt2)) on [-6, 6]",
    impls=[
        Impl("torch", "F.gelu", lambda ns, x: ns.nn.functional.gelu(x), ALL_DTYPES, also=TORCH_VARIANTS),
        Impl(
            "torch",
            "F.gelu(approximate='tanh')",
            lambda ns, x: ns.nn.functional.gelu(x, approximate="tanh"),
            ALL_DTYPES,
            semantics="approximate='tanh'",
            note="the tanh approximation of GELU: a different function from the erf form",
        ),
        Impl(
            "scipy",
            "x/2*(1+special.erf(x/sqrt2))",
            lambda ns, x: x / 2 * (1 + ns.special.erf(x / math.sqrt(2))),
            SINGLE_DOUBLE,
        ),
        Impl(
            "tensorflow",
            "tf.nn.gelu",
            lambda tf, x: tf.nn.gelu(x),
            TF_DTYPES,
            finding=(
                "float64 gelu has float32-level accuracy in the negative tail: 6.3e-7 relative on [-6, 6] "
                "(4.1e6x the float64 bound), 2.0e-6 at x = -10.646 (mpmath, 200 bits)"
            ),
        ),
        Impl(
            "tensorflow",
            "keras.ops.gelu",
            keras_gelu,
            TF_DTYPES,
            semantics="approximate=True",
            note="keras.ops.gelu defaults to the tanh approximation (keras.activations.gelu does not)",
        ),
        Impl("onnxruntime", "Gelu", single("Gelu", ("x",)), ORT_DTYPES),
        Impl(
            "onnxruntime",
            "Gelu(approximate='tanh')",
            single("Gelu", ("x",), approximate="tanh"),
            ORT_DTYPES,
            semantics="approximate='tanh'",
        ),
        Impl(
            "onnxruntime",
            "com.microsoft.FastGelu",
            single("FastGelu", ("x",), domain="com.microsoft"),
            ORT_DTYPES,
            semantics="approximate='tanh'",
            note="ORT's FastGelu is the tanh approximation; its Gelu is the erf form",
        ),
        Impl(
            "onnxruntime",
            "x*(1+Erf(x/sqrt2))/2 graph",
            GELU_ERF_FORMULA,
            ORT_DTYPES,
            also=ORT_VARIANTS,
            note="the exporter's erf formula: ORT's optimizer fuses it into one Gelu kernel",
        ),
        Impl("libtorch", "torch::gelu", lambda lt, x: lt.gelu(x, "none"), LIBTORCH_DTYPES),
        Impl(
            "libtorch",
            "torch::gelu(approximate='tanh')",
            lambda lt, x: lt.gelu(x, "tanh"),
            LIBTORCH_DTYPES,
            semantics="approximate='tanh'",
        ),
        Impl("jax", "jax.nn.gelu(approximate=False)", lambda jax, x: jax.nn.gelu(x, approximate=False), JAX_DTYPES),
        Impl(
            "jax",
            "jax.nn.gelu",
            lambda jax, x: jax.nn.gelu(x),
            JAX_DTYPES,
            semantics="approximate=True",
            note="jax.nn.gelu defaults to the tanh approximation",
        ),
    ],
)


def _softplus64(x):
    return np.logaddexp(0.0, x)


def _silu64(x):
    return x * scipy.special.expit(x)


SOFTPLUS = elementwise_op(
    "softplus",
    low=-15.0,
    high=15.0,
    np64=_softplus64,
    mp=lambda x: mpmath.log1p(mpmath.exp(x)),
    k=4,
    oracle=lambda x: mpmath.log(1 + mpmath.exp(x)),
    doc="softplus log(1 + e**x) on [-15, 15] (below torch's threshold=20 switch to x)",
    impls=[
        Impl("torch", "F.softplus", lambda ns, x: ns.nn.functional.softplus(x), ALL_DTYPES),
        Impl("numpy", "np.logaddexp(0, x)", lambda ns, x: ns.logaddexp(ns.zeros_like(x), x), IEEE_DTYPES),
        Impl(
            "numpy",
            "log(1 + exp(x))",
            lambda ns, x: ns.log(1 + ns.exp(x)),
            IEEE_DTYPES,
            stable=False,
            note="naive: 1 + e**x rounds away the tail for x << 0",
        ),
    ],
)
SILU = elementwise_op(
    "silu",
    low=-12.0,
    high=12.0,
    np64=_silu64,
    mp=lambda x: x / (1 + mpmath.exp(-x)),
    k=4,
    oracle=lambda x: x * mpmath.exp(x) / (1 + mpmath.exp(x)),
    doc="SiLU / swish x*sigmoid(x) on [-12, 12]",
    impls=[
        Impl("torch", "F.silu", lambda ns, x: ns.nn.functional.silu(x), ALL_DTYPES),
        Impl(
            "torch",
            "x * sigmoid(x)",
            lambda ns, x: x * ns.sigmoid(x),
            ALL_DTYPES,
            compute=IN_STORAGE,
            stable=False,
            note="sigmoid(x) is subnormal in float16 below x = -9.7: the product loses its digits",
        ),
        Impl("scipy", "x * special.expit(x)", lambda ns, x: x * ns.special.expit(x), SINGLE_DOUBLE),
        Impl(
            "numpy",
            "x / (1 + exp(-x))",
            lambda ns, x: x / (1 + ns.exp(-x)),
            IEEE_DTYPES,
            compute=IN_STORAGE,
            stable=False,
            note="exp(-x) overflows float16 below x = -11: x/inf = 0",
        ),
    ],
)


RELU = elementwise_op(
    "relu",
    low=-4.0,
    high=4.0,
    np64=lambda x: np.maximum(x, 0.0),
    mp=lambda x: max(x, 0),
    k=0.5,
    oracle=lambda x: (x + abs(x)) / 2,
    doc="max(x, 0) on [-4, 4]: exact in every format, so any error at all is a bug",
    impls=[
        Impl("torch", "F.relu", lambda ns, x: ns.nn.functional.relu(x), ALL_DTYPES, also=TORCH_VARIANTS),
        Impl("torch", "torch.clamp_min(x, 0)", lambda ns, x: ns.clamp_min(x, 0), ALL_DTYPES),
        Impl("numpy", "np.maximum(x, 0)", lambda ns, x: ns.maximum(x, 0), IEEE_DTYPES),
    ],
)


def _mp_log_softmax(row):
    m = max(row)
    lse = m + mpmath.log(mpmath.fsum(mpmath.exp(v - m) for v in row))
    return [v - lse for v in row]


def _log_softmax_bound(inputs, exact, fmt):
    x = inputs["x"]
    return gamma(x.shape[-1] + 3, fmt.u) * (np.abs(exact.hi) + spread(x) + 1.0)


def _unshifted_softmax(row):
    """exp(x) / sum exp(x) without the max shift (the oracle's formula: no overflow at 200 bits)."""
    e = [mpmath.exp(v) for v in row]
    s = mpmath.fsum(e)
    return [v / s for v in e]


def _np_softmax(ns, x):
    e = ns.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _np_log_softmax(ns, x):
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - ns.log(ns.exp(shifted).sum(axis=-1, keepdims=True))


SOFTMAX = OpInfo(
    name="softmax",
    doc=f"softmax over the last axis of {ROWS} rows of N(0, 2**2) logits",
    generate=rows_of(scale=2.0),
    exact=lambda inputs, fmt: mp_rows(mp_softmax, inputs["x"]),
    fp64=lambda x: _np_softmax(np, x),  # scipy's formula, in ufuncs the typical tier can emulate
    bound=softmax_bound,
    bound_doc="(gamma_{n+3} + 2u*(max x - min x)) * softmax(x) (Blanchard, Higham, Mary 2021)",
    impls=(
        Impl("torch", "torch.softmax", lambda ns, x: ns.softmax(x, -1), ALL_DTYPES, also=TORCH_VARIANTS),
        Impl("scipy", "special.softmax", lambda ns, x: ns.special.softmax(x, axis=-1), SINGLE_DOUBLE),
        Impl("numpy", "exp(x - max) / sum", _np_softmax, IEEE_DTYPES, compute=IN_STORAGE),
        Impl("tensorflow", "tf.nn.softmax", lambda tf, x: tf.nn.softmax(x), TF_DTYPES),
        Impl("onnxruntime", "Softmax", single("Softmax", ("x",), axis=-1), ORT_FLOAT64),
        Impl("libtorch", "torch::softmax", lambda lt, x: lt.softmax(x), LIBTORCH_DTYPES),
        Impl("jax", "jax.nn.softmax", lambda jax, x: jax.nn.softmax(x), JAX_DTYPES),
    ),
    default_size=1024,
    bench_sizes=(1024, 1 << 15),
    oracle=rowwise(_unshifted_softmax),
    test_size=8,
    flops=lambda n: 4.0 * ROWS * n,
)

LOG_SOFTMAX = OpInfo(
    name="log_softmax",
    doc=f"log_softmax over the last axis of {ROWS} rows of N(0, 2**2) logits",
    generate=rows_of(scale=2.0),
    exact=lambda inputs, fmt: mp_rows(_mp_log_softmax, inputs["x"]),
    fp64=lambda x: _np_log_softmax(np, x),  # scipy's formula, in ufuncs the typical tier can emulate
    bound=_log_softmax_bound,
    bound_doc="gamma_{n+3} * (|y| + max x - min x + 1)",
    impls=(
        Impl(
            "torch",
            "F.log_softmax",
            lambda ns, x: ns.nn.functional.log_softmax(x, -1),
            ALL_DTYPES,
            compute={"bfloat16": "bfloat16"},
        ),
        Impl("scipy", "special.log_softmax", lambda ns, x: ns.special.log_softmax(x, axis=-1), SINGLE_DOUBLE),
        Impl("numpy", "x - max - log(sum(exp))", _np_log_softmax, IEEE_DTYPES, compute=IN_STORAGE),
        Impl("tensorflow", "tf.nn.log_softmax", lambda tf, x: tf.nn.log_softmax(x), TF_DTYPES),
        Impl("onnxruntime", "LogSoftmax", single("LogSoftmax", ("x",), axis=-1), ORT_FLOAT64),
        Impl("libtorch", "torch::log_softmax", lambda lt, x: lt.log_softmax(x), LIBTORCH_DTYPES),
        Impl("jax", "jax.nn.log_softmax", lambda jax, x: jax.nn.log_softmax(x), JAX_DTYPES),
        Impl(
            "torch",
            "log(softmax(x))",
            lambda ns, x: ns.log(ns.softmax(x, -1)),
            ALL_DTYPES,
            stable=False,
            note="log of a rounded probability: loses the tail where softmax underflows",
            compute=IN_STORAGE,
        ),
    ),
    default_size=1024,
    bench_sizes=(1024, 1 << 15),
    oracle=rowwise(lambda row: [mpmath.log(p) for p in _unshifted_softmax(row)]),
    test_size=8,
    flops=lambda n: 4.0 * ROWS * n,
)


OPS = [SOFTMAX, LOG_SOFTMAX, SIGMOID, GELU, SOFTPLUS, SILU, RELU]
