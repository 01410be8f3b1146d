"""Elementwise functions: exact reference is the correctly rounded value, bound is k*u*|f(x)|."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import scipy.special

from accuracy.backends import TORCH_VARIANTS
from accuracy.dtypes import ALL_DTYPES, IEEE_DTYPES
from accuracy.inputs import uniform
from accuracy.references import correctly_rounded
from accuracy.registry import Impl, OpInfo, register

SCIPY_DTYPES = ("float32", "float64")


def _elementwise(name, *, low, high, np64, mp, k, impls, doc, scale_with_x=False):
    """Register an elementwise op: x uniform in [low, high], bound k*u*|f(x)| (+ underflow).

    `scale_with_x` widens the bound to k*u*(|f(x)| + |x|) for functions defined by a formula that
    cancels (GELU's 1 + erf(x/sqrt2) for x << 0): every faithful evaluation of the formula errs
    by about u*|x| there, so the tighter bound would call rounding a bug.
    """

    def bound(inputs, exact, fmt):
        scale = np.abs(exact.hi) + (np.abs(inputs["x"]) if scale_with_x else 0.0)
        return k * fmt.u * scale + fmt.smallest_subnormal

    register(
        OpInfo(
            name=name,
            family="elementwise",
            doc=doc,
            generate=lambda rng, n: {"x": uniform(rng, n, low, high)},
            exact=lambda inputs, fmt: correctly_rounded(np64, mp, inputs["x"], fmt),
            fp64=lambda x: np64(x),
            bound=bound,
            bound_doc=f"{k}*u*(|f(x)|{' + |x|' if scale_with_x else ''}): a few ulps, what a vectorised libm promises",
            impls=tuple(impls),
            default_size=4096,
            bench_sizes=(1 << 16, 1 << 20),
        )
    )


def _gelu64(x):
    return 0.5 * x * (1.0 + scipy.special.erf(x / math.sqrt(2.0)))


def _gelu_mp(x):
    return x / 2 * (1 + mpmath.erf(x / mpmath.sqrt(2)))


_elementwise(
    "exp", low=-10.0, high=10.0, np64=np.exp, mp=mpmath.exp, k=4,
    doc="e**x on [-10, 10] (inside float16's range)",
    impls=[
        Impl("numpy", "np.exp", lambda ns, x: ns.exp(x), IEEE_DTYPES),
        Impl("torch", "torch.exp", lambda ns, x: ns.exp(x), ALL_DTYPES),
    ],
)
_elementwise(
    "log", low=1e-3, high=1e3, np64=np.log, mp=mpmath.log, k=4,
    doc="natural log on [1e-3, 1e3]",
    impls=[
        Impl("numpy", "np.log", lambda ns, x: ns.log(x), IEEE_DTYPES),
        Impl("torch", "torch.log", lambda ns, x: ns.log(x), ALL_DTYPES),
    ],
)
_elementwise(
    "tanh", low=-5.0, high=5.0, np64=np.tanh, mp=mpmath.tanh, k=4,
    doc="tanh on [-5, 5]",
    impls=[
        Impl("numpy", "np.tanh", lambda ns, x: ns.tanh(x), IEEE_DTYPES),
        Impl("torch", "torch.tanh", lambda ns, x: ns.tanh(x), ALL_DTYPES),
    ],
)
_elementwise(
    "sigmoid", low=-12.0, high=12.0, np64=scipy.special.expit, mp=lambda x: 1 / (1 + mpmath.exp(-x)), k=4,
    doc="logistic sigmoid 1/(1+e**-x) on [-12, 12]",
    impls=[
        Impl("torch", "torch.sigmoid", lambda ns, x: ns.sigmoid(x), ALL_DTYPES),
        Impl("scipy", "special.expit", lambda ns, x: ns.special.expit(x), SCIPY_DTYPES),
        Impl("numpy", "1/(1+exp(-x))", lambda ns, x: 1 / (1 + ns.exp(-x)), IEEE_DTYPES),
    ],
)
_elementwise(
    "erf", low=-4.0, high=4.0, np64=scipy.special.erf, mp=mpmath.erf, k=4,
    doc="error function on [-4, 4]",
    impls=[
        Impl("torch", "torch.erf", lambda ns, x: ns.erf(x), ALL_DTYPES),
        Impl("scipy", "special.erf", lambda ns, x: ns.special.erf(x), SCIPY_DTYPES),
    ],
)
_elementwise(
    "gelu", low=-6.0, high=6.0, np64=_gelu64, mp=_gelu_mp, k=8, scale_with_x=True,
    doc="GELU, exact erf form x/2*(1+erf(x/sqrt2)) on [-6, 6]",
    impls=[
        Impl("torch", "F.gelu", lambda ns, x: ns.nn.functional.gelu(x), ALL_DTYPES, also=TORCH_VARIANTS),
        Impl("torch", "F.gelu(approximate='tanh')", lambda ns, x: ns.nn.functional.gelu(x, approximate="tanh"),
             ALL_DTYPES, note="the tanh approximation: a different function, not a rounding of the erf form"),
        Impl("scipy", "x/2*(1+special.erf(x/sqrt2))", lambda ns, x: x / 2 * (1 + ns.special.erf(x / math.sqrt(2))),
             SCIPY_DTYPES),
    ],
)
