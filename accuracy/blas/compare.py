"""Side-by-side gemm speed and accuracy of several providers in one process.

Inputs are uniform on [0, 1): with no cancellation every entry of ``A @ B`` is far
from zero, so the error in ulps measures the kernel's summation, not the
conditioning of the problem.  The reference is float64 for sgemm and x87 long
double (64-bit mantissa) for dgemm, each at least 11 bits finer than the result.
"""

import time
from dataclasses import dataclass

import numpy as np

from .providers import Provider

# Idle worker threads busy-wait after a call (OpenBLAS's THREAD_TIMEOUT, Intel OpenMP's
# KMP_BLOCKTIME: ~0.1-0.2 s) and steal cores from the next provider timed: wait them out.
SETTLE_SECONDS = 0.5
_REFERENCE_DTYPE = {np.dtype(np.float32): np.float64, np.dtype(np.float64): np.longdouble}


@dataclass(frozen=True)
class GemmComparison:
    provider: str
    architecture: str | None
    dtype: str
    n: int
    threads: int
    best_seconds: float
    gflops: float
    max_ulp: float
    max_rel: float


def gemm_inputs(n: int, dtype, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.random((n, n)).astype(dtype), rng.random((n, n)).astype(dtype)


def gemm_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in a precision fine enough to count the result's ulps against."""
    wide = _REFERENCE_DTYPE[a.dtype]
    return a.astype(wide) @ b.astype(wide)


def error_vs_reference(c: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    """(max error in ulps of ``c``'s dtype at the exact value, max relative error)."""
    err = np.abs(c.astype(reference.dtype) - reference)
    ulp = np.spacing(np.abs(reference).astype(c.dtype)).astype(reference.dtype)
    return float(np.max(err / ulp)), float(np.max(err / np.abs(reference)))


def best_time(fn, *args, repeats: int = 5) -> float:
    """Fastest of ``repeats`` calls after one warm-up (which pays thread start-up and page faults)."""
    fn(*args)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return min(times)


def compare_gemm(providers: list[Provider], n: int = 512, dtypes=(np.float32, np.float64),
                 threads: int | None = None, repeats: int = 5) -> list[GemmComparison]:
    """Time and check ``n x n`` gemm on every provider with the same inputs."""
    rows = []
    for dtype in dtypes:
        a, b = gemm_inputs(n, dtype)
        reference = gemm_reference(a, b)
        for provider in providers:
            gemm = provider.op("gemm", dtype)
            time.sleep(SETTLE_SECONDS)
            with provider.threads(threads or provider.num_threads):
                used = provider.num_threads
                seconds = best_time(gemm, a, b, repeats=repeats)
                max_ulp, max_rel = error_vs_reference(gemm(a, b), reference)
            rows.append(GemmComparison(
                provider=provider.name, architecture=provider.architecture, dtype=np.dtype(dtype).name,
                n=n, threads=used, best_seconds=seconds, gflops=2 * n**3 / seconds / 1e9,
                max_ulp=max_ulp, max_rel=max_rel,
            ))
    return rows
