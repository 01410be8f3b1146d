"""More elementwise functions: softplus, silu, sin, cos, expm1, log1p, sqrt, rsqrt, pow.

Same contract as elementwise.py: the exact reference is the correctly rounded value and the
bound is k*u*|f(x)| (plus the smallest subnormal). pow takes two inputs and is referenced by
200-bit mpmath outright.
"""

from __future__ import annotations

import mpmath
import numpy as np
import scipy.special

from accuracy.dtypes import ALL_DTYPES, IEEE_DTYPES
from accuracy.exact import mp_rows
from accuracy.inputs import uniform
from accuracy.ops.elementwise import SCIPY_DTYPES, _elementwise
from accuracy.registry import Impl, OpInfo, register


def _softplus64(x):
    return np.logaddexp(0.0, x)


def _silu64(x):
    return x * scipy.special.expit(x)


_elementwise(
    "softplus", low=-15.0, high=15.0, np64=_softplus64, mp=lambda x: mpmath.log1p(mpmath.exp(x)), k=4,
    doc="softplus log(1 + e**x) on [-15, 15] (below torch's threshold=20 switch to x)",
    impls=[
        Impl("torch", "F.softplus", lambda ns, x: ns.nn.functional.softplus(x), ALL_DTYPES),
        Impl("numpy", "np.logaddexp(0, x)", lambda ns, x: ns.logaddexp(ns.zeros_like(x), x), IEEE_DTYPES),
        Impl("numpy", "log(1 + exp(x))", lambda ns, x: ns.log(1 + ns.exp(x)), IEEE_DTYPES,
             note="naive: 1 + e**x rounds away the tail for x << 0"),
    ],
)
_elementwise(
    "silu", low=-12.0, high=12.0, np64=_silu64, mp=lambda x: x / (1 + mpmath.exp(-x)), k=4,
    doc="SiLU / swish x*sigmoid(x) on [-12, 12]",
    impls=[
        Impl("torch", "F.silu", lambda ns, x: ns.nn.functional.silu(x), ALL_DTYPES),
        Impl("torch", "x * sigmoid(x)", lambda ns, x: x * ns.sigmoid(x), ALL_DTYPES),
        Impl("scipy", "x * special.expit(x)", lambda ns, x: x * ns.special.expit(x), SCIPY_DTYPES),
        Impl("numpy", "x / (1 + exp(-x))", lambda ns, x: x / (1 + ns.exp(-x)), IEEE_DTYPES),
    ],
)
_elementwise(
    "sin", low=-10.0, high=10.0, np64=np.sin, mp=mpmath.sin, k=4,
    doc="sine on [-10, 10] (argument reduction over a few periods, zeros included)",
    impls=[
        Impl("numpy", "np.sin", lambda ns, x: ns.sin(x), IEEE_DTYPES),
        Impl("torch", "torch.sin", lambda ns, x: ns.sin(x), ALL_DTYPES),
    ],
)
_elementwise(
    "cos", low=-10.0, high=10.0, np64=np.cos, mp=mpmath.cos, k=4,
    doc="cosine on [-10, 10]",
    impls=[
        Impl("numpy", "np.cos", lambda ns, x: ns.cos(x), IEEE_DTYPES),
        Impl("torch", "torch.cos", lambda ns, x: ns.cos(x), ALL_DTYPES),
    ],
)
_elementwise(
    "expm1", low=-5.0, high=5.0, np64=np.expm1, mp=mpmath.expm1, k=4,
    doc="e**x - 1 on [-5, 5]",
    impls=[
        Impl("numpy", "np.expm1", lambda ns, x: ns.expm1(x), IEEE_DTYPES),
        Impl("torch", "torch.expm1", lambda ns, x: ns.expm1(x), ALL_DTYPES),
        Impl("numpy", "exp(x) - 1", lambda ns, x: ns.exp(x) - 1, IEEE_DTYPES,
             note="cancels near 0: the reason expm1 exists"),
    ],
)
_elementwise(
    "log1p", low=-0.9, high=10.0, np64=np.log1p, mp=mpmath.log1p, k=4,
    doc="log(1 + x) on [-0.9, 10]",
    impls=[
        Impl("numpy", "np.log1p", lambda ns, x: ns.log1p(x), IEEE_DTYPES),
        Impl("torch", "torch.log1p", lambda ns, x: ns.log1p(x), ALL_DTYPES),
        Impl("numpy", "log(1 + x)", lambda ns, x: ns.log(1 + x), IEEE_DTYPES,
             note="1 + x rounds away x's low bits near 0"),
    ],
)
_elementwise(
    "sqrt", low=1e-3, high=1e3, np64=np.sqrt, mp=mpmath.sqrt, k=2,
    doc="square root on [1e-3, 1e3] (IEEE 754 requires correct rounding)",
    impls=[
        Impl("numpy", "np.sqrt", lambda ns, x: ns.sqrt(x), IEEE_DTYPES),
        Impl("torch", "torch.sqrt", lambda ns, x: ns.sqrt(x), ALL_DTYPES),
    ],
)
_elementwise(
    "rsqrt", low=1e-3, high=1e3, np64=lambda x: 1.0 / np.sqrt(x), mp=lambda x: 1 / mpmath.sqrt(x), k=4,
    doc="reciprocal square root on [1e-3, 1e3]",
    impls=[
        Impl("torch", "torch.rsqrt", lambda ns, x: ns.rsqrt(x), ALL_DTYPES),
        Impl("numpy", "1 / np.sqrt(x)", lambda ns, x: 1 / ns.sqrt(x), IEEE_DTYPES),
    ],
)


def _pow_exact(inputs, fmt):
    return mp_rows(lambda xs, ys: [a**b for a, b in zip(xs, ys)], inputs["x"], inputs["y"])


POW_K = 8

register(OpInfo(
    name="pow", family="elementwise",
    doc="x**y with x uniform in [0.25, 4], y in [-4, 4] (results inside float16's range)",
    generate=lambda rng, n: {"x": uniform(rng, n, 0.25, 4.0), "y": uniform(rng, n, -4.0, 4.0)},
    exact=_pow_exact,
    fp64=lambda x, y: np.power(x, y),
    bound=lambda inputs, exact, fmt: POW_K * fmt.u * np.abs(exact.hi) + fmt.smallest_subnormal,
    bound_doc=f"{POW_K}*u*|x**y|: a few ulps (exp(y*log x) needs log x to extra precision)",
    impls=(
        Impl("numpy", "np.power", lambda ns, x, y: ns.power(x, y), IEEE_DTYPES),
        Impl("torch", "torch.pow", lambda ns, x, y: ns.pow(x, y), ALL_DTYPES),
        Impl("numpy", "exp(y * log(x))", lambda ns, x, y: ns.exp(y * ns.log(x)), IEEE_DTYPES,
             note="log x's rounding error is multiplied by |y log x|: loses bits"),
    ),
    default_size=4096, bench_sizes=(1 << 16, 1 << 20),
))
