"""Imported once by the server that a local Dask cluster forks its workers from
(`cluster.work_pool`): the backends named in OPBENCH_WORKER_PRELOAD load their frameworks here,
so that no worker imports them for itself."""

import contextlib
import os

from accuracy.backends import get_backend
from accuracy.workflows.cluster import PRELOAD_VAR

for _name in filter(None, os.environ.get(PRELOAD_VAR, "").split(",")):
    # a backend that fails to load here fails again in the worker that runs it, which says so by name
    with contextlib.suppress(Exception):
        get_backend(_name).preload()
