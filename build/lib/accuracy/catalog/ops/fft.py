"""Discrete Fourier transforms: fft and rfft of real rows, complex output as (..., 2) real pairs.

The exact reference is the DFT as a matrix product with double-double twiddles (cos and sin of
2 pi m/n computed in 200-bit mpmath, split hi + lo) summed exactly (exact_gemm). The bound is
Higham's Theorem 24.2 for radix-2 Cooley-Tukey, ||y^ - y||_2 <= log2(n) eta/(1 - log2(n) eta)
* sqrt(n) ||x||_2 with eta = u + gamma_4 (sqrt2 + u), applied to every element of a row.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np

from accuracy.backends import tensorflow
from accuracy.backends.jax import fft as jax_fft
from accuracy.backends.onnxruntime import dft
from accuracy.catalog.ops.frameworks import JAX_DTYPES, ORT_FLOAT64, TF_DTYPES
from accuracy.catalog.registry import Impl, OpInfo
from accuracy.core.dtypes import IEEE_DTYPES, SINGLE_DOUBLE
from accuracy.judge.emulation import stored
from accuracy.judge.error_metrics import gamma
from accuracy.reference.exact import MP_PRECISION_BITS
from accuracy.reference.exact_gemm import exact_matmul
from accuracy.reference.inputs import normal
from accuracy.reference.oracles import mp

ROWS = 8
SINGLE_DOUBLE = SINGLE_DOUBLE  # torch.fft has no float16/bfloat16 on CPU


def _twiddles(n):
    """cos and sin of 2 pi m / n, m = 0..n-1, as double-double (hi, lo) arrays."""
    out = np.empty((4, n))
    with mpmath.workprec(MP_PRECISION_BITS):
        for m in range(n):
            t = mpmath.mpf(2 * m) / n  # cospi/sinpi: exact zeros and ones where the true twiddle has them
            for row, v in ((0, mpmath.cospi(t)), (2, mpmath.sinpi(t))):
                out[row, m] = float(v)
                out[row + 1, m] = float(v - out[row, m])
    return out


def _dft_exact(x, bins):
    """X_k = sum_j x_j (cos - i sin)(2 pi j k / n) for k < bins, as Exact of shape (..., bins, 2)."""
    n = x.shape[-1]
    ch, cl, sh, sl = _twiddles(n)
    idx = np.outer(np.arange(n), np.arange(bins)) % n
    w = np.vstack([np.hstack([ch[idx], -sh[idx]]), np.hstack([cl[idx], -sl[idx]])])  # (2n, 2*bins)
    e = exact_matmul(np.concatenate([x, x], axis=-1), w)
    shape = (*x.shape[:-1], 2, bins)
    return e.map(lambda a: np.swapaxes(a.reshape(shape), -1, -2))


def _dft_by_roots_of_unity(x, bins):
    """X_k = sum_j x_j exp(-2 pi i j k / n), each root of unity by mpmath's expjpi (the oracle)."""
    n = x.shape[-1]
    out = []
    for row in x:
        for k in range(bins):
            z = mpmath.fsum(mp(v) * mpmath.expjpi(mpmath.mpf(-2 * j * k) / n) for j, v in enumerate(row))
            out += [z.real, z.imag]
    return out


def _fft_bound(inputs, exact, fmt):
    x = inputs["x"]
    n = x.shape[-1]
    eta = fmt.u + gamma(4, fmt.u) * (math.sqrt(2) + fmt.u)
    le = math.ceil(math.log2(n)) * eta
    rel = le / (1 - le) if le < 1 else np.inf
    norm = np.linalg.norm(x, axis=-1)[:, None, None] * math.sqrt(n)
    return np.broadcast_to(rel * norm, exact.shape)


def _smallest_factor(n: int) -> int:
    return next((p for p in range(2, math.isqrt(n) + 1) if n % p == 0), n)


def _dit(re, im):
    """The DFT along the last axis by decimation in time, radix the smallest prime factor of n
    (radix 2 for powers of two, a direct DFT for a prime): Cooley-Tukey as a textbook writes it,
    its twiddles computed in the working precision (angle and libm cos/sin), every operation rounded."""
    n = re.shape[-1]
    if n == 1:
        return re, im
    p = _smallest_factor(n)
    m = n // p
    # the p interleaved subsequences x[r::p] on their own axis, transformed together
    sub_re, sub_im = _dit(*(np.swapaxes(a.reshape(*a.shape[:-1], m, p), -1, -2) for a in (re, im)))

    def periodic(a, r):  # X_k takes subsequence r's bin k mod m
        return np.concatenate([a[..., r, :]] * p, axis=-1)

    out_re, out_im = periodic(sub_re, 0), periodic(sub_im, 0)
    k = np.arange(n)
    for r in range(1, p):
        angle = stored(2 * np.pi * (r * k % n) / n)  # twiddles computed in the working precision
        c, s = np.cos(angle), -np.sin(angle)  # exp(-2 pi i r k / n)
        t_re, t_im = periodic(sub_re, r), periodic(sub_im, r)
        out_re, out_im = out_re + (c * t_re - s * t_im), out_im + (c * t_im + s * t_re)
    return out_re, out_im


def _working_dft(x, bins):
    """The least accurate correct FFT the typical tier measures against: mixed-radix Cooley-Tukey
    in the working precision, the first `bins` bins as (real, imag) pairs."""
    re, im = _dit(x, np.zeros_like(x))
    return np.stack([re[..., :bins], im[..., :bins]], axis=-1)


def _stack(ns, z):
    return ns.stack([z.real, z.imag], axis=-1)


def _dft_op(name: str, bins, doc: str) -> OpInfo:
    """fft or rfft: numpy, scipy and torch all name the function alike."""
    return OpInfo(
        name=name,
        doc=f"{doc} of {ROWS} N(0,1) rows of length n; output (..., bins, 2) = (real, imag)",
        generate=lambda rng, n: {"x": normal(rng, (ROWS, n))},
        exact=lambda inputs, fmt: _dft_exact(inputs["x"], bins(inputs["x"].shape[-1])),
        fp64=lambda x: _stack(np, getattr(np.fft, name)(x)),
        working=lambda x: _working_dft(x, bins(x.shape[-1])),
        normwise_axes=(-2, -1),  # Thm 24.2 bounds a row's error in norm: the typical scale is a row's too
        bound=_fft_bound,
        bound_doc=(
            "log2(n) eta/(1 - log2(n) eta) * sqrt(n) ||x||_2 per element, "
            "eta = u + gamma_4 (sqrt2 + u) (Higham Thm 24.2)"
        ),
        impls=(
            Impl(
                "numpy",
                f"np.fft.{name}",
                lambda ns, x: _stack(ns, getattr(ns.fft, name)(x)),
                IEEE_DTYPES,
                compute={"float16": "float32"},
                note="float16 is computed in float32 and rounded (pocketfft has no half precision)",
            ),
            Impl("scipy", f"scipy.fft.{name}", lambda ns, x: _stack(np, getattr(ns.fft, name)(x)), SINGLE_DOUBLE),
            Impl("torch", f"torch.fft.{name}", lambda ns, x: ns.view_as_real(getattr(ns.fft, name)(x)), SINGLE_DOUBLE),
            Impl("tensorflow", f"tf.signal.{name}", getattr(tensorflow, name), TF_DTYPES),
            Impl("onnxruntime", f"DFT(onesided={int(name == 'rfft')})", dft(int(name == "rfft")), ORT_FLOAT64),
            Impl("libtorch", f"torch::fft_{name}", lambda lt, x: getattr(lt, name)(x), SINGLE_DOUBLE),
            Impl("jax", f"jax.numpy.fft.{name}", lambda jax, x: jax_fft(jax, x, real=name == "rfft"), JAX_DTYPES),
        ),
        default_size=256,
        bench_sizes=(1024, 1 << 16),
        oracle=lambda inputs: _dft_by_roots_of_unity(inputs["x"], bins(inputs["x"].shape[-1])),
        test_size=16,
        flops=lambda n: 5.0 * ROWS * n * math.log2(n) / 2,
        version=2,  # 2: exact twiddles where they are 0 or +-1 (a sum landing on a midpoint rounds right)
    )


FFT = _dft_op("fft", lambda n: n, "full complex DFT")
RFFT = _dft_op("rfft", lambda n: n // 2 + 1, "real-input DFT (n/2 + 1 bins)")


OPS = [FFT, RFFT]
