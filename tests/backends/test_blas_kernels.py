"""gemm/gemv/dot and gesv/potrf through every discovered provider, checked against numpy."""

import ctypes

import numpy as np
import pytest

from accuracy.backends.blas import MissingOpError, discover_providers
from accuracy.backends.blas.lapack import bind_fortran_lapack, bind_lapacke

PROVIDERS = discover_providers(environ={}).providers
DTYPES = [np.float32, np.float64]
pytestmark = pytest.mark.skipif(not PROVIDERS, reason="no BLAS provider could be loaded")


def gamma(k: int, dtype) -> float:
    """Higham's gamma_k = k u / (1 - k u): the componentwise bound of a length-k dot product."""
    u = np.finfo(dtype).eps / 2
    return k * u / (1 - k * u)


def assert_within_gamma(result, a, b, k, dtype):
    """|C - A@B| <= 2 gamma_k |A||B|: both the provider and the fp64 reference may err by gamma_k."""
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = 2 * gamma(k, dtype) * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))
    assert result.dtype == dtype
    assert np.all(np.abs(result - exact) <= bound)


@pytest.fixture(params=sorted(PROVIDERS), scope="module")
def provider(request):
    return PROVIDERS[request.param]


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_matches_numpy_within_gamma_bound(provider, dtype):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((37, 53)).astype(dtype), rng.standard_normal((53, 29)).astype(dtype)
    assert_within_gamma(provider.op("gemm", dtype)(a, b), a, b, 53, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_accepts_non_contiguous_views(provider, dtype):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((40, 40)).astype(dtype)
    view = a[:, ::2]  # 40 x 20, strided
    assert_within_gamma(provider.call("gemm", view, view.T), view, view.T, 20, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemv_and_dot_match_numpy(provider, dtype):
    rng = np.random.default_rng(3)
    a, x = rng.standard_normal((31, 17)).astype(dtype), rng.standard_normal(17).astype(dtype)
    assert_within_gamma(provider.op("gemv", dtype)(a, x)[:, None], a, x[:, None], 17, dtype)
    dot = provider.op("dot", dtype)(x, x)
    assert isinstance(dot, dtype)
    assert abs(dot - np.dot(x.astype(np.float64), x)) <= 2 * gamma(17, dtype) * np.dot(x, x)


def test_mismatched_operands_raise(provider):
    a = np.ones((3, 4))
    with pytest.raises(TypeError):
        provider.call("gemm", a, a.T.astype(np.float32))
    with pytest.raises(ValueError):
        provider.call("gemm", a, a)
    with pytest.raises(MissingOpError):
        provider.op("gemm", np.int64)


def _spd(n, dtype, seed=4):
    m = np.random.default_rng(seed).standard_normal((n, n))
    return (m @ m.T + n * np.eye(n)).astype(dtype)


def _lapack_kernels(provider):
    """The same library's LAPACKE and Fortran kernels, so both bindings are exercised."""
    lib = ctypes.CDLL(provider.path)
    return {"lapacke": bind_lapacke(lib, provider.abi), "fortran": bind_fortran_lapack(lib, provider.abi)}


@pytest.mark.parametrize("interface", ["lapacke", "fortran"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gesv_solves_and_leaves_inputs_alone(provider, interface, dtype):
    gesv = _lapack_kernels(provider)[interface].get(("gesv", np.dtype(dtype)))
    if gesv is None:
        pytest.skip(f"{provider.name} exports no {interface} {np.dtype(dtype)} gesv")
    a = _spd(24, dtype) + np.triu(np.ones((24, 24), dtype))  # non-symmetric, well conditioned
    b = np.arange(48, dtype=dtype).reshape(24, 2)
    a0, b0 = a.copy(), b.copy()
    x = gesv(a, b)
    rtol = 100 * np.finfo(dtype).eps
    np.testing.assert_allclose(x, np.linalg.solve(a.astype(np.float64), b), rtol=rtol, atol=rtol)
    np.testing.assert_allclose(gesv(a, b[:, 0]), x[:, 0], rtol=rtol, atol=rtol)
    assert np.array_equal(a, a0) and np.array_equal(b, b0)


@pytest.mark.parametrize("interface", ["lapacke", "fortran"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_potrf_gives_lower_cholesky_factor(provider, interface, dtype):
    potrf = _lapack_kernels(provider)[interface].get(("potrf", np.dtype(dtype)))
    if potrf is None:
        pytest.skip(f"{provider.name} exports no {interface} {np.dtype(dtype)} potrf")
    a = _spd(16, dtype)
    factor = potrf(a)
    np.testing.assert_array_equal(factor, np.tril(factor))
    np.testing.assert_allclose(factor, np.linalg.cholesky(a.astype(np.float64)), rtol=1e3 * np.finfo(dtype).eps)


def test_lapack_failures_raise_linalg_error(provider):
    singular, indefinite = np.ones((4, 4)), -np.eye(4)
    if ("gesv", np.dtype(np.float64)) in provider.kernels:
        with pytest.raises(np.linalg.LinAlgError, match="singular"):
            provider.call("gesv", singular, np.ones(4))
    if ("potrf", np.dtype(np.float64)) in provider.kernels:
        with pytest.raises(np.linalg.LinAlgError, match="positive definite"):
            provider.call("potrf", indefinite)
