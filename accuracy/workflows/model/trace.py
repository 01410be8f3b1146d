"""The reference model: its factory, its inputs, and the leaf calls of one forward pass.

The reference is a torch `nn.Module` from a factory (MODULE:FUNCTION). Forward hooks on its leaf
modules record, per call, the tensors it received and gave back. A module called more than once
in a forward pass (torchvision's BasicBlock calls its `relu` twice) gives one key per call:
`layer1.0.relu`, then `layer1.0.relu#2`, ...
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from accuracy.backends.pytorch import torch_dtype
from accuracy.core.dtypes import FORMATS, FloatFormat
from accuracy.core.errors import OpbenchError
from accuracy.core.loading import load_function
from accuracy.core.waiting import said_while_waiting
from accuracy.reference.inputs import normal, seed_for
from accuracy.workflows.array_files import parse_shapes, read_arrays

CALL_MARK = "#"
OUTPUT_KEY = "output"  # the activations file's key for the model's output (activations_file.py)


@dataclass(frozen=True)
class CallTemplate:
    """How a module was called, its tensors taken out: the pytree of (args, kwargs), its leaves with
    None at the tensor `slots`. Filled with other tensors, it calls the module again the same way
    (keyword tensors, masks, position embeddings, flags and all)."""

    spec: Any
    leaves: list
    slots: list[int]

    def filled(self, tensors: list) -> tuple[tuple, dict]:
        from torch.utils._pytree import tree_unflatten

        leaves = list(self.leaves)
        for slot, tensor in zip(self.slots, tensors, strict=True):
            leaves[slot] = tensor
        args, kwargs = tree_unflatten(leaves, self.spec)
        return tuple(args), dict(kwargs)


# what a call may take besides tensors and still be called again the same way: plain values
PLAIN = (type(None), bool, int, float, str)


@dataclass
class LayerCall:
    """One call of a module: its path, the call's key, the tensors in (positional, then keyword, in
    the order of torch's pytree flattening of (args, kwargs): `<key>/in0`, `/in1`, ...) and its
    first tensor output. `parent` is the key of the call it ran inside (None at the top). A call
    that cannot be judged (no tensor output, state objects among its arguments) has `reason`: it
    is listed, never skipped silently."""

    key: str
    path: str
    module: Any  # torch.nn.Module
    inputs: list  # torch tensors, as received, copied before the call
    output: Any  # torch tensor, or None
    producers: list[str | None] = field(default_factory=list)  # the leaf call whose output each input is
    reason: str = ""
    template: CallTemplate | None = None
    parent: str | None = None
    leaf: bool = True
    returns_tensor: bool = True  # its output is one tensor, not a tuple or a model output holding it
    more_outputs: list = field(default_factory=list)  # its tensor outputs after the first (`<key>/out1`, ...)

    @property
    def kind(self) -> str:
        return type(self.module).__name__

    @property
    def tensors_only(self) -> bool:
        """Called on positional tensors alone: what a converter that traces a module can take."""
        if self.template is None:
            return True
        args, kwargs = self.template.filled(self.inputs)
        return not kwargs and len(args) == len(self.inputs)

    def run(self, module, tensors: list):
        """`module` called as this call was, on `tensors`: its first tensor output."""
        if self.template is None:
            return first_output(module(*tensors))
        args, kwargs = self.template.filled(tensors)
        return first_output(module(*args, **kwargs))


# module names the activations file's own keys use: a top-level module named so is keyed `%NAME`
RESERVED_NAMES = (OUTPUT_KEY, "e2e")


def escaped_path(path: str) -> str:
    """A module path as a key: `%`, `/` and `#` (the format's own) percent-encoded, and a top-level
    `output` (Meta's Llama names its head so) or `e2e` keyed `%output`, `%e2e`. Such models were
    refused; the path itself is kept (LayerCall.path) for finding the module."""
    text = path.replace("%", "%25").replace("/", "%2F").replace(CALL_MARK, "%23")
    return f"%{text}" if text in RESERVED_NAMES else text


def call_key(path: str, index: int) -> str:
    key = escaped_path(path)
    return key if index == 0 else f"{key}{CALL_MARK}{index + 1}"


def leaf_modules(model) -> dict[str, Any]:
    return {name: m for name, m in model.named_modules() if name and not any(True for _ in m.children())}


def record(model, inputs: dict) -> tuple[list[LayerCall], Any]:
    """Every module call of one forward pass, parents before their children, and the model's output.

    A call's inputs are copied by a forward pre-hook, before the module runs, so that an in-place
    module (`Hardswish(inplace=True)`, `x.mul_(2)`) is fed and judged on what it really received;
    the model gets copies of `inputs`, which it may overwrite without touching the caller's arrays.
    A forward that takes `use_cache` runs with it False: a cache is state that a unit's rerun
    would change."""
    import torch
    from torch.utils._pytree import tree_flatten

    calls: list[LayerCall] = []
    counts: dict[str, int] = {}
    made_by: dict[int, str] = {}
    running: list[LayerCall] = []
    keep: list = []  # outputs stay alive so that ids are not reused within the pass
    leaves = leaf_modules(model)

    def before(path):
        def pre(module, args, kwargs):
            flat, spec = tree_flatten((args, kwargs))
            slots = [i for i, leaf in enumerate(flat) if isinstance(leaf, torch.Tensor)]
            tensors = [flat[i] for i in slots]
            state = sorted({type(v).__name__ for v in flat if not isinstance(v, (torch.Tensor, *PLAIN))})
            key = call_key(path, counts.get(path, 0))
            counts[path] = counts.get(path, 0) + 1
            call = LayerCall(
                key,
                path,
                module,
                [t.detach().clone() for t in tensors],
                None,
                [made_by.get(id(t)) for t in tensors],
                f"it takes a {', '.join(state)}: state that a rerun on its own would change" if state else "",
                CallTemplate(spec, [None if isinstance(v, torch.Tensor) else v for v in flat], slots),
                running[-1].key if running else None,
                path in leaves,
            )
            calls.append(call)
            running.append(call)

        return pre

    def after(module, args, kwargs, output):
        call = running.pop()
        call.returns_tensor = isinstance(output, torch.Tensor)
        out = first_output(output)
        call.more_outputs = [t.detach().clone() for t in tensor_outputs(output)[1:]]
        if out is None:
            call.reason = call.reason or f"its output is a {type(output).__name__} holding no tensor"
        elif out.is_complex():
            call.reason = f"its output is complex ({out.dtype}): opbench judges real floating outputs"
        elif not out.is_floating_point():
            call.reason = f"its output is {str(out.dtype).removeprefix('torch.')}: no rounding to judge"
            keep.append(out)
            call.output = out.detach().clone()
        else:
            keep.append(out)
            call.output = out.detach().clone()
            if call.leaf:
                made_by[id(out)] = call.key

    handles = []
    for path, module in model.named_modules():
        if path:
            handles += [
                module.register_forward_pre_hook(before(path), with_kwargs=True),
                module.register_forward_hook(after, with_kwargs=True),
            ]
    try:
        out = forward(model, inputs)
    finally:
        for h in handles:
            h.remove()
    return calls, first_tensor(out)


def forward(model, inputs: dict):
    """The model's forward as opbench runs it: on copies of `inputs` (which it may overwrite), by
    keyword, without gradients, and with `use_cache` False where it takes one."""
    import inspect

    import torch

    feeds = {k: torch.as_tensor(v).clone() for k, v in inputs.items()}
    if "use_cache" in inspect.signature(model.forward).parameters and "use_cache" not in feeds:
        feeds["use_cache"] = False  # type: ignore[assignment]
    with torch.no_grad():
        return model(**feeds)


def first_output(output):
    """A module's first tensor output: the tensor, a tuple's or list's first tensor, or a
    transformers output's first tensor field; None where it gives none."""
    import torch

    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    if isinstance(output, (tuple, list)):
        return next((o for o in output if isinstance(o, torch.Tensor)), None)
    return None


def tensor_outputs(output) -> list:
    """A module's tensor outputs in order: a tuple's, a list's or a transformers output's tensor
    fields, one level deep (a cache object or a nested tuple of past keys is no layer output)."""
    import torch

    if isinstance(output, torch.Tensor):
        return [output]
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    if isinstance(output, (tuple, list)):
        return [o for o in output if isinstance(o, torch.Tensor)]
    return []


def first_tensor(out):
    """A model's output tensor: the tensor itself, a tuple's first, or a transformers output's first field."""
    import torch

    if isinstance(out, torch.Tensor):
        if out.is_complex():
            raise OpbenchError(f"the model's output is complex ({out.dtype}): opbench judges real floating outputs")
        return out.detach()
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0].detach()
    if hasattr(out, "to_tuple"):
        return first_tensor(out.to_tuple())
    raise OpbenchError(f"the model returned a {type(out).__name__}, not a tensor (or a tuple starting with one)")


def converted(module, dtype, device: str = "cpu", stand_ins: dict[int, Any] | None = None):
    """A copy of `module` with its floating parameters and buffers in `dtype` on `device`, each
    converted straight from the original: a whole copy first, converted after, held the model
    once more at its own precision (Qwen2.5-0.5B's float64 reference: 2 GB beside its 4).
    `stand_ins`: submodules put in the copy as they are, in place of those whose id they are
    keyed by (a port's own leaves: their weights are not copied only to be replaced)."""
    import torch

    memo: dict[int, Any] = dict(stand_ins or {})
    replaced = [m for m in module.modules() if id(m) in memo]
    kept = {id(t) for m in replaced for t in (*m.parameters(), *m.buffers())}  # theirs are not copied
    for tensor in (*module.parameters(), *module.buffers()):
        if tensor.is_floating_point() and id(tensor) not in memo and id(tensor) not in kept:
            copied = tensor.detach().to(device=device, dtype=dtype, copy=True)
            is_parameter = isinstance(tensor, torch.nn.Parameter)
            memo[id(tensor)] = torch.nn.Parameter(copied, tensor.requires_grad) if is_parameter else copied
    return copy.deepcopy(module, memo).to(device=device, dtype=dtype)


def converted_in_place(module, dtype, held, others: set[int]) -> bool:
    """`module`'s floating parameters and buffers replaced by new tensors rounded to `dtype` and
    held in `held`, as `converted(module, dtype).to(held)` holds them, without copying the module:
    for a module that is the caller's throwaway copy (a cause's changed reference, evaluated once),
    whose second copy cost the cause search most of its time. No tensor is changed in place (a
    change may share one with the model). False, and nothing done, where a copy is needed to get
    the same: a submodule in `others` (ids of the model's own), a module with a conversion of its
    own (`_apply`: an RNN's flat weights), a complex tensor."""
    import torch

    modules = list(module.modules())
    stores = [store for m in modules for store in (m._parameters, m._buffers)]
    tensors = [t for store in stores for t in store.values() if t is not None]
    if (
        any(id(m) in others or type(m)._apply is not torch.nn.Module._apply for m in modules)
        or any(t.is_complex() for t in tensors)
    ):  # fmt: skip
        return False
    rounded: dict[int, Any] = {}  # by the original's id: tied parameters stay tied
    for store in stores:
        for name, tensor in store.items():
            if tensor is None or not tensor.is_floating_point():
                continue
            if id(tensor) not in rounded:
                value = tensor.detach().to(device="cpu", dtype=dtype, copy=True).to(held)
                is_parameter = isinstance(tensor, torch.nn.Parameter)
                rounded[id(tensor)] = torch.nn.Parameter(value, tensor.requires_grad) if is_parameter else value
            store[name] = rounded[id(tensor)]
    return True


def run_calls(calls: list[LayerCall], modules: list, tensors: list):
    """Calls judged as one unit, each on `modules` (copies of theirs): the first as it was called,
    on `tensors`; each next one on the previous one's output alone (the leaves one fused port node
    covers)."""
    out = calls[0].run(modules[0], tensors)
    for module in modules[1:]:
        out = first_output(module(out))
    return out


def float64_throughout():
    """A context in which a model's own casts to float32 or lower compute in float64 instead:
    `.float()`, `.half()`, `.bfloat16()`, `.to(torch.float32)`, `.type(...)` and every `dtype=`
    argument naming a narrower float (HF's `LlamaRMSNorm` casts to float32 on purpose, its rotary
    embedding computes in float32 under `autocast(enabled=False)`). The reference model and each
    unit's float64 evaluation run in it, so that the float64 reference is float64 everywhere.
    Tensors made without a dtype are float64 there too: transformers' MPT and XGLM fill a mask
    with float64's minimum by `torch.full` into the default dtype, which float32 cannot hold."""
    import torch
    from torch.overrides import TorchFunctionMode

    narrower = {torch.float32, torch.float16, torch.bfloat16}
    to_double = {torch.Tensor.float, torch.Tensor.half, torch.Tensor.bfloat16}

    def widened(value):
        return torch.float64 if isinstance(value, torch.dtype) and value in narrower else value

    class Float64Throughout(TorchFunctionMode):
        def __enter__(self):
            self.default = torch.get_default_dtype()
            torch.set_default_dtype(torch.float64)
            return super().__enter__()

        def __exit__(self, *exc):
            torch.set_default_dtype(self.default)
            return super().__exit__(*exc)

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in to_double:
                return args[0].double()
            if func in (torch.Tensor.to, torch.Tensor.type):
                args = tuple(widened(a) for a in args)
            if "dtype" in kwargs:
                kwargs = {**kwargs, "dtype": widened(kwargs["dtype"])}
            return func(*args, **kwargs)

    return Float64Throughout()


def typed_inputs(inputs: dict[str, np.ndarray], fmt: FloatFormat) -> dict:
    """The model inputs as torch tensors, floats in `fmt` (integer ids and masks as they are)."""
    import torch

    # copies (torch.tensor): a forward that changes its input must not change the caller's arrays
    return {
        k: torch.tensor(v).to(torch_dtype(fmt)) if np.issubdtype(v.dtype, np.floating) else torch.tensor(v)
        for k, v in inputs.items()
    }


def run_in(model, inputs: dict[str, np.ndarray], fmt: FloatFormat) -> tuple[list[LayerCall], Any]:
    """The model with its parameters and floating inputs in `fmt`: the float64 reference run (its
    own casts to narrower floats kept at float64), and PyTorch's own output at a port's dtype (the
    yardstick for the port's end-to-end error)."""
    import contextlib

    with float64_throughout() if fmt.name == "float64" else contextlib.nullcontext():
        return record(converted(model, torch_dtype(fmt)), typed_inputs(inputs, fmt))


# --- the factory and its inputs ------------------------------------------------------------


def load_model(spec: str, train: bool = False):
    """The module the factory MODULE:FUNCTION returns, in eval mode unless `train`."""
    import torch

    from accuracy.workflows.model.torchvision_import import prepare_plain_imports

    prepare_plain_imports()
    with said_while_waiting(f"importing the model's module: {spec.partition(':')[0]}"):
        factory = load_function(spec, "model")
    try:
        with said_while_waiting(f"building the model: {spec}"):
            model = factory()
    except SystemExit as exc:  # user code must not end opbench silently, with its exit status
        raise OpbenchError(f"{spec}: the factory called sys.exit({exc.code!r})") from None
    except Exception as exc:
        raise OpbenchError(f"{spec}: the factory failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(model, torch.nn.Module):
        raise OpbenchError(f"{spec}: the factory returned a {type(model).__name__}, not a torch.nn.Module")
    return model.train(train)


def generated_inputs(text: str) -> dict[str, np.ndarray]:
    """NAME=D1xD2x...[,NAME=...]: standard normal float32 arrays from the suite's seeded PCG64
    (a stable seed per name and shape), for a model whose inputs are plain floats; the shapes are
    checked against the size limits before anything is allocated (array_files.parse_shapes)."""
    arrays = {}
    for name, shape in parse_shapes(text).items():
        rng = np.random.Generator(np.random.PCG64(seed_for(f"model:{name}", 0, "x".join(map(str, shape)))))
        arrays[name] = FORMATS["float32"].round(normal(rng, shape)).astype(np.float32)
    return arrays


def model_inputs(path: Path | str) -> dict[str, np.ndarray]:
    """The model's inputs by argument name: a file (.npz, .safetensors or .pt), or shapes to
    generate (`x=1x3x224x224`)."""
    generate = not Path(path).exists() and "=" in str(path)
    arrays = generated_inputs(str(path)) if generate else read_arrays(path)
    if not arrays:
        raise OpbenchError(f"{path}: holds no arrays")
    empty = next((name for name, a in arrays.items() if np.size(a) == 0), None)
    if empty is not None:  # no element to judge (a 0 in a shape); the exact GEMM took it to a traceback
        raise OpbenchError(
            f"{path}: {empty} has shape {tuple(np.shape(arrays[empty]))}, no elements: nothing to compare"
        )
    return arrays


def run_reference(model, inputs: dict[str, np.ndarray], source: str) -> tuple[list[LayerCall], Any]:
    """The reference forward pass; inputs the model cannot take (shape, names) are bad input."""
    if not leaf_modules(model):
        raise OpbenchError(
            f"{source}: the model is a single {type(model).__name__} with no submodules: there are no layers to "
            "compare; judge it with opbench check (a registry op) or check --fn, or wrap it in an nn.Sequential"
        )
    try:
        calls, out = record(model, inputs)
    except OpbenchError:
        raise
    except SystemExit as exc:
        raise OpbenchError(f"{source}: the model's forward called sys.exit({exc.code!r})") from None
    except Exception as exc:
        shapes = ", ".join(f"{k} {tuple(v.shape)}" for k, v in inputs.items())
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise OpbenchError(f"{source}: the model cannot take inputs {shapes}: {type(exc).__name__}: {text}") from None
    if not calls:
        raise OpbenchError(f"{source}: the model called no leaf module; nothing to compare layer by layer")
    return calls, out
