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
        from accuracy.backends.torchvision_import import prepare_plain_imports

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


def main(folder: Path) -> None:
    request = json.loads((folder / "request.json").read_text())
    started = time.perf_counter()
    import torch
    from safetensors.torch import load_file, save_file

    torch.set_num_threads(request["threads"])
    model = _model(request, load_file(folder / "weights.safetensors"))
    templates, outputs = _forward(model, load_file(folder / "inputs.safetensors"))
    outputs.update(_rerun(templates, load_file(folder / "activations.safetensors")))
    save_file({k: v.contiguous() for k, v in outputs.items()}, folder / "result.safetensors")
    facts = {
        "torch": torch.__version__,
        "capability": torch.backends.cpu.get_cpu_capability(),
        "seconds": time.perf_counter() - started,
    }
    (folder / "result.json").write_text(json.dumps(facts))


if __name__ == "__main__":
    try:
        main(Path(sys.argv[1]))
    except BaseException as exc:  # the parent reads one line: what failed, in the child's words
        text = str(exc).strip().splitlines()
        print(f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": "), file=sys.stderr)
        sys.exit(1)
