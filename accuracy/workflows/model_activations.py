"""A reference model's layers and their activations: what every port is fed and judged on.

The reference is a torch `nn.Module` from a factory (MODULE:FUNCTION). Forward hooks on its leaf
modules record, per call, the tensors it received and gave back. The activations file is the
interchange format with any runtime (`.safetensors` or `.npz`):

- `<module path>` (e.g. `layer1.0.conv1`): that layer's output;
- `<module path>/in0`, `/in1`, ...: the tensor inputs it received, in call order;
- `output`: the model's output.

A module called more than once in a forward pass (torchvision's BasicBlock calls its `relu`
twice) gives one key per call: `layer1.0.relu`, then `layer1.0.relu#2`, ...
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from accuracy.core.dtypes import FORMATS
from accuracy.core.errors import OpbenchError
from accuracy.reference.inputs import normal, seed_for
from accuracy.workflows.array_files import parse_shapes, read_arrays, write_arrays
from accuracy.workflows.check import load_function

OUTPUT_KEY = "output"
INPUT_SUFFIX = "/in{}"
CALL_MARK = "#"


@dataclass
class LayerCall:
    """One call of a leaf module: its path, the call's key and the tensors in and out."""

    key: str
    path: str
    module: Any  # torch.nn.Module
    inputs: list  # torch tensors, as received (positional tensor arguments)
    output: Any  # torch tensor
    producers: list[str | None] = field(default_factory=list)  # the call whose output each input is

    @property
    def kind(self) -> str:
        return type(self.module).__name__


def call_key(path: str, index: int) -> str:
    return path if index == 0 else f"{path}{CALL_MARK}{index + 1}"


def leaf_modules(model) -> dict[str, Any]:
    return {name: m for name, m in model.named_modules() if name and not any(True for _ in m.children())}


def record(model, inputs: dict) -> tuple[list[LayerCall], Any]:
    """Every leaf call of one forward pass, in execution order, and the model's output."""
    import torch

    calls: list[LayerCall] = []
    counts: dict[str, int] = {}
    made_by: dict[int, str] = {}
    keep: list = []  # tensors stay alive so that ids are not reused within the pass

    def hook(path):
        def after(module, args, output):
            if not isinstance(output, torch.Tensor):
                return
            key = call_key(path, counts.get(path, 0))
            counts[path] = counts.get(path, 0) + 1
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            keep.extend([*tensors, output])
            calls.append(
                LayerCall(
                    key,
                    path,
                    module,
                    [t.detach().clone() for t in tensors],
                    output.detach().clone(),
                    [made_by.get(id(t)) for t in tensors],
                )
            )
            made_by[id(output)] = key

        return after

    handles = [m.register_forward_hook(hook(p)) for p, m in leaf_modules(model).items()]
    try:
        with torch.no_grad():
            out = model(**{k: torch.as_tensor(v) for k, v in inputs.items()})
    finally:
        for h in handles:
            h.remove()
    return calls, first_tensor(out)


def first_tensor(out):
    """A model's output tensor: the tensor itself, a tuple's first, or a transformers output's first field."""
    import torch

    if isinstance(out, torch.Tensor):
        return out.detach()
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0].detach()
    if hasattr(out, "to_tuple"):
        return first_tensor(out.to_tuple())
    raise OpbenchError(f"the model returned a {type(out).__name__}, not a tensor (or a tuple starting with one)")


def to_numpy(tensor) -> np.ndarray:
    from accuracy.workflows.array_files import as_array

    return as_array(tensor, "tensor")


def activations(calls: list[LayerCall], output) -> dict[str, np.ndarray]:
    """The activations file's arrays for these calls."""
    arrays = {}
    for call in calls:
        arrays[call.key] = to_numpy(call.output)
        for i, t in enumerate(call.inputs):
            arrays[call.key + INPUT_SUFFIX.format(i)] = to_numpy(t)
    arrays[OUTPUT_KEY] = to_numpy(output)
    return arrays


def save_activations(path: Path | str, arrays: dict[str, np.ndarray]) -> Path:
    return write_arrays(path, arrays)


def read_activations(path: Path | str, calls: list[LayerCall]) -> dict[str, np.ndarray]:
    """A runtime's activations file, checked against the reference model's layers: a key that
    names no layer, a layer output of another shape or a missing model output is bad input."""
    arrays = read_arrays(path)
    expected = {c.key: c for c in calls}
    known = set(expected) | {OUTPUT_KEY}
    for call in calls:
        known |= {call.key + INPUT_SUFFIX.format(i) for i in range(len(call.inputs))}
    extra = sorted(k for k in arrays if k not in known)
    if extra:
        raise OpbenchError(f"{path}: keys that name no layer input or output of the model: {', '.join(extra[:5])}")
    if OUTPUT_KEY not in arrays:
        raise OpbenchError(f"{path}: missing key {OUTPUT_KEY!r} (the model's output)")
    layer_keys = [k for k in expected if k in arrays]
    if not layer_keys:
        raise OpbenchError(f"{path}: holds no layer output; keys are module paths, e.g. {next(iter(expected))}")
    for key, array in arrays.items():
        ref = expected.get(key.split("/")[0])
        if ref is None:
            continue
        tensor = ref.output if "/" not in key else ref.inputs[int(key.rpartition("/in")[2])]
        if tuple(array.shape) != tuple(tensor.shape):
            raise OpbenchError(f"{path}: {key!r} has shape {tuple(array.shape)}, the model's has {tuple(tensor.shape)}")
    return arrays


# --- the factory and its inputs ------------------------------------------------------------


def load_model(spec: str, train: bool = False):
    """The module the factory MODULE:FUNCTION returns, in eval mode unless `train`."""
    import torch

    factory = load_function(spec, "model")
    try:
        model = factory()
    except Exception as exc:
        raise OpbenchError(f"{spec}: the factory failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(model, torch.nn.Module):
        raise OpbenchError(f"{spec}: the factory returned a {type(model).__name__}, not a torch.nn.Module")
    return model.train(train)


def generated_inputs(text: str) -> dict[str, np.ndarray]:
    """NAME=D1xD2x...[,NAME=...]: standard normal float32 arrays from the suite's seeded PCG64
    (a stable seed per name and shape), for a model whose inputs are plain floats."""
    arrays = {}
    for name, shape in parse_shapes(text).items():
        rng = np.random.Generator(np.random.PCG64(seed_for(f"model:{name}", 0, "x".join(map(str, shape)))))
        arrays[name] = FORMATS["float32"].round(normal(rng, shape)).astype(np.float32)
    return arrays


def model_inputs(path: Path | str) -> dict[str, np.ndarray]:
    """The model's inputs by argument name: a file (.npz, .safetensors or .pt), or shapes to
    generate (`x=1x3x224x224`)."""
    if not Path(path).exists() and "=" in str(path):
        return generated_inputs(str(path))
    arrays = read_arrays(path)
    if not arrays:
        raise OpbenchError(f"{path}: holds no arrays")
    return arrays


def run_reference(model, inputs: dict[str, np.ndarray], source: str) -> tuple[list[LayerCall], Any]:
    """The reference forward pass; inputs the model cannot take (shape, names) are bad input."""
    try:
        calls, out = record(model, inputs)
    except OpbenchError:
        raise
    except Exception as exc:
        shapes = ", ".join(f"{k} {tuple(v.shape)}" for k, v in inputs.items())
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise OpbenchError(f"{source}: the model cannot take inputs {shapes}: {type(exc).__name__}: {text}") from None
    if not calls:
        raise OpbenchError(f"{source}: the model called no leaf module; nothing to compare layer by layer")
    return calls, out


def converted(module, dtype, device: str = "cpu"):
    """A copy of `module` with its floating parameters and buffers in `dtype` on `device`."""
    return copy.deepcopy(module).to(device=device, dtype=dtype)


def composed(modules: list) -> Callable:
    """Leaf calls chained: each one's output is the next one's only input."""

    def run(*inputs):
        out = modules[0](*inputs)
        for m in modules[1:]:
            out = m(out)
        return out

    return run
