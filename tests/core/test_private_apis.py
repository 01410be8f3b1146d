"""Each private attribute opbench reaches in a library, checked against the installed library: an
upgrade that moves one fails here, not in a user's run (accuracy/core/private_apis.py)."""

from __future__ import annotations

import ctypes
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from asv.results import Results
from threadpoolctl import ThreadpoolController

from accuracy.core import private_apis
from accuracy.workflows.model.state_key import Key, Uncacheable, put_module


def test_the_blas_symbol_of_numpys_scipy_openblas_is_found_through_its_affixes():
    """numpy's OpenBLAS names its functions `scipy_openblas64_...`: the plain name is not in the
    library, the affixed one is, and it answers with the build's configuration."""
    np.ones(2) @ np.ones(2)  # numpy's BLAS is loaded
    # numpy's own: other OpenBLAS builds may be loaded too (scipy's, the BLAS providers')
    openblas = next(c for c in ThreadpoolController().lib_controllers if "numpy.libs" in c.filepath)
    assert getattr(openblas.dynlib, "openblas_get_config", None) is None  # the public handle misses it
    get_config = private_apis.blas_symbol(openblas, "openblas_get_config")
    get_config.restype, get_config.argtypes = ctypes.c_char_p, []
    assert get_config().decode().startswith("OpenBLAS ")
    assert private_apis.blas_symbol(openblas, "no_such_function") is None


def test_asvs_raw_results_keep_the_count_that_tells_a_file_cut_short(tmp_path):
    """A benchmark of 3 parameter values whose file holds 2: the raw list has 2 values, where asv's
    public `get_result_value` pads to the grid's 3 with None."""
    path = tmp_path / "machine" / "results.json"
    path.parent.mkdir()
    results = {"bench.track": [[1.0, 2.0], [["'a'", "'b'", "'c'"]]]}
    data = {"commit_hash": "a" * 40, "env_name": "e", "date": 1, "params": {"machine": "machine"}, "python": "3.11"}
    data |= {"requirements": {}, "env_vars": {}, "result_columns": ["result", "params"], "results": results}
    data |= {"durations": {}, "version": 2}
    path.write_text(json.dumps(data))
    loaded = Results.load(str(path))
    assert private_apis.raw_result(loaded, "bench.track") == [1.0, 2.0]
    assert loaded.get_result_value("bench.track", [["'a'", "'b'", "'c'"]]) == [1.0, 2.0, None]


def test_a_modules_own_tensors_include_the_none_ones_named_parameters_skips():
    linear = torch.nn.Linear(3, 2, bias=False)
    parameters, _ = private_apis.own_tensors(linear)
    assert list(parameters) == ["weight", "bias"] and parameters["bias"] is None
    assert [name for name, _ in linear.named_parameters()] == ["weight"]
    norm = torch.nn.BatchNorm1d(3)
    assert list(private_apis.own_tensors(norm)[1]) == ["running_mean", "running_var", "num_batches_tracked"]


@pytest.mark.parametrize("hook", private_apis.TORCH_FORWARD_HOOKS)
def test_every_forward_hook_torch_keeps_is_one_the_cache_key_refuses(hook):
    """Each attribute named as a forward hook exists on a module; one registered there makes the
    module uncacheable (a hook changes what its forward computes)."""
    linear = torch.nn.Linear(3, 2)
    assert hook in vars(linear)
    put_module(Key("test"), linear)
    if "pre" in hook:
        linear.register_forward_pre_hook(lambda m, args, kwargs: None, with_kwargs="kwargs" in hook)
    else:
        linear.register_forward_hook(lambda m, *a: None, with_kwargs="kwargs" in hook, always_call="always" in hook)
    assert vars(linear)[hook]
    with pytest.raises(Uncacheable, match="a forward hook"):
        put_module(Key("test"), linear)


def test_the_internals_the_cache_key_describes_apart_are_all_a_modules_attributes():
    names = set(vars(torch.nn.Linear(3, 2)))
    assert names >= private_apis.TORCH_MODULE_INTERNALS
    assert any(name.startswith(private_apis.TORCH_BACKWARD_OR_STATE) for name in names)


@pytest.mark.slow  # a fresh Python process: torch must not be imported there
def test_torchs_cpu_library_is_found_without_importing_torch():
    """The file `_torch_bound_first` loads: in the installed torch, and found before any import."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom accuracy.core.private_apis import torch_cpu_library\n"
        "path = torch_cpu_library()\nprint(path.name, 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["libtorch_cpu.so", "False"]
    assert private_apis.torch_cpu_library() == Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"


def test_transformers_loads_its_model_classes_without_scikit_learn():
    """scikit-learn is installed (NNCF needs it), and transformers' generation module, which every
    model class loads, imports it where the flag says it is available; opbench's transformers says
    not, so that a Llama loads 1.5 CPU-s sooner."""
    import inspect

    from accuracy.workflows.model.torchvision_import import import_transformers

    assert importlib.util.find_spec("sklearn") is not None
    transformers = import_transformers()
    from transformers.generation import candidate_generator

    assert "if is_sklearn_available():\n    from sklearn" in inspect.getsource(candidate_generator)
    assert transformers.utils.import_utils.is_sklearn_available() is False


def test_the_lowering_shortcuts_mirror_the_torch_code_they_were_written_against():
    """executorch_port's py_kernels_registered_plainly and node_sources_shared do what torch 2.13's
    `OperatorBase.py_impl` and `NodeSource.__init__` do, leaving out their costs: they copy that
    code, so a torch whose code differs fails here, to have them checked again, not in a lowering."""
    import hashlib
    import inspect

    from torch.fx.traceback import NodeSource

    mirrored = {f.__qualname__: f for f in (torch._ops.OperatorBase.py_impl, NodeSource.__init__)}
    digests = {name: hashlib.sha256(inspect.getsource(f).encode()).hexdigest()[:16] for name, f in mirrored.items()}
    assert digests == {"OperatorBase.py_impl": "8173bd205b783783", "NodeSource.__init__": "99395e7f40a4a049"}
