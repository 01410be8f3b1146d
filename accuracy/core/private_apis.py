"""The private parts of the libraries opbench relies on, each reached here and nowhere else.

opbench exists to judge upgrades of these libraries, so a private attribute that moves or changes
must fail one test (tests/core/test_private_apis.py) rather than a user's run. Each use says why
no public API serves.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

# nn.Module's attributes that hold its forward hooks: a hook changes what a forward computes
TORCH_FORWARD_HOOKS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks_always_called",
)
# nn.Module's own bookkeeping: its tensors and children, described apart from its attributes
TORCH_MODULE_INTERNALS = frozenset({"_parameters", "_buffers", "_modules"})
# nn.Module's backward hooks and state-dict hooks: no part of what a forward computes
TORCH_BACKWARD_OR_STATE = ("_backward", "_state_dict", "_load_state_dict", "_is_full_backward_hook")


def blas_symbol(controller: Any, name: str) -> Any:
    """A BLAS function of a threadpoolctl controller's library, or None. threadpoolctl's
    `_get_symbol` adds the library's symbol affixes (scipy's `scipy_openblas64_` builds); its public
    `dynlib` would miss them."""
    return controller._get_symbol(name)


def raw_result(results: Any, name: str) -> list[Any] | None:
    """asv's stored values of one benchmark, before `get_result_value` fits them to the parameter
    grid: their count tells a file cut short from a whole one, which the public call pads over."""
    return results._results[name]


def own_tensors(module: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A module's own parameters and buffers by name, None entries included: `Linear(bias=False)`
    declares its bias as None, which `named_parameters` skips, and a cache key must tell it from a
    module that has no bias at all."""
    return module._parameters, module._buffers


def torch_cpu_library() -> Path | None:
    """torch's CPU library (`torch/lib/libtorch_cpu.so`), found without importing torch, or None
    where torch is not installed. torch's wheel keeps its kernels there, its MKL among them, and
    no public API names the file."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "lib" / "libtorch_cpu.so"
    return path if path.is_file() else None


def transformers_without_sklearn(transformers: Any) -> None:
    """Keep transformers from importing scikit-learn (1.5 CPU-s of the 5.8 a Llama costs to import
    here): its generation module, which every model class loads, imports it for one use, the ROC
    curve of assisted decoding, which opbench never runs. transformers reads the flag
    `import_utils._sklearn_available` at each use and has no public switch for it (as USE_TF is)."""
    transformers.utils.import_utils._sklearn_available = False
