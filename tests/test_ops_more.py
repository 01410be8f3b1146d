"""The ops added for issue 6: references against independent mpmath, impls' shapes, LAPACK bounds."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from accuracy.dtypes import get_format
from accuracy.evaluate import Case
from accuracy.metrics import bound_ratio
from accuracy.registry import DEFAULT_CONDITION, all_ops, get_op


# small sizes keep every mpmath reference well under a second
SMALL = {
    "bmm": 8, "baddbmm": 8, "conv2d": 6, "conv_transpose1d": 16, "batch_norm": 8, "group_norm": 8,
    "scaled_dot_product_attention": 8, "cross_entropy": 16, "mse_loss": 64, "sum@cancelling": 256,
    "cumsum": 128, "vector_norm": 128, "matrix_norm": 8, "fft": 32, "rfft": 32, "matmul_grad": 8,
    "softmax_grad": 32, "gelu_grad": 128, "conv1d_grad": 16, "linear_grad": 16, "layer_norm_grad": 32,
    "solve": 8, "solve@ill": 8, "inv": 8, "inv@ill": 8, "cholesky": 8, "qr": 8, "svd": 8,
    "eigh": 8, "lstsq": 8, "det": 8,
}


NEW_OPS = sorted({
    "softplus", "silu", "sin", "cos", "expm1", "log1p", "sqrt", "rsqrt", "pow",
    "bmm", "baddbmm", "conv2d", "conv_transpose1d", "batch_norm", "group_norm",
    "scaled_dot_product_attention", "cross_entropy", "mse_loss",
    "sum@cancelling", "cumsum", "vector_norm", "matrix_norm",
    "solve", "solve@ill", "inv", "inv@ill", "cholesky", "qr", "svd", "eigh", "lstsq", "det",
    "fft", "rfft", "matmul_grad", "softmax_grad", "gelu_grad", "conv1d_grad", "linear_grad", "layer_norm_grad",
})


def _size(name):
    return SMALL.get(name, 64)


def _case(key, dtype):
    """A case for "op" or "op@condition" at its small size."""
    name, _, condition = key.partition("@")
    return Case(get_op(name), get_format(dtype), _size(key), condition or DEFAULT_CONDITION)


def test_catalog_has_at_least_40_ops():
    assert len(all_ops()) >= 40
    assert len(NEW_OPS) >= 22


@pytest.mark.parametrize("name", NEW_OPS)
def test_fp64_reference_agrees_with_exact_within_bound(name):
    """The float64 formula is itself a float64 computation: it must sit inside the float64 bound."""
    case = _case(name, "float64")
    assert case.exact.shape == case.fp64.shape
    assert np.all(np.isfinite(case.exact.hi))
    assert bound_ratio(case.fp64, case.exact, case.bound) <= 1.0


@pytest.mark.parametrize("name", NEW_OPS)
def test_every_impl_runs_with_shape_and_dtype(name):
    op = get_op(name.partition("@")[0])
    for dtype in op.dtypes():
        case = _case(name, dtype)
        for impl in op.available_impls(dtype):
            out = case.run(impl)
            assert out.dtype == case.fmt.np_dtype, (impl.name, dtype)
            assert out.shape == case.exact.shape, (impl.name, dtype)


@pytest.mark.parametrize("name", NEW_OPS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_canonical_impls_within_bound(name, dtype):
    """Every stable implementation is within its bound."""
    op = get_op(name.partition("@")[0])
    if dtype not in op.dtypes():
        pytest.skip("no impl at this dtype")
    case = _case(name, dtype)
    for impl in op.available_impls(dtype):
        if not impl.stable or impl.finding:
            continue
        ratio = bound_ratio(case.run(impl), case.exact, case.bound)
        assert np.isnan(ratio) or ratio <= 1.0, (impl.name, ratio)


# -- independent mpmath evaluations ---------------------------------------------------------

def _mp_close(exact, values, tol=2.0**-60):
    values = np.asarray(values, dtype=object).ravel()
    hi, lo = exact.hi.ravel(), exact.lo.ravel()
    scale = max(abs(float(v)) for v in values) or 1.0
    with mpmath.workprec(300):
        for h, l, v in zip(hi, lo, values):
            assert abs(mpmath.mpf(float(h)) + mpmath.mpf(float(l)) - v) <= tol * scale, (h, l, v)


ELEMENTWISE = {
    "softplus": lambda x: mpmath.log(1 + mpmath.exp(x)), "silu": lambda x: x * (1 / (1 + mpmath.exp(-x))),
    "sin": mpmath.sin, "cos": mpmath.cos, "expm1": lambda x: mpmath.exp(x) - 1,
    "log1p": lambda x: mpmath.log(1 + x), "sqrt": mpmath.sqrt, "rsqrt": lambda x: mpmath.power(x, -0.5),
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_elementwise_exact_rounds_like_mpmath(name, dtype):
    case = Case(get_op(name), get_format(dtype), 256)
    fmt = case.fmt
    with mpmath.workprec(300):
        ref = [ELEMENTWISE[name](mpmath.mpf(float(v))) for v in case.inputs64["x"]]
    if dtype == "float64":
        # the fast reference (accuracy/references.py) rounds hi correctly and reads lo to 2**-7 ulp
        np.testing.assert_array_equal(case.exact.hi, np.array([float(v) for v in ref]))
        _mp_close(case.exact, ref, tol=2.0**-58)
    else:
        mine = fmt.round(case.exact.hi + case.exact.lo)
        theirs = fmt.round(np.array([float(v) for v in ref]))
        np.testing.assert_array_equal(mine.astype(np.float64), theirs.astype(np.float64))


def test_pow_exact_against_mpmath():
    case = Case(get_op("pow"), get_format("float64"), 64)
    with mpmath.workprec(300):
        ref = [mpmath.exp(mpmath.mpf(float(y)) * mpmath.log(mpmath.mpf(float(x))))
               for x, y in zip(case.inputs64["x"], case.inputs64["y"])]
    _mp_close(case.exact, ref, tol=2.0**-100)


def _mp_dot(a, b):
    return mpmath.fsum(mpmath.mpf(float(x)) * mpmath.mpf(float(y)) for x, y in zip(a, b))


def test_baddbmm_exact_against_mpmath():
    case = Case(get_op("baddbmm"), get_format("float64"), 4)
    a, b, c = (case.inputs64[k] for k in "abc")
    with mpmath.workprec(300):
        ref = [[[_mp_dot(a[z, i], b[z, :, j]) + c[z, i, j] for j in range(4)] for i in range(4)] for z in range(a.shape[0])]
    _mp_close(case.exact, np.array(ref, dtype=object))


def test_conv_transpose1d_exact_against_direct_sum():
    from accuracy.ops.conv import CT_STRIDE
    case = Case(get_op("conv_transpose1d"), get_format("float64"), 6)
    x, w, b = case.inputs64["x"], case.inputs64["w"], case.inputs64["b"]
    out = case.exact.shape[-1]
    with mpmath.workprec(300):
        ref = np.empty(case.exact.shape, dtype=object)
        for bi in range(x.shape[0]):
            for o in range(w.shape[1]):
                for t in range(out):
                    terms = [mpmath.mpf(float(x[bi, c, i])) * float(w[c, o, t - i * CT_STRIDE])
                             for c in range(x.shape[1]) for i in range(x.shape[2])
                             if 0 <= t - i * CT_STRIDE < w.shape[2]]
                    ref[bi, o, t] = mpmath.fsum(terms) + float(b[o])
    _mp_close(case.exact, ref)


def test_sdpa_exact_against_mpmath():
    case = Case(get_op("scaled_dot_product_attention"), get_format("float64"), 4)
    q, k, v = (case.inputs64[n] for n in "qkv")
    d = q.shape[-1]
    ref = np.empty(case.exact.shape, dtype=object)
    with mpmath.workprec(300):
        for h in range(q.shape[0]):
            for i in range(q.shape[1]):
                s = [_mp_dot(q[h, i], k[h, j]) / mpmath.sqrt(d) for j in range(k.shape[1])]
                e = [mpmath.exp(x) for x in s]
                tot = mpmath.fsum(e)
                for c in range(d):
                    ref[h, i, c] = mpmath.fsum(e[j] / tot * float(v[h, j, c]) for j in range(k.shape[1]))
    _mp_close(case.exact, ref)


def test_cumsum_and_norms_against_mpmath():
    case = Case(get_op("cumsum"), get_format("float64"), 64)
    with mpmath.workprec(300):
        acc, ref = mpmath.mpf(0), []
        for v in case.inputs64["x"]:
            acc += float(v)
            ref.append(+acc)
    _mp_close(case.exact, ref, tol=2.0**-100)
    for name in ("vector_norm", "matrix_norm"):
        case = Case(get_op(name), get_format("float64"), 8)
        with mpmath.workprec(300):
            ref = [mpmath.norm([mpmath.mpf(float(v)) for v in case.inputs64["x"].ravel()], 2)]
        _mp_close(case.exact, ref, tol=2.0**-100)


@pytest.mark.parametrize("name", ["fft", "rfft"])
def test_fft_exact_against_mpmath_dft(name):
    case = Case(get_op(name), get_format("float64"), 16)
    x = case.inputs64["x"]
    n = x.shape[-1]
    bins = case.exact.shape[-2]
    ref = np.empty(case.exact.shape, dtype=object)
    with mpmath.workprec(300):
        for r in range(x.shape[0]):
            for kk in range(bins):
                z = mpmath.fsum(float(x[r, j]) * mpmath.expjpi(-2 * mpmath.mpf(j * kk) / n) for j in range(n))
                ref[r, kk, 0], ref[r, kk, 1] = z.real, z.imag
    _mp_close(case.exact, ref)


def test_grad_refs_against_mpmath():
    case = Case(get_op("gelu_grad"), get_format("float64"), 32)
    with mpmath.workprec(300):
        ref = [float(g) * mpmath.diff(lambda t: t * mpmath.ncdf(t), float(x))
               for x, g in zip(case.inputs64["x"], case.inputs64["g"])]
    _mp_close(case.exact, ref, tol=2.0**-90)
    case = Case(get_op("softmax_grad"), get_format("float64"), 8)
    x, g = case.inputs64["x"], case.inputs64["g"]
    ref = np.empty(x.shape, dtype=object)
    with mpmath.workprec(300):
        for r in range(x.shape[0]):
            e = [mpmath.exp(float(v)) for v in x[r]]
            y = [v / mpmath.fsum(e) for v in e]
            for i in range(x.shape[1]):  # Jacobian column-by-column: sum_j g_j dy_j/dx_i
                ref[r, i] = mpmath.fsum(float(g[r, j]) * y[j] * ((i == j) - y[i]) for j in range(x.shape[1]))
    _mp_close(case.exact, ref)


def test_linear_grad_exact_against_mpmath_sums():
    case = Case(get_op("linear_grad"), get_format("float64"), 8)
    x, W, g = case.inputs64["x"], case.inputs64["W"], case.inputs64["g"]
    with mpmath.workprec(300):
        dx = [_mp_dot(g[i], W[:, k]) for i in range(x.shape[0]) for k in range(x.shape[1])]
        dw = [_mp_dot(g[:, o], x[:, k]) for o in range(W.shape[0]) for k in range(W.shape[1])]
        db = [mpmath.fsum(mpmath.mpf(float(v)) for v in g[:, o]) for o in range(W.shape[0])]
    assert case.exact.shape == (len(dx) + len(dw) + len(db),)
    _mp_close(case.exact, dx + dw + db, tol=2.0**-100)


def test_layer_norm_grad_exact_against_mpmath_diff():
    """dx_i = d/dx_i sum_j g_j layer_norm(x)_j, by mpmath's numerical derivative of the forward."""
    from accuracy.ops.common import LAYER_NORM_EPS
    case = Case(get_op("layer_norm_grad"), get_format("float64"), 8)
    x, w, b, g = (case.inputs64[k] for k in ("x", "w", "b", "g"))
    rows = 3
    ref = np.empty((rows, x.shape[1]), dtype=object)
    with mpmath.workprec(300):
        def loss(row, grow, i, t):
            v = [mpmath.mpf(float(a)) for a in row]
            v[i] = t
            mean = mpmath.fsum(v) / len(v)
            inv = 1 / mpmath.sqrt(mpmath.fsum((a - mean) ** 2 for a in v) / len(v) + mpmath.mpf(LAYER_NORM_EPS))
            return mpmath.fsum(float(gj) * ((a - mean) * inv * float(wj) + float(bj))
                               for a, gj, wj, bj in zip(v, grow, w, b))
        for r in range(rows):
            for i in range(x.shape[1]):
                ref[r, i] = mpmath.diff(lambda t: loss(x[r], g[r], i, t), float(x[r, i]))
    _mp_close(type(case.exact)(case.exact.hi[:rows], case.exact.lo[:rows]), ref, tol=2.0**-90)


# -- linear algebra ---------------------------------------------------------------------------

def test_lapack_exacts_against_independent_mpmath():
    f64 = get_format("float64")
    case = Case(get_op("solve"), f64, 8)
    with mpmath.workprec(300):
        a, b = mpmath.matrix(case.inputs64["a"].tolist()), mpmath.matrix(case.inputs64["b"].tolist())
        x = mpmath.qr_solve(a, b)[0]
    _mp_close(case.exact, list(x))
    case = Case(get_op("det"), f64, 8)
    with mpmath.workprec(300):
        ref = mpmath.fprod(mpmath.eig(mpmath.matrix(case.inputs64["a"].tolist()), left=False, right=False))
    _mp_close(case.exact, [mpmath.re(ref)], tol=2.0**-90)
    case = Case(get_op("eigh"), f64, 8)
    with mpmath.workprec(300):
        ev = sorted(mpmath.re(v) for v in mpmath.eig(mpmath.matrix(case.inputs64["a"].tolist()), left=False, right=False))
    _mp_close(case.exact, ev, tol=2.0**-90)
    case = Case(get_op("qr"), f64, 8)
    with mpmath.workprec(300):
        _, r = mpmath.qr(mpmath.matrix(case.inputs64["a"].tolist()))
        ref = [abs(r[i, j]) if j >= i else 0 for i in range(8) for j in range(8)]
    _mp_close(case.exact, ref, tol=2.0**-90)
    case = Case(get_op("svd"), f64, 8)
    with mpmath.workprec(300):
        a = mpmath.matrix(case.inputs64["a"].tolist())
        ev = sorted((mpmath.sqrt(mpmath.re(v)) for v in mpmath.eigsy(a.T * a, eigvals_only=True)), reverse=True)
    _mp_close(case.exact, ev, tol=2.0**-90)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("op", ["solve", "inv"])
def test_illcond_has_larger_error_but_stays_within_bound(op, backend):
    f64 = get_format("float64")
    errors = {}
    for condition in ("random", "ill"):
        case = Case(get_op(op), f64, 32, condition)
        impl = next(i for i in case.op.impls if i.backend == backend and i.stable)
        out = case.run(impl)
        assert bound_ratio(out, case.exact, case.bound) <= 1.0
        errors[condition] = np.max(np.abs(out - case.exact.hi) / np.max(np.abs(case.exact.hi)))
    assert errors["ill"] > 100 * errors["random"]


def test_sum_cancel_relative_error_large_but_within_bound():
    case = Case(get_op("sum"), get_format("float32"), 1 << 12, "cancelling")
    impl = get_op("sum").impl("torch:torch.sum")
    out = case.run(impl)
    rel = abs(float(out) - float(case.exact.hi)) / abs(float(case.exact.hi))
    assert rel > 1e-5  # far beyond float32's u relative
    assert bound_ratio(out, case.exact, case.bound) <= 1.0
    assert math.isfinite(rel)
