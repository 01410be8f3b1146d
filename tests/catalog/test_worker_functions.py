"""The catalog's implementations are lambdas, which pickle cannot carry to a framework's worker process
(startup_threads): the catalog names them, and a worker finds the same function by that name."""

from __future__ import annotations

import pickle

import numpy as np

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
