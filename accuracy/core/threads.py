"""One controller for the BLAS and OpenMP thread pools: threadpoolctl.

threadpoolctl sees every BLAS and OpenMP runtime loaded in the process, including the libraries
the blas backend loads by path under names it would not recognise (their controllers are
registered in accuracy.backends.blas.controllers). A framework with a pool of its own (torch's intra-op
pool) limits it in its backend's thread_limit, on top of this one.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from typing import Any

from threadpoolctl import get_cached_controller


def all_cores() -> int:
    """Cores this process may run on (respects taskset/cgroup affinity)."""
    return len(os.sched_getaffinity(0))


def thread_limit(n: int) -> AbstractContextManager[Any]:
    """Run the block with at most `n` threads in every BLAS/OpenMP pool; restore the counts after.

    threadpoolctl's cached controller, not a new one each time: a new one reads every loaded
    library (/proc/self/maps), a sixth of a model sweep's time where each unit is judged in its
    own limit. threadpoolctl reads them again once a module is imported or a controller is
    registered (which the blas backend does for each library it loads by path)."""
    return get_cached_controller().limit(limits=n)
