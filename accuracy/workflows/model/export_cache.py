"""A model's ONNX export through the reference cache: the export is done once per model state and
inputs, not once per port. The onnxruntime and onnxruntime-noopt ports of one run export the same
model, a `--onnx` file's names are read off the same export, and a rerun with another port finds
it: a TorchScript export took seconds and a dynamo export of a small decoder 3 s here.

The entry (the serialized ModelProto) is keyed by everything the export reads: the exporter's code
and the file that holds both exporters (their opsets and options), the versions of torch, onnx and
onnxscript, the model's state (state_key: its classes' code, parameters, buffers, attributes), the
inputs, and the model's own output on them (whatever changes its forward, a patched torch function
or a helper in another file, changes it). A model whose state cannot be described, or whose
parameters exceed LIMIT_BYTES (the entry would be as large), is exported afresh each time.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from accuracy.reference import cache as refcache
from accuracy.workflows.model.state_key import (
    Key,
    Uncacheable,
    code_digest,
    global_hooks,
    put_module,
    put_tensor,
    source_digest,
)

KEY_FORMAT = 1
LIMIT_BYTES = 256 * 2**20  # resnet18 (45 MB) is kept, a BERT-base (440 MB) is exported again


@functools.cache
def _versions() -> str:
    from accuracy.workflows.model import onnx_graph

    found = []
    for package in ("torch", "onnx", "onnxscript", "numpy"):
        try:
            found.append(f"{package}={importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{package} absent")
    return f"{';'.join(found)};{sys.version};{source_digest(onnx_graph)}"


def _output(model, inputs: dict) -> Any:
    """The model's first output on `inputs`, run as `record` runs it; Uncacheable where it fails."""
    from accuracy.workflows.model.trace import first_tensor, forward

    if any(m.training for m in model.modules()):  # a forward would move its batch norms' statistics
        raise Uncacheable("a module in training mode")
    try:
        return first_tensor(forward(model, inputs))
    except Exception as exc:  # a forward that fails here fails the export too, with its own words
        raise Uncacheable(f"the model's forward: {exc}") from None


def export_key(exporter: Callable, model, inputs: dict[str, np.ndarray]) -> str | None:
    """The key of `exporter(model, inputs)`; None where the model's state cannot be described."""
    import torch

    size = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    if size > LIMIT_BYTES:
        return None
    key = Key(f"onnx-export:{KEY_FORMAT}")
    try:
        if global_hooks():
            raise Uncacheable("a global forward hook")
        key.put("versions", _versions())
        key.put("exporter", f"{exporter.__module__}:{exporter.__qualname__}:{code_digest(exporter.__code__)}")
        key.put("default dtype", str(torch.get_default_dtype()))
        put_module(key, model)
        feeds = {name: torch.tensor(value) for name, value in inputs.items()}  # copies: the forward may change them
        for name, tensor in feeds.items():
            key.put("input", name)
            put_tensor(key, tensor)
        put_tensor(key, _output(model, feeds))
    except Uncacheable:
        return None
    return key.hash.hexdigest()


def cached_export(exporter: Callable, model, inputs: dict[str, np.ndarray]):
    """`exporter(model, inputs)` (an onnx.ModelProto), read from the reference cache where this
    export was made before, else made and stored there (up to LIMIT_BYTES)."""
    import onnx
    from google.protobuf.message import DecodeError

    key = export_key(exporter, model, inputs)
    stored = refcache.load_arrays(key) if key is not None else None
    if stored is not None and stored.keys() == {"onnx"}:
        with contextlib.suppress(DecodeError):  # an entry of another layout: exported again
            return onnx.load_from_string(stored["onnx"].tobytes())
    exported = exporter(model, inputs)
    if key is not None:
        raw = exported.SerializeToString()
        if len(raw) <= LIMIT_BYTES:
            refcache.store_arrays(key, {"onnx": np.frombuffer(raw, dtype=np.uint8)})
    return exported
