"""One controller for every thread pool an op may use: BLAS/OpenMP via threadpoolctl, and torch's.

threadpoolctl sees the BLAS and OpenMP runtimes loaded in the process; torch keeps its own
intra-op count, so it is set alongside. Torch is only touched if something already imported it.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager

from threadpoolctl import threadpool_limits


def all_cores() -> int:
    return len(os.sched_getaffinity(0))


@contextmanager
def thread_limit(n: int):
    """Run the block with at most `n` threads in every pool; restore the previous counts after."""
    torch = sys.modules.get("torch")
    previous = torch.get_num_threads() if torch is not None else None
    with threadpool_limits(limits=n):
        if torch is not None:
            torch.set_num_threads(n)
        try:
            yield
        finally:
            if torch is not None:
                torch.set_num_threads(previous)
