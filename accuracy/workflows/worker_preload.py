"""Imported once by the server that a local Dask cluster forks its workers from
(`cluster.work_pool`): the backends named in OPBENCH_WORKER_PRELOAD load their frameworks here,
so that no worker imports them for itself. The server starts with SIGINT blocked
(cluster._start_server_deaf_to_ctrl_c): here it is ignored, then unblocked, so that a Ctrl-C
held pending is dropped and the workers forked from the server ignore Ctrl-C for life."""

import contextlib
import os
import signal

from accuracy.backends import get_backend
from accuracy.workflows.cluster import PRELOAD_VAR

if signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []):  # the server, started blocked
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

for _name in filter(None, os.environ.get(PRELOAD_VAR, "").split(",")):
    # a backend that fails to load here fails again in the worker that runs it, which says so by name
    with contextlib.suppress(Exception):
        get_backend(_name).preload()
