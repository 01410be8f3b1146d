"""The catalog's implementations are lambdas, which pickle cannot carry to a framework's worker process
(startup_threads): the catalog names them, and a worker finds the same function by that name."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import psutil
import pytest

from accuracy.backends import get_backend, startup_threads
from accuracy.catalog.registry import all_ops, get_op
from accuracy.core.dtypes import get_format
from accuracy.reference.inputs import make_inputs


def test_every_implementation_reaches_a_worker_as_itself():
    for op in all_ops():
        for impl in op.impls:
            key = pickle.loads(pickle.dumps(startup_threads._function_key(impl.fn)))
            assert key[0] == "named"
            assert startup_threads._resolve(key) is impl.fn, f"{impl.backend}:{impl.variant}"


def test_a_function_outside_the_catalog_travels_pickled():
    assert startup_threads._function_key(np.negative) == ("pickled", np.negative)


@pytest.mark.slow  # a worker process of its own: seconds
def test_a_catalog_lambda_runs_at_another_thread_count_in_a_worker():
    """TensorFlow's runtime starts at one count in this process; the other runs in a forked worker, which
    gets the registry's lambda by name and must give the same bits (exp is elementwise)."""
    impl = next(i for i in get_op("exp").impls if i.backend == "tensorflow")
    backend, fmt = get_backend("tensorflow"), get_format("float32")
    inputs = make_inputs(get_op("exp"), 64, fmt)
    outputs = {}
    for threads in (1, 2):
        with backend.thread_limit(threads):
            native = {name: backend.to_native(array) for name, array in inputs.items()}
            outputs[threads] = backend.to_numpy(backend.call(impl.fn, native), fmt)
    assert backend.started_threads in (1, 2) and backend._zygote is not None
    np.testing.assert_array_equal(outputs[1], outputs[2])


WORKERS_THEN_EXIT = """
import threading
import psutil
from accuracy.backends import get_backend
from accuracy.catalog.registry import get_op
from accuracy.core.dtypes import get_format
from accuracy.reference.inputs import make_inputs

fmt, op = get_format("float32"), get_op("exp")
x = make_inputs(op, 64, fmt)


def run(name, threads, barrier=None):
    backend = get_backend(name)
    impl = next(i for i in op.impls if i.backend == name)
    if barrier:
        barrier.wait()
    with backend.thread_limit(threads):
        backend.to_numpy(backend.call(impl.fn, {k: backend.to_native(v) for k, v in x.items()}), fmt)


for name in ("tensorflow", "jax"):  # two threads start each framework at once, as a scan's chunks do
    barrier = threading.Barrier(2)
    both = [threading.Thread(target=run, args=(name, 1, barrier)) for _ in range(2)]
    [t.start() for t in both]
    [t.join() for t in both]
    run(name, 2)  # and a worker at another count
print(" ".join(str(p.pid) for p in psutil.Process().children(recursive=True)))
"""


@pytest.mark.slow  # two frameworks' zygotes and workers: seconds
def test_a_framework_started_from_two_threads_at_once_forks_one_zygote_that_leaves_with_opbench():
    """Two scan threads starting TensorFlow at once each forked a zygote, and each zygote held the
    other's pipe (a fork copies every open pipe end), so neither saw EOF when opbench exited: the
    orphans kept `opbench scan exp | cat` waiting for ever. The start is now one thread's, and a
    forked child also leaves once its parent has gone."""
    proc = subprocess.run(
        [sys.executable, "-c", WORKERS_THEN_EXIT], capture_output=True, text=True, timeout=120
    )  # stdout is a pipe: with orphans holding it, this times out
    assert proc.returncode == 0, proc.stderr[-2000:]
    pids = [int(pid) for pid in proc.stdout.split()]
    assert len(pids) == 4, pids  # per framework: one zygote, and its worker at 2 threads
    _, alive = psutil.wait_procs([psutil.Process(p) for p in pids if psutil.pid_exists(p)], timeout=10)
    assert not alive, [p.cmdline() for p in alive]
