"""The catalog's implementations are lambdas, which pickle cannot carry to a framework's worker process
(startup_threads): the catalog names them, and a worker finds the same function by that name."""

from __future__ import annotations

import functools
import json
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
import json
import sys
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
        return backend.to_numpy(backend.call(impl.fn, {k: backend.to_native(v) for k, v in x.items()}), fmt)


def bits(name):
    return {threads: run(name, threads).tobytes().hex() for threads in (1, 2)}


background = {}
for name in ("tensorflow", "jax"):  # loaded in a zygote while this process goes on, as explain does
    backend = get_backend(name)
    with backend.in_background() as started:
        found = {"started": started, "bits": bits(name), "zygote": backend._kept.pid}
    with backend.in_background() as again:  # the next explain of this process: the same zygote
        found["again"] = again and bits(name) == found["bits"] and backend._kept.pid == found["zygote"]
    background[name] = found
background["imported here"] = sorted({"tensorflow", "jax"} & set(sys.modules))
background["processes"] = [p.pid for p in psutil.Process().children(recursive=True)]

for name in ("tensorflow", "jax"):  # two threads start each framework at once, as a scan's chunks do
    barrier = threading.Barrier(2)
    both = [threading.Thread(target=run, args=(name, 1, barrier)) for _ in range(2)]
    [t.start() for t in both]
    [t.join() for t in both]
    run(name, 2)  # and a worker at another count
    background[name]["same bits in this process"] = bits(name) == background[name]["bits"]
print(json.dumps(background))
print(" ".join(str(p.pid) for p in psutil.Process().children(recursive=True)))
"""


@functools.cache
def _workers_then_exit() -> subprocess.CompletedProcess:
    """One process for both tests below (importing two frameworks takes seconds); stdout is a pipe:
    with orphans holding it, this times out."""
    return subprocess.run([sys.executable, "-c", WORKERS_THEN_EXIT], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.xdist_group("framework-workers")  # one worker, one process for both
def test_a_framework_loaded_in_the_background_answers_with_the_same_bits_and_stays_for_the_next_block():
    """`in_background` (explain's): the zygote imports the framework while this process goes on,
    which never imports it; every count runs in a worker, with the bits an in-process run gives;
    the next block reuses the zygote and its workers (one per framework, and one per count)."""
    proc = _workers_then_exit()
    assert proc.returncode == 0, proc.stderr[-2000:]
    background = json.loads(proc.stdout.splitlines()[0])
    assert background.pop("imported here") == [] and len(background.pop("processes")) == 2 * 3
    for name, found in background.items():
        assert found["started"] and found["again"] and found["same bits in this process"], name


def test_a_framework_that_fails_to_load_in_the_background_fails_each_call_with_its_error():
    class Missing(startup_threads.StartupThreadsBackend):
        name = module = "opbench_no_such_framework"
        modules = (module,)

    backend = Missing()
    for _ in range(2):  # the second block, in the zygote kept from the first
        missing = "ModuleNotFoundError: No module named 'opbench_no_such_framework'"
        with backend.in_background() as started, pytest.raises(RuntimeError, match=missing):
            backend.call(np.negative, {"x": backend.to_native(np.ones(3))})
        assert started
    zygote = psutil.Process(backend._kept.pid)
    backend._kept.close()  # what the process's exit does
    assert not zygote.is_running()


@pytest.mark.slow  # two frameworks' zygotes and workers: seconds
@pytest.mark.xdist_group("framework-workers")
def test_a_framework_started_from_two_threads_at_once_forks_one_zygote_that_leaves_with_opbench():
    """Two scan threads starting TensorFlow at once each forked a zygote, and each zygote held the
    other's pipe (a fork copies every open pipe end), so neither saw EOF when opbench exited: the
    orphans kept `opbench scan exp | cat` waiting for ever. The start is now one thread's, and a
    forked child also leaves once its parent has gone."""
    proc = _workers_then_exit()
    assert proc.returncode == 0, proc.stderr[-2000:]
    background = json.loads(proc.stdout.splitlines()[0])["processes"]
    pids = [int(pid) for pid in proc.stdout.splitlines()[1].split()]
    assert len(set(pids) - set(background)) == 4, pids  # per framework: one zygote, and its worker at 2 threads
    _, alive = psutil.wait_procs([psutil.Process(p) for p in pids if psutil.pid_exists(p)], timeout=10)
    assert not alive, [p.cmdline() for p in alive]
