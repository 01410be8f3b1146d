"""A model's conversions through the cache: an ONNX export, an ExecuTorch program, each made once
per model state and inputs, not once per port or run. The onnxruntime and onnxruntime-noopt ports
of one run export the same model, a `--onnx` file's names are read off the same export, and a rerun
with another port finds it: a TorchScript export took seconds, a dynamo export of a small decoder
3 s, and lowering the units of small_cnn to ExecuTorch 1.1 s here.

An entry (the serialized ModelProto, the .pte program) is keyed by everything the conversion reads:
the converter's code and the file that holds it (opsets, options, the lowering's patches), the
versions of the libraries and of Python, the model's state (state_key: its classes' code,
parameters, buffers, attributes), the inputs, and the model's own output on them (whatever changes
its forward, a patched torch function or a helper in another file, changes it). A model whose state
cannot be described, or whose parameters exceed LIMIT_BYTES (the entry would be as large), is
converted afresh each time. Entries live in the reference cache, or where OPBENCH_CONVERSION_CACHE
says (reference.cache.CONVERSIONS).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import sys
import types
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
def _versions(*packages: str) -> str:
    found = []
    for package in packages:
        try:
            found.append(f"{package}={importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{package} absent")
    return f"{';'.join(found)};{sys.version}"


def _output(model, run: Callable[[], Any]) -> Any:
    """The model's first output, as `run` computes it; Uncacheable where it fails."""
    from accuracy.workflows.model.trace import first_tensor

    if any(m.training for m in model.modules()):  # a forward would move its batch norms' statistics
        raise Uncacheable("a module in training mode")
    try:
        return first_tensor(run())
    except Exception as exc:  # a forward that fails here fails the conversion too, with its own words
        raise Uncacheable(f"the model's forward: {exc}") from None


def conversion_key(purpose: str, converter: str, model, feeds: dict[str, Any], run: Callable[[], Any]) -> str | None:
    """The key of converting `model` (fed the tensors `feeds`, whose output `run` computes) by the
    code and versions `converter` describes; None where the model's state cannot be described."""
    import torch

    size = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    if size > LIMIT_BYTES:
        return None
    key = Key(purpose)
    try:
        if global_hooks():
            raise Uncacheable("a global forward hook")
        key.put("converter", converter)
        key.put("default dtype", str(torch.get_default_dtype()))
        put_module(key, model)
        for name, tensor in feeds.items():
            key.put("input", name)
            put_tensor(key, tensor)
        put_tensor(key, _output(model, run))
    except Uncacheable:
        return None
    return key.hash.hexdigest()


def load_conversion(key: str | None, name: str) -> bytes | None:
    """The bytes stored as `name` under `key` by store_conversion, or None."""
    stored = refcache.load_arrays(key, refcache.CONVERSIONS) if key is not None else None
    return stored[name].tobytes() if stored is not None and stored.keys() == {name} else None


def store_conversion(key: str | None, name: str, raw: bytes) -> None:
    if key is not None and len(raw) <= LIMIT_BYTES:
        refcache.store_arrays(key, {name: np.frombuffer(raw, dtype=np.uint8)}, refcache.CONVERSIONS)


def export_key(exporter: Callable, model, inputs: dict[str, np.ndarray]) -> str | None:
    """The key of `exporter(model, inputs)`; None where the model's state cannot be described."""
    import torch

    from accuracy.workflows.model import onnx_graph
    from accuracy.workflows.model.trace import forward

    converter = (
        f"{_versions('torch', 'onnx', 'onnxscript', 'numpy')};{source_digest(onnx_graph)};"
        f"{exporter.__module__}:{exporter.__qualname__}:{code_digest(exporter.__code__)}"
    )
    feeds = {name: torch.tensor(value) for name, value in inputs.items()}  # copies: the forward may change them
    return conversion_key(f"onnx-export:{KEY_FORMAT}", converter, model, feeds, lambda: forward(model, feeds))


def cached_export(exporter: Callable, model, inputs: dict[str, np.ndarray]):
    """`exporter(model, inputs)` (an onnx.ModelProto), read from the cache where this export was
    made before, else made and stored there (up to LIMIT_BYTES)."""
    import onnx
    from google.protobuf.message import DecodeError

    key = export_key(exporter, model, inputs)
    raw = load_conversion(key, "onnx")
    if raw is not None:
        with contextlib.suppress(DecodeError):  # an entry of another layout: exported again
            return onnx.load_from_string(raw)
    exported = exporter(model, inputs)
    store_conversion(key, "onnx", exported.SerializeToString())
    return exported


def cached_program(
    lower: Callable[[], bytes], describe: str, sources: tuple[types.ModuleType, ...], model, example: tuple
) -> bytes:
    """The ExecuTorch program (.pte bytes) `lower()` makes of `model` on the positional `example`,
    read from the cache where it was made before: `describe` and the files of `sources` hold what
    else the lowering reads (its kernels, its patches)."""
    import torch

    converter = f"{_versions('torch', 'executorch', 'numpy')};{source_digest(*sources)};{describe}"
    feeds = {str(i): t for i, t in enumerate(example)}  # hashed only: the key's forward runs on copies

    def run():
        with torch.no_grad():
            return model(*(t.clone() for t in example))

    key = conversion_key(f"executorch-program:{KEY_FORMAT}", converter, model, feeds, run)
    program = load_conversion(key, "pte")
    if program is None:
        program = lower()
        store_conversion(key, "pte", program)
    return program
