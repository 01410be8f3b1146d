"""A Keras model as a port of a torch model: its layers called on torch's activations.

The user brings a Keras model and a mapping from its layer names to the torch module paths they
port. Keras convolutions are channels-last: a rank-4 activation is moved from torch's NCHW to
NHWC on the way in and back on the way out; any other rank is passed as is (so a Keras Flatten
of an NHWC tensor feeds a Dense in another order than torch's Flatten: the classic port bug).
"""

from __future__ import annotations

import numpy as np

from accuracy.core.errors import OpbenchError

TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def to_keras(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array.transpose(TO_NHWC)) if array.ndim == 4 else array


def from_keras(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array.transpose(TO_NCHW)) if array.ndim == 4 else array


def check_mapping(model, mapping: dict[str, str], torch_paths: set[str], source: str) -> None:
    """Every Keras layer and torch module the mapping names must exist: bad input otherwise."""
    names = {layer.name for layer in model.layers}
    missing = sorted(k for k in mapping if k not in names)
    if missing:
        raise OpbenchError(f"{source}: the Keras model has no layer {', '.join(missing)}")
    unknown = sorted({v for v in mapping.values() if v not in torch_paths})
    if unknown:
        raise OpbenchError(f"{source}: the torch model calls no leaf module {', '.join(unknown)}")


def call_layers(model, names: list[str], inputs: list[np.ndarray]) -> np.ndarray:
    """Keras layers `names` applied in turn to torch's inputs (laid out channels-last)."""
    args = [to_keras(a) for a in inputs]
    out = model.get_layer(names[0])(*args) if len(args) > 1 else model.get_layer(names[0])(args[0])
    for name in names[1:]:
        out = model.get_layer(name)(out)
    return from_keras(np.asarray(out))


def run_layers(model, names: list[str], inputs: list[np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every named layer's output and the model's output, in one end-to-end run."""
    import keras

    probe = keras.Model(inputs=model.inputs, outputs=[*(model.get_layer(n).output for n in names), model.outputs[0]])
    results = probe([to_keras(a) for a in inputs])  # a list: the structure of model.inputs
    results = [from_keras(np.asarray(r)) for r in results]
    return dict(zip(names, results[:-1], strict=True)), results[-1]
