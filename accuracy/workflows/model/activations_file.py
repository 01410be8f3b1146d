"""The activations file: the interchange format with any runtime (`.safetensors` or `.npz`).

- `<module path>` (e.g. `layer1.0.conv1`): that layer's output;
- `<module path>/in0`, `/in1`, ...: the tensor inputs it received, in call order;
- `<module path>/out1`, `/out2`, ...: the second, third, ... tensor output of a module that gives
  several (a rotary embedding's `(cos, sin)`, an attention's `(output, weights)`): N counts from
  0 as for inputs, and `<module path>` itself is output 0;
- `output`: the model's output;
- `e2e/<module path>`, `e2e/output` (optional): the runtime's own end-to-end run, where the keys
  above hold each layer computed on PyTorch's inputs: `inherited` and `propagated` are then the
  runtime's own, not those of its layers fed PyTorch's activations.

A module's second call is `<module path>#2` (accuracy.workflows.model.trace).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from accuracy.backends.pytorch import tensor_to_numpy as to_numpy
from accuracy.core.dtypes import is_floating
from accuracy.core.errors import OpbenchError
from accuracy.workflows.array_files import read_arrays, write_arrays
from accuracy.workflows.model.trace import OUTPUT_KEY, LayerCall

__all__ = [
    "OUTPUT_KEY",
    "activations",
    "checked_activations",
    "input_key",
    "output_key",
    "read_activations",
    "save_activations",
]
INPUT_SUFFIX = "/in{}"
OUTPUT_SUFFIX = "/out{}"
END_TO_END = "e2e/"  # the prefix of a runtime's own end-to-end activations


def input_key(call: LayerCall, index: int) -> str:
    return call.key + INPUT_SUFFIX.format(index)


def output_key(call: LayerCall, index: int) -> str:
    """The key of the call's `index`-th tensor output (0: the first, `call.key` itself)."""
    return call.key + OUTPUT_SUFFIX.format(index) if index else call.key


def _tensors(call: LayerCall) -> dict[str, Any]:
    """Every key the call has, with its tensor: output 0 (None where it gave no tensor), then the
    further outputs and the inputs."""
    keys: dict[str, Any] = {call.key: call.output}
    keys |= {output_key(call, i + 1): t for i, t in enumerate(call.more_outputs)}
    return keys | {input_key(call, i): t for i, t in enumerate(call.inputs)}


def activations(calls: list[LayerCall], output) -> dict[str, np.ndarray]:
    """The activations file's arrays for these calls."""
    arrays = {k: to_numpy(t) for call in calls for k, t in _tensors(call).items() if t is not None}
    arrays[OUTPUT_KEY] = to_numpy(output)
    return arrays


def save_activations(path: Path | str, arrays: dict[str, np.ndarray]) -> Path:
    return write_arrays(path, arrays)


def read_activations(path: Path | str, calls: list[LayerCall]) -> dict[str, np.ndarray]:
    """A runtime's activations file, checked against the reference model's layers: a key that
    names no layer, a layer output of another shape or a missing model output is bad input."""
    return checked_activations(path, read_arrays(path), calls)


def checked_activations(
    path: Path | str, arrays: dict[str, np.ndarray], calls: list[LayerCall]
) -> dict[str, np.ndarray]:
    """The arrays of the activations file `path`, already read (a file that cannot be read is one
    line before the model is built), checked against the reference model's layers."""
    expected = {c.key: c for c in calls}
    tensors = {k: t for call in calls for k, t in _tensors(call).items() if t is not None}
    known = {c.key for c in calls if c.output is not None} | {OUTPUT_KEY}
    known |= {END_TO_END + k for k in known} | set(tensors)
    extra = sorted(k for k in arrays if k not in known)
    if extra:
        raise OpbenchError(f"{path}: keys that name no layer input or output of the model: {', '.join(extra[:5])}")
    if OUTPUT_KEY not in arrays:
        raise OpbenchError(f"{path}: missing key {OUTPUT_KEY!r} (the model's output)")
    layer_keys = [k for k in expected if k in arrays]
    if not layer_keys:
        raise OpbenchError(f"{path}: holds no layer output; keys are module paths, e.g. {next(iter(expected))}")
    for key, array in arrays.items():
        tensor = tensors.get(key.removeprefix(END_TO_END))
        if tensor is None:
            continue
        if tuple(array.shape) != tuple(tensor.shape):
            raise OpbenchError(f"{path}: {key!r} has shape {tuple(array.shape)}, the model's has {tuple(tensor.shape)}")
        if is_floating(array) != tensor.is_floating_point():
            theirs = str(tensor.dtype).removeprefix("torch.")
            raise OpbenchError(f"{path}: {key!r} holds {array.dtype} values, the model's are {theirs}")
    return {k: a.astype(a.dtype.newbyteorder("=")) if not a.dtype.isnative else a for k, a in arrays.items()}
