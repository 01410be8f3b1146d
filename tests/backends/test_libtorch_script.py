"""The TorchScript port's C++ module, freed by a finalizer: the garbage collector may run it in the
middle of another unit's Monte Carlo runs, where the op it dispatches (script_free) was taken for
one of that unit's ops; the reason then said "modelled as one rounding each: aten.script_free", and
a Dask worker that had run the port earlier gave another report than the in-process run."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import torch

from accuracy.backends import get_backend
from accuracy.core.dtypes import get_format
from accuracy.judge.torch_emulation import MonteCarloRuns, torch_ops_computed


def _garbage_script(freed: list) -> None:
    """A loaded TorchScript module reachable only through a reference cycle: freed when the
    garbage collector next runs, not when this returns."""
    script = get_backend("libtorch").script(torch.jit.trace(torch.nn.Linear(2, 2).eval(), torch.ones(1, 2)))
    weakref.finalize(script, freed.append, "freed")
    cycle: list = [script]
    cycle.append(cycle)


def _softmax_collecting(x):
    gc.collect()  # as the collector may run at any allocation of the function
    return torch.softmax(x, -1) * x


def _numpy_collecting(x):
    gc.collect()
    return np.exp(x)


def test_a_module_freed_mid_run_is_no_op_of_the_function_run():
    inputs = {"x": np.linspace(-1.0, 1.0, 8).reshape(2, 4)}
    freed: list = []
    gc.disable()  # collected inside the functions, not at whichever allocation comes first
    try:
        _garbage_script(freed)
        runs = MonteCarloRuns(_softmax_collecting, inputs, get_format("float32"))
        runs.extend([[0, 0]])
        assert freed == ["freed"]  # the finalizer ran inside the runs
        _garbage_script(freed)
        computed = torch_ops_computed(_numpy_collecting, inputs)
        assert freed == ["freed", "freed"]
    finally:
        gc.enable()
    assert runs.unmodelled == set()
    assert computed == set()  # a numpy function still
