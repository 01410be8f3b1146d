"""Elementwise math functions: exp, log, tanh, erf, sin, cos, expm1, log1p, sqrt, rsqrt, pow.

The exact reference is the correctly rounded value; the bound is k*u*|f(x)| (plus the smallest
subnormal). pow takes two inputs and is referenced by 200-bit mpmath outright.
"""

from __future__ import annotations

import mpmath
import numpy as np
import scipy

from accuracy.catalog.ops.common import IN_STORAGE, elementwise_op
from accuracy.catalog.ops.frameworks import ORT_FLOAT64, unary
from accuracy.catalog.registry import Impl, OpInfo
from accuracy.core.dtypes import ALL_DTYPES, IEEE_DTYPES, SINGLE_DOUBLE
from accuracy.reference.exact import mp_rows
from accuracy.reference.inputs import uniform
from accuracy.reference.oracles import elementwise

EXP = elementwise_op(
    "exp",
    low=-10.0,
    high=10.0,
    np64=np.exp,
    mp=mpmath.exp,
    k=4,
    oracle=lambda x: mpmath.e**x,
    doc="e**x on [-10, 10] (inside float16's range)",
    impls=[
        Impl("numpy", "np.exp", lambda ns, x: ns.exp(x), IEEE_DTYPES),
        Impl("torch", "torch.exp", lambda ns, x: ns.exp(x), ALL_DTYPES),
        *unary("math.exp", "Exp", "exp", "numpy.exp", ORT_FLOAT64),
    ],
)
LOG = elementwise_op(
    "log",
    low=1e-3,
    high=1e3,
    np64=np.log,
    mp=mpmath.log,
    k=4,
    oracle=lambda x: 2 * mpmath.atanh((x - 1) / (x + 1)),
    doc="natural log on [1e-3, 1e3]",
    impls=[
        Impl("numpy", "np.log", lambda ns, x: ns.log(x), IEEE_DTYPES),
        Impl("torch", "torch.log", lambda ns, x: ns.log(x), ALL_DTYPES),
        *unary("math.log", "Log", "log", "numpy.log", ORT_FLOAT64),
    ],
)
TANH = elementwise_op(
    "tanh",
    low=-5.0,
    high=5.0,
    np64=np.tanh,
    mp=mpmath.tanh,
    k=4,
    oracle=lambda x: (mpmath.exp(2 * x) - 1) / (mpmath.exp(2 * x) + 1),
    doc="tanh on [-5, 5]",
    impls=[
        Impl("numpy", "np.tanh", lambda ns, x: ns.tanh(x), IEEE_DTYPES),
        Impl("torch", "torch.tanh", lambda ns, x: ns.tanh(x), ALL_DTYPES),
        *unary(
            "math.tanh",
            "Tanh",
            "tanh",
            "numpy.tanh",
            ORT_FLOAT64,
            findings={
                "tensorflow": "Eigen's float32 tanh errs up to 4.42 ulp on 65536 inputs in [-5, 5], 1.11x the bound",
                "onnxruntime": "MLAS's float32 tanh errs up to 4.38 ulp on 65536 inputs in [-5, 5], 1.10x the bound",
                "jax": "XLA's float32 tanh errs up to 4.38 ulp on 65536 inputs in [-5, 5], 1.10x the bound",
            },
        ),
    ],
)


ERF = elementwise_op(
    "erf",
    low=-4.0,
    high=4.0,
    np64=lambda x: scipy.special.erf(x),
    mp=mpmath.erf,
    k=4,
    oracle=lambda x: 2 * x / mpmath.sqrt(mpmath.pi) * mpmath.exp(-x * x) * mpmath.hyp1f1(1, 1.5, x * x),  # Kummer
    doc="error function on [-4, 4]",
    impls=[
        Impl("torch", "torch.erf", lambda ns, x: ns.erf(x), ALL_DTYPES),
        Impl("scipy", "special.erf", lambda ns, x: ns.special.erf(x), SINGLE_DOUBLE),
        *unary(
            "math.erf",
            "Erf",
            "erf",
            "scipy.special.erf",
            findings={
                "tensorflow": "Eigen's erf polynomial errs up to 4.75 ulp in float32, 1.19x the bound",
                "jax": "XLA's erf errs up to 4.57 ulp in float32, 1.14x the bound",
            },
        ),
    ],
)


SIN = elementwise_op(
    "sin",
    low=-10.0,
    high=10.0,
    np64=np.sin,
    mp=mpmath.sin,
    k=4,
    oracle=lambda x: mpmath.cos(x - mpmath.pi / 2),
    doc="sine on [-10, 10] (argument reduction over a few periods, zeros included)",
    impls=[
        Impl("numpy", "np.sin", lambda ns, x: ns.sin(x), IEEE_DTYPES),
        Impl("torch", "torch.sin", lambda ns, x: ns.sin(x), ALL_DTYPES),
    ],
)
COS = elementwise_op(
    "cos",
    low=-10.0,
    high=10.0,
    np64=np.cos,
    mp=mpmath.cos,
    k=4,
    oracle=lambda x: mpmath.sin(x + mpmath.pi / 2),
    doc="cosine on [-10, 10]",
    impls=[
        Impl("numpy", "np.cos", lambda ns, x: ns.cos(x), IEEE_DTYPES),
        Impl("torch", "torch.cos", lambda ns, x: ns.cos(x), ALL_DTYPES),
    ],
)
EXPM1 = elementwise_op(
    "expm1",
    low=-5.0,
    high=5.0,
    np64=np.expm1,
    mp=mpmath.expm1,
    k=4,
    oracle=lambda x: mpmath.exp(x) - 1,
    doc="e**x - 1 on [-5, 5]",
    impls=[
        Impl("numpy", "np.expm1", lambda ns, x: ns.expm1(x), IEEE_DTYPES),
        Impl("torch", "torch.expm1", lambda ns, x: ns.expm1(x), ALL_DTYPES),
        Impl(
            "numpy",
            "exp(x) - 1",
            lambda ns, x: ns.exp(x) - 1,
            IEEE_DTYPES,
            stable=False,
            note="cancels near 0: the reason expm1 exists",
        ),
    ],
)
LOG1P = elementwise_op(
    "log1p",
    low=-0.9,
    high=10.0,
    np64=np.log1p,
    mp=mpmath.log1p,
    k=4,
    oracle=lambda x: mpmath.log(1 + x),
    doc="log(1 + x) on [-0.9, 10]",
    impls=[
        Impl("numpy", "np.log1p", lambda ns, x: ns.log1p(x), IEEE_DTYPES),
        Impl("torch", "torch.log1p", lambda ns, x: ns.log1p(x), ALL_DTYPES),
        Impl(
            "numpy",
            "log(1 + x)",
            lambda ns, x: ns.log(1 + x),
            IEEE_DTYPES,
            stable=False,
            note="1 + x rounds away x's low bits near 0",
        ),
    ],
)
SQRT = elementwise_op(
    "sqrt",
    low=1e-3,
    high=1e3,
    np64=np.sqrt,
    mp=mpmath.sqrt,
    k=2,
    oracle=lambda x: mpmath.exp(mpmath.log(x) / 2),
    doc="square root on [1e-3, 1e3] (IEEE 754 requires correct rounding)",
    impls=[
        Impl("numpy", "np.sqrt", lambda ns, x: ns.sqrt(x), IEEE_DTYPES),
        Impl("torch", "torch.sqrt", lambda ns, x: ns.sqrt(x), ALL_DTYPES),
    ],
)
RSQRT = elementwise_op(
    "rsqrt",
    low=1e-3,
    high=1e3,
    np64=lambda x: 1.0 / np.sqrt(x),
    mp=lambda x: 1 / mpmath.sqrt(x),
    k=4,
    oracle=lambda x: mpmath.power(x, -0.5),
    doc="reciprocal square root on [1e-3, 1e3]",
    impls=[
        Impl(
            "torch",
            "torch.rsqrt",
            lambda ns, x: ns.rsqrt(x),
            ALL_DTYPES,
            compute=IN_STORAGE,
            note="ATen's DEFAULT-level kernel (a CPU without AVX2, or ATEN_CPU_CAPABILITY=default) computes "
            "float16 and bfloat16 as 1 / sqrt(x) in the storage format: two roundings, up to 1.5x the bound "
            "of one float32 evaluation rounded once",
        ),
        Impl("numpy", "1 / np.sqrt(x)", lambda ns, x: 1 / ns.sqrt(x), IEEE_DTYPES, compute=IN_STORAGE),
    ],
)


def _pow_exact(inputs, fmt):
    return mp_rows(lambda xs, ys: [a**b for a, b in zip(xs, ys, strict=False)], inputs["x"], inputs["y"])


POW_K = 8

POW = OpInfo(
    name="pow",
    doc="x**y with x uniform in [0.25, 4], y in [-4, 4] (results inside float16's range)",
    generate=lambda rng, n: {"x": uniform(rng, n, 0.25, 4.0), "y": uniform(rng, n, -4.0, 4.0)},
    exact=_pow_exact,
    fp64=lambda x, y: np.power(x, y),
    bound=lambda inputs, exact, fmt: POW_K * fmt.u * np.abs(exact.hi) + fmt.smallest_subnormal,
    bound_doc=f"{POW_K}*u*|x**y|: a few ulps (exp(y*log x) needs log x to extra precision)",
    impls=(
        Impl("numpy", "np.power", lambda ns, x, y: ns.power(x, y), IEEE_DTYPES),
        Impl("torch", "torch.pow", lambda ns, x, y: ns.pow(x, y), ALL_DTYPES),
        Impl(
            "numpy",
            "exp(y * log(x))",
            lambda ns, x, y: ns.exp(y * ns.log(x)),
            IEEE_DTYPES,
            stable=False,
            note="log x's rounding error is multiplied by |y log x|: loses bits",
        ),
    ),
    default_size=4096,
    bench_sizes=(1 << 16, 1 << 20),
    oracle=elementwise(lambda x, y: mpmath.exp(y * mpmath.log(x)), "x", "y"),
    test_size=64,
)


OPS = [EXP, LOG, TANH, ERF, SIN, COS, EXPM1, LOG1P, SQRT, RSQRT, POW]
