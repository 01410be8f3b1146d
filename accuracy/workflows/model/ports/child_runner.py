"""The child's side of a port in another process (child_process.py): run as a script, by path, in
an interpreter that may hold another torch and nothing of opbench, so it imports only torch,
safetensors and the standard library (opbench's own torchvision shim only where asked: the
parent's own environment).

`python -c 'runpy.run_path(THIS)' DIR` reads DIR/request.json (the factory MODULE:FUNCTION, train
mode, threads), DIR/weights.safetensors (the parent's state dict), DIR/inputs.safetensors (the
model's inputs by name) and DIR/activations.safetensors (`<key>/in0`, ...: each leaf call's inputs
as the port receives them, in the activations-file protocol), and writes DIR/result.safetensors:
`<key>` (that call rerun on those inputs), `e2e/<key>` and `e2e/output` (the whole model run here)
and `output`; DIR/result.json says which torch ran and on which ATen kernels. Any failure is one
line on stderr and exit status 1.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

MARK = "#"  # a module's second call is `<path>#2` (trace.call_key)


def _first_tensor(output):
    import torch

    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    if isinstance(output, (tuple, list)):
        return next((o for o in output if isinstance(o, torch.Tensor)), None)
    return None


def _model(request: dict, weights: dict):
    import importlib
    import os

    if request.get("same_environment"):
        from accuracy.workflows.model.torchvision_import import prepare_plain_imports

        prepare_plain_imports()
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module_name, _, name = request["factory"].partition(":")
    model = getattr(importlib.import_module(module_name), name)()
    model.load_state_dict(weights, strict=True)  # the parent's weights, whatever the factory drew
    return model.train(request["train"]).float()


def _forward(model, inputs: dict):
    """The model run on its inputs as opbench runs it (by keyword, no cache), recording each
    module call's arguments with their tensors taken out, and its first floating output."""
    import inspect

    import torch
    from torch.utils._pytree import tree_flatten

    templates: dict[str, tuple] = {}
    outputs: dict = {}
    counts: dict[str, int] = {}
    running: list[str] = []

    def before(path):
        def pre(module, args, kwargs):
            count = counts.get(path, 0)
            counts[path] = count + 1
            key = path if count == 0 else f"{path}{MARK}{count + 1}"
            flat, spec = tree_flatten((args, kwargs))
            slots = [i for i, leaf in enumerate(flat) if isinstance(leaf, torch.Tensor)]
            templates[key] = (module, spec, [None if i in slots else v for i, v in enumerate(flat)], slots)
            running.append(key)

        return pre

    def after(module, args, kwargs, output):
        key, out = running.pop(), _first_tensor(output)
        if out is not None and out.is_floating_point():
            outputs["e2e/" + key] = out.detach().clone()

    handles = []
    for path, module in model.named_modules():
        if path:
            handles.append(module.register_forward_pre_hook(before(path), with_kwargs=True))
            handles.append(module.register_forward_hook(after, with_kwargs=True))
    feeds = {k: v.float().clone() if v.is_floating_point() else v.clone() for k, v in inputs.items()}
    if "use_cache" in inspect.signature(model.forward).parameters and "use_cache" not in feeds:
        feeds["use_cache"] = False
    with torch.no_grad():
        out = _first_tensor(model(**feeds))
    for handle in handles:
        handle.remove()
    outputs["e2e/output"], outputs["output"] = out.detach().clone(), out.detach().clone()
    return templates, outputs


def _rerun(templates: dict, activations: dict) -> dict:
    """Each call the parent sent inputs for, called again as it was, on those inputs alone."""
    import torch
    from torch.utils._pytree import tree_unflatten

    outputs = {}
    for key, (module, spec, leaves, slots) in templates.items():
        names = [f"{key}/in{i}" for i in range(len(slots))]
        if not slots or any(n not in activations for n in names):
            continue
        tensors = [activations[n].clone() for n in names]  # fresh memory: on the file's, MKL rounds otherwise
        filled = list(leaves)
        for slot, tensor in zip(slots, tensors, strict=True):
            filled[slot] = tensor
        args, kwargs = tree_unflatten(filled, spec)
        with torch.no_grad():
            out = _first_tensor(module(*args, **kwargs))
        if out is not None:
            outputs[key] = out.detach().clone().contiguous()
    return outputs


def _litert(model, templates: dict, activations: dict, inputs: dict) -> tuple[dict, dict]:
    """LiteRT's outputs (litert_torch.convert, run by its interpreter): the leaves the parent sent
    inputs for, converted together as one program of independent parts (each alone where that
    fails), and the whole model once; and why a leaf has none."""
    import litert_torch
    import torch
    from torch.utils._pytree import tree_unflatten

    outputs, reasons, parts = {}, {}, []
    for key, (module, spec, leaves, slots) in templates.items():
        names = [f"{key}/in{i}" for i in range(len(slots))]
        if any(True for _ in module.children()) or not slots or any(n not in activations for n in names):
            continue
        args, kwargs = tree_unflatten([None if i in slots else v for i, v in enumerate(leaves)], spec)
        if kwargs or len(args) != len(slots) or any(a is not None for a in args):
            reasons[key] = "litert-torch converts a module called on tensors alone: it takes other arguments"
            continue
        parts.append((key, _out_of_place(module), [activations[n].clone() for n in names]))

    class Parts(torch.nn.Module):
        def __init__(self, chosen):
            super().__init__()
            self.leaves, self.sizes = torch.nn.ModuleList([m for _, m, _ in chosen]), [len(t) for *_, t in chosen]

        def forward(self, *tensors):
            outs, start = [], 0
            for leaf, size in zip(self.leaves, self.sizes, strict=True):
                outs.append(_first_tensor(leaf(*tensors[start : start + size])))
                start += size
            return tuple(outs)

    def run(chosen) -> None:
        feeds = tuple(t for *_, tensors in chosen for t in tensors)
        outs = litert_torch.convert(Parts(chosen).eval(), feeds)(*feeds)
        for (key, *_), out in zip(chosen, outs if isinstance(outs, (list, tuple)) else [outs], strict=True):
            outputs[key] = torch.as_tensor(out).contiguous()

    try:
        run(parts)
    except Exception:  # a leaf it cannot take: each converted alone, its failure its reason
        for part in parts:
            try:
                run([part])
            except Exception as exc:
                reasons[part[0]] = f"litert-torch cannot convert it alone: {_line(exc)}"
    names = list(inputs)

    class Whole(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *tensors):
            return _first_tensor(self.model(**dict(zip(names, tensors, strict=True))))

    feeds = tuple(v.float().clone() if v.is_floating_point() else v.clone() for v in inputs.values())
    whole = torch.as_tensor(litert_torch.convert(Whole().eval(), feeds)(*feeds))
    outputs["e2e/output"], outputs["output"] = whole.clone(), whole.clone()
    return outputs, reasons


def _out_of_place(module):
    """An in-place activation alone is a graph that writes its own input; the values are the same."""
    for m in module.modules():
        if getattr(m, "inplace", False):
            m.inplace = False
    return module


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def main(folder: Path) -> None:
    request = json.loads((folder / "request.json").read_text())
    started = time.perf_counter()
    import torch
    from safetensors.torch import load_file, save_file

    torch.set_num_threads(request["threads"])
    model = _model(request, load_file(folder / "weights.safetensors"))
    inputs, activations = load_file(folder / "inputs.safetensors"), load_file(folder / "activations.safetensors")
    templates, outputs = _forward(model, inputs)
    reasons: dict[str, str] = {}
    if request.get("convert") == "litert":
        outputs, reasons = _litert(model, templates, activations, inputs)
    else:
        outputs.update(_rerun(templates, activations))
    save_file({k: v.contiguous() for k, v in outputs.items()}, folder / "result.safetensors")
    facts = {
        "reasons": reasons,
        "torch": torch.__version__,
        "capability": torch.backends.cpu.get_cpu_capability(),
        "seconds": time.perf_counter() - started,
    }
    (folder / "result.json").write_text(json.dumps(facts))


if __name__ == "__main__":
    try:
        main(Path(sys.argv[1]))
    except BaseException as exc:  # the parent reads one line: what failed, in the child's words
        print(_line(exc), file=sys.stderr)
        sys.exit(1)
