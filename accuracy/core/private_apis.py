"""The private parts of the libraries opbench relies on, each reached here and nowhere else.

opbench exists to judge upgrades of these libraries, so a private attribute that moves or changes
must fail one test (tests/core/test_private_apis.py) rather than a user's run. Each use says why
no public API serves.
"""

from __future__ import annotations

import functools
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


def transformers_unpacked_without_mask(masking_utils: Any) -> None:
    """Keep transformers' eager attention from masking a packed-sequence format that is not there.

    Without an attention mask or a cache, `masking_utils._preprocess_mask_arguments` always gives
    a packed-sequence mask from the position ids (its own comment: it would return None when
    nothing is packed, but cannot under export), and each forward then builds its causal mask
    through vmap with an indexing mask function: a fifth of `opbench generate`'s Llama time, under
    opbench's dispatch modes. Where the last token's sequence index is 0 (one sequence) every key
    is in the query's sequence, so the mask is the causal mask alone: this gives None there, for
    eager attention only (its boolean mask is the same and nothing else reads it; SDPA's would let
    the mask be skipped for is_causal, another kernel), never while tracing, compiling or
    exporting (a value-dependent branch) nor on a tensor subclass (fake or functional tensors)."""
    import torch

    preprocess = masking_utils._preprocess_mask_arguments
    if getattr(preprocess, "opbench_unpacked", False):
        return

    @functools.wraps(preprocess)  # its __wrapped__: transformers' own
    def unpacked(config: Any, *args: Any, **kwargs: Any) -> Any:
        result = preprocess(config, *args, **kwargs)
        packed = result[2] if isinstance(result, tuple) and len(result) == 5 else None
        if (
            type(packed) is torch.Tensor
            and getattr(config, "_attn_implementation", None) == "eager"
            and not torch.jit.is_tracing()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
            and not torch.compiler.is_compiling()
            and not packed.detach().cpu().numpy()[:, -1].any()
        ):
            return (*result[:2], None, *result[3:])
        return result

    unpacked.opbench_unpacked = True  # type: ignore[attr-defined]
    masking_utils._preprocess_mask_arguments = unpacked
