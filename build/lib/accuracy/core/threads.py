"""One controller for the BLAS and OpenMP thread pools: threadpoolctl.

threadpoolctl sees every BLAS and OpenMP runtime loaded in the process, including the libraries
the blas backend loads by path under names it would not recognise (their controllers are
registered in accuracy.backends.blas.controllers). A framework with a pool of its own (torch's intra-op
pool) limits it in its backend's thread_limit, on top of this one.
"""

from __future__ import annotations

import os

from threadpoolctl import threadpool_limits


def all_cores() -> int:
    """Cores this process may run on (respects taskset/cgroup affinity)."""
    return len(os.sched_getaffinity(0))


def thread_limit(n: int) -> threadpool_limits:
    """Run the block with at most `n` threads in every BLAS/OpenMP pool; restore the counts after."""
    return threadpool_limits(limits=n)
