"""Tests generated from the registry: every (op, implementation, dtype) runs, every exact reference
agrees with an independent 200-bit mpmath evaluation, and a few default spellings are within
their rounding bound.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from exact_rounding import exact_round
from accuracy.dtypes import get_format
from accuracy.evaluate import Case
from accuracy.inputs import as_float64, make_inputs
from accuracy.registry import all_ops, get_op

SMALL = {"matmul": 16, "linear": 16, "gemv": 16, "conv1d": 16}  # everything else: 64
TINY = {"matmul": 4, "linear": 8, "gemv": 4, "conv1d": 8}  # mpmath checks: everything else: 8


def small_size(op) -> int:
    if op.name not in ORACLES:  # an op this file does not know (e.g. dense linear algebra): keep it small
        return min(16, op.default_size)
    return SMALL.get(op.name, 64)


def _expected_shape(op, inputs) -> tuple:
    """The output shape of each op, worked out from its inputs (not from its reference)."""
    name = op.name
    if name in ("sum", "mean", "var", "std", "logsumexp", "dot"):
        return ()
    if name == "matmul":
        return (inputs["a"].shape[0], inputs["b"].shape[1])
    if name == "linear":
        return (inputs["x"].shape[0], inputs["W"].shape[0])
    if name == "gemv":
        return (inputs["a"].shape[0],)
    if name == "conv1d":
        x, w = inputs["x"], inputs["w"]
        return (x.shape[0], w.shape[0], x.shape[2] - w.shape[2] + 1)
    if name in ORACLES:
        return inputs["x"].shape  # elementwise and row-wise nn ops keep their input's shape
    return None  # an op this file does not know yet: checked against its reference's shape


def _cases():
    out = []
    for op in all_ops():
        for dtype in op.dtypes():
            for impl in op.available_impls(dtype):
                out.append(pytest.param(op.name, impl.name, dtype, id=f"{op.name}-{impl.name}-{dtype}"))
    return out


def test_registry_has_the_foundation_ops():
    names = {op.name for op in all_ops()}
    assert {"matmul", "linear", "dot", "sum", "mean", "var", "std", "softmax", "log_softmax", "logsumexp",
            "layer_norm", "exp", "log", "tanh", "sigmoid", "gelu", "erf", "conv1d"} <= names
    assert len(names) == len(all_ops())  # names are unique
    for op in all_ops():
        assert op.impls and op.dtypes()
        names = [i.name for i in op.impls]
        assert len(names) == len(set(names)), op.name
        assert op.default_size >= 1 and all(s >= 1 for s in op.bench_sizes)


@pytest.mark.parametrize("op_name,impl_name,dtype", _cases())
def test_impl_runs_with_right_shape_dtype_and_finite(op_name, impl_name, dtype):
    op = get_op(op_name)
    fmt = get_format(dtype)
    case = Case(op, fmt, small_size(op))
    impl = op.impl(impl_name)
    result = case.run(impl)
    assert isinstance(result, np.ndarray)
    assert result.dtype == fmt.np_dtype
    expected = _expected_shape(op, case.inputs)
    assert result.shape == (expected if expected is not None else case.exact.shape)
    assert result.size == case.exact.hi.size  # the reference covers every output element
    if impl.stable:  # a naive formula may overflow (exp(max x) in an unshifted logsumexp)
        assert np.all(np.isfinite(result.astype(np.float64)))
    summary = case.measure(impl, result)
    assert summary.nonfinite == 0 or not impl.stable


# ---------------------------------------------------------------------------- mpmath oracles
# Written independently of the op modules (other formulas where the op's own uses a shift or a
# two-pass form), all evaluated at 200 bits. Each takes float64 inputs and returns a flat list.


def _mp(v) -> mpmath.mpf:
    return mpmath.mpf(float(v))


def _elementwise(fn):
    return lambda inp: [fn(_mp(v)) for v in inp["x"].ravel()]


def _rows(fn, key="x"):
    return lambda inp: [v for row in inp[key].reshape(-1, inp[key].shape[-1]) for v in fn([_mp(t) for t in row])]


def _softmax(row):
    s = mpmath.fsum(mpmath.exp(v) for v in row)
    return [mpmath.exp(v) / s for v in row]


def _log_softmax(row):
    lse = mpmath.log(mpmath.fsum(mpmath.exp(v) for v in row))
    return [v - lse for v in row]


def _var(row):
    n = len(row)
    s1, s2 = mpmath.fsum(row), mpmath.fsum(v * v for v in row)
    return (s2 - s1 * s1 / n) / (n - 1)  # one-pass formula: fine at 200 bits


def _layer_norm(inp):
    out = []
    w = [_mp(v) for v in inp["w"]]
    b = [_mp(v) for v in inp["b"]]
    for row in inp["x"]:
        r = [_mp(v) for v in row]
        n = len(r)
        mean = mpmath.fsum(r) / n
        var = mpmath.fsum(v * v for v in r) / n - mean * mean
        out += [(v - mean) / mpmath.sqrt(var + mpmath.mpf(1e-5)) * wi + bi for v, wi, bi in zip(r, w, b)]
    return out


def _matmul(a, b):
    return [mpmath.fsum(_mp(a[i, k]) * _mp(b[k, j]) for k in range(a.shape[1]))
            for i in range(a.shape[0]) for j in range(b.shape[1])]


def _linear(inp):
    x, W, b = inp["x"], inp["W"], inp["b"]
    return [mpmath.fsum([_mp(b[o])] + [_mp(x[i, k]) * _mp(W[o, k]) for k in range(x.shape[1])])
            for i in range(x.shape[0]) for o in range(W.shape[0])]


def _conv1d(inp):
    x, w, b = inp["x"], inp["w"], inp["b"]
    out = []
    L = x.shape[2] - w.shape[2] + 1
    for n in range(x.shape[0]):
        for o in range(w.shape[0]):
            for t in range(L):
                terms = [_mp(b[o])] + [_mp(x[n, c, t + k]) * _mp(w[o, c, k])
                                       for c in range(w.shape[1]) for k in range(w.shape[2])]
                out.append(mpmath.fsum(terms))
    return out


ORACLES = {
    "exp": _elementwise(mpmath.exp),
    "log": _elementwise(mpmath.log),
    "tanh": _elementwise(lambda x: (mpmath.exp(2 * x) - 1) / (mpmath.exp(2 * x) + 1)),
    "sigmoid": _elementwise(lambda x: mpmath.exp(x) / (1 + mpmath.exp(x))),
    "erf": _elementwise(lambda x: 2 / mpmath.sqrt(mpmath.pi) * mpmath.quad(lambda t: mpmath.exp(-t * t), [0, x])),
    "gelu": _elementwise(lambda x: x * mpmath.ncdf(x)),
    "softplus": _elementwise(lambda x: mpmath.log(1 + mpmath.exp(x))),
    "silu": _elementwise(lambda x: x * mpmath.exp(x) / (1 + mpmath.exp(x))),
    "sin": _elementwise(mpmath.sin),
    "cos": _elementwise(mpmath.cos),
    "expm1": _elementwise(lambda x: mpmath.exp(x) - 1),
    "log1p": _elementwise(lambda x: mpmath.log(1 + x)),
    "sqrt": _elementwise(mpmath.sqrt),
    "rsqrt": _elementwise(lambda x: 1 / mpmath.sqrt(x)),
    "pow": lambda inp: [mpmath.exp(_mp(y) * mpmath.log(_mp(x))) for x, y in zip(inp["x"], inp["y"])],
    "sum": lambda inp: [mpmath.fsum(_mp(v) for v in inp["x"])],
    "mean": lambda inp: [mpmath.fsum(_mp(v) for v in inp["x"]) / inp["x"].size],
    "var": _rows(lambda r: [_var(r)]),
    "std": _rows(lambda r: [mpmath.sqrt(_var(r))]),
    "logsumexp": _rows(lambda r: [mpmath.log(mpmath.fsum(mpmath.exp(v) for v in r))]),
    "softmax": _rows(_softmax),
    "log_softmax": _rows(_log_softmax),
    "layer_norm": _layer_norm,
    "matmul": lambda inp: _matmul(inp["a"], inp["b"]),
    "linear": _linear,
    "gemv": lambda inp: _matmul(inp["a"], inp["x"][:, None]),
    "dot": lambda inp: _matmul(inp["x"][None, :], inp["y"][:, None]),
    "conv1d": _conv1d,
}
DOT2_OPS = ("matmul", "linear", "gemv", "dot", "conv1d")


def _frac(v: mpmath.mpf) -> Fraction:
    """The exact value of an mpf (no re-rounding to the current working precision)."""
    man, exp = v.man_exp  # man is the magnitude: the sign is kept apart
    q = Fraction(int(man)) * Fraction(2) ** int(exp) if man else Fraction(0)
    return -q if v < 0 else q



FOUNDATION_OPS = ("matmul", "linear", "dot", "sum", "mean", "var", "std", "softmax", "log_softmax", "logsumexp",
                  "layer_norm", "exp", "log", "tanh", "sigmoid", "gelu", "erf", "conv1d")


def test_every_foundation_op_has_an_independent_mpmath_oracle():
    # the ops added later are checked against mpmath in tests/test_ops_more.py
    assert set(FOUNDATION_OPS) <= set(ORACLES)


def _oracle_cases():
    return [pytest.param(op.name, d, id=f"{op.name}-{d}") for op in all_ops() if op.name in ORACLES
            for d in op.dtypes()]


@pytest.mark.parametrize("op_name,dtype", _oracle_cases())
def test_exact_reference_agrees_with_mpmath(op_name, dtype):
    op = get_op(op_name)
    fmt = get_format(dtype)
    inputs64 = as_float64(make_inputs(op, TINY.get(op_name, 8), fmt))
    exact = op.exact(inputs64, fmt)
    with mpmath.workprec(200):
        want = ORACLES[op_name](inputs64)
        got = [_frac(mpmath.mpf(float(h)) + mpmath.mpf(float(lo))) for h, lo in zip(exact.hi.ravel(), exact.lo.ravel())]
    assert len(got) == len(want) > 0
    for i, (g, w) in enumerate(zip(got, want)):
        w = _frac(w)
        if fmt.precision >= 53:
            assert abs(g - w) <= abs(w) * Fraction(2) ** -60, (i, float(g), float(w))
        else:
            assert exact_round(fmt, g) == exact_round(fmt, w), (i, float(g), float(w))


def _abs_oracle(op_name, inputs64):
    """The same sums over |terms|: Dot2's error is bounded relative to these, not to |exact|."""
    return ORACLES[op_name]({k: np.abs(v) for k, v in inputs64.items()})


@pytest.mark.parametrize("op_name", DOT2_OPS)
def test_dot2_matches_mpmath_to_1e_30(op_name):
    """Dot2 (hi + lo) vs 200-bit mpmath on float64 inputs: relative difference <= 1e-30.

    Relative to |exact| wherever the sum is well conditioned (sum|terms| <= 16 |sum|), and
    relative to sum|terms| everywhere (an element near zero has no relative accuracy to give).
    """
    op = get_op(op_name)
    fmt = get_format("float64")
    inputs64 = as_float64(make_inputs(op, SMALL.get(op_name, 64), fmt))
    exact = op.exact(inputs64, fmt)
    with mpmath.workprec(200):
        want = ORACLES[op_name](inputs64)
        mags = _abs_oracle(op_name, inputs64)
        rel, rel_mag, n_conditioned = mpmath.mpf(0), mpmath.mpf(0), 0
        for h, lo, w, m in zip(exact.hi.ravel(), exact.lo.ravel(), want, mags):
            err = abs(mpmath.mpf(float(h)) + mpmath.mpf(float(lo)) - w)
            rel_mag = max(rel_mag, err / m)
            if m <= 16 * abs(w):
                rel = max(rel, err / abs(w))
                n_conditioned += 1
    assert len(want) == exact.hi.size
    assert n_conditioned >= exact.hi.size // 4  # the well-conditioned check is not vacuous
    assert rel <= mpmath.mpf("1e-30"), rel
    assert rel_mag <= mpmath.mpf("1e-30"), rel_mag
    # hi alone is within an ulp of the exact value
    assert np.all(np.abs(exact.lo) <= np.spacing(np.abs(exact.hi)))


DEFAULTS = [
    ("linear", "torch:F.linear"),
    ("matmul", "numpy:a @ b"),
    ("matmul", "torch:torch.matmul"),
    ("gemv", "numpy:a @ x"),
    ("sum", "numpy:np.sum"),
    ("mean", "torch:torch.mean"),
    ("std", "numpy:np.std(x, ddof=1)"),
    ("var", "torch:torch.var(x)"),
    ("softmax", "torch:torch.softmax"),
    ("log_softmax", "torch:F.log_softmax"),
    ("logsumexp", "scipy:special.logsumexp"),
    ("layer_norm", "torch:F.layer_norm"),
    ("conv1d", "torch:F.conv1d"),
    ("exp", "numpy:np.exp"),
    ("tanh", "torch:torch.tanh"),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op_name,impl_name", DEFAULTS)
def test_default_impl_within_rounding_at_default_size(op_name, impl_name, dtype):
    op = get_op(op_name)
    case = Case(op, get_format(dtype), op.default_size)
    summary = case.measure(op.impl(impl_name))
    assert summary.nonfinite == 0
    assert summary.bound_ratio <= 1.0, summary
    assert summary.verdict == "within rounding"
    assert summary.max_ulp >= 0 and math.isfinite(summary.max_ulp)
