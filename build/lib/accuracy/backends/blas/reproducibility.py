"""Does a provider's gemm give the same bits with one thread as with all of them?

Multithreaded BLAS may split the k-loop or change blocking with the thread count,
which reorders the additions; whether it does is a property worth tracking per build.
"""

from dataclasses import dataclass

import numpy as np

from accuracy.core.threads import all_cores

from .providers import Provider


@dataclass(frozen=True)
class ThreadReproducibility:
    provider: str
    dtype: str
    n: int
    threads: int
    bitwise_identical: bool
    max_abs_diff: float


def gemm_thread_reproducibility(
    provider: Provider, n: int = 512, dtype=np.float64, seed: int = 0, threads: int | None = None
) -> ThreadReproducibility:
    """Run an ``n x n`` gemm on the same inputs with 1 and with ``threads`` (default all) threads."""
    threads = threads or all_cores()
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal((n, n)).astype(dtype) for _ in range(2))
    gemm = provider.op("gemm", dtype)
    with provider.threads(1):
        serial = gemm(a, b)
    with provider.threads(threads):
        parallel = gemm(a, b)
    return ThreadReproducibility(
        provider=provider.name,
        dtype=np.dtype(dtype).name,
        n=n,
        threads=threads,
        bitwise_identical=serial.tobytes() == parallel.tobytes(),
        max_abs_diff=float(np.max(np.abs(serial.astype(np.float64) - parallel))),
    )
