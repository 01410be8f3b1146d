"""Ports that are the reference's own modules: in another dtype, thread count or device, or each
leaf traced (TorchScript, run from C++ by LibTorch) or torch.compile'd."""

from __future__ import annotations

import subprocess

import numpy as np

from accuracy.backends import get_backend
from accuracy.backends.libtorch import LibTorchBackend
from accuracy.backends.pytorch import tensor_to_numpy as to_numpy
from accuracy.core.dtypes import FORMATS
from accuracy.core.errors import OpbenchError, first_line
from accuracy.judge.precision import TF32
from accuracy.workflows.model.ports.base import EndToEnd, Port
from accuracy.workflows.model.trace import LayerCall, converted, leaf_modules, record, run_calls, typed_inputs
from accuracy.workflows.model.unit import Unit, nested_units, port_inputs

SCRIPT_FROM_CPP = "TorchScript from C++ (LibTorch)"
SCRIPT_IN_PROCESS = "TorchScript in-process ({})"  # why C++ is not there: "no C++ compiler"


def _ported_leaf(fn, original):
    """A leaf that runs `fn` (a traced or compiled module) in place of `original`, holding the
    original's parameters and buffers so that code reading the model's own (a transformers
    model's `.dtype`) still finds them."""
    import torch

    class Ported(torch.nn.Module):
        ported = True  # already the port's: a model's copy keeps it as it is

        def __init__(self):
            super().__init__()
            self.__dict__["fn"] = fn  # not a child: the stand-in stays a leaf with the same path
            for name, parameter in original.named_parameters(recurse=False):
                self.register_parameter(name, parameter)
            for name, buffer in original.named_buffers(recurse=False):
                self.register_buffer(name, buffer)
            self.__dict__["original"] = original  # its plain attributes, read from here on

        def forward(self, *args, **kwargs):
            return self.fn(*args, **kwargs)

        def __getattr__(self, name: str):
            """The original's plain attributes too: Whisper's encoder reads its convolutions' `stride`."""
            try:
                return super().__getattr__(name)
            except AttributeError:
                if "original" not in self.__dict__:
                    raise
                return getattr(self.__dict__["original"], name)

    return Ported()


class TorchPort(Port):
    """The reference's own modules, in another dtype, thread count or device, or traced / compiled."""

    def __init__(
        self,
        name: str,
        model,
        description: str,
        dtype: str = "float32",
        device: str = "cpu",
        threads=None,
        wrap=None,
        tf32=False,
        traced=False,
    ):
        self.name, self.model, self.description, self.fmt = name, model, description, FORMATS[dtype]
        self.device, self.threads, self.wrap = device, threads, wrap
        self.products = TF32 if tf32 else None
        self.traced = traced  # TorchScript: a module called on tensors alone, returning one tensor
        self._layers: dict[str, object] = {}

    def _context(self):
        import contextlib

        import torch

        stack = contextlib.ExitStack()
        if self.threads:
            stack.enter_context(get_backend("torch").thread_limit(self.threads))
        if self.device == "cuda":
            for flags in (torch.backends.cuda.matmul, torch.backends.cudnn):
                previous = flags.allow_tf32
                flags.allow_tf32 = self.products is TF32
                stack.callback(setattr, flags, "allow_tf32", previous)
        stack.enter_context(torch.no_grad())
        return stack

    def _torch_dtype(self):
        import torch

        return getattr(torch, self.fmt.name)

    def units(self, calls: list[LayerCall]) -> list[Unit]:
        units = nested_units(calls)
        if self.traced:
            for unit in units:
                call = unit.calls[0]
                if not unit.reason and not call.tensors_only:
                    unit.reason = "TorchScript traces a module called on tensors alone: it takes other arguments"
                elif not unit.reason and not call.returns_tensor:
                    unit.reason = "the C++ runner takes a module returning one tensor: it returns a tuple"
        return units

    def _layer(self, call: LayerCall, inputs: list):
        if call.path not in self._layers:  # a module called twice is traced or compiled once
            module = converted(call.module, self._torch_dtype(), self.device)
            self._layers[call.path] = self.wrap(module, tuple(inputs)) if self.wrap else module
        return self._layers[call.path]

    def _on_device(self, tensors: list) -> list:
        return [t.to(self.device) for t in port_inputs(tensors, self.fmt)]

    def _stand_ins(self) -> dict[int, object]:
        """The model's leaves that this port traced or compiled, by id, each as its stand-in
        holding the model's own weights where they are already in the port's dtype and on its
        device: the model's copy then holds none of theirs (Qwen2.5-0.5B's: 2 GB)."""
        dtype, stand_ins = self._torch_dtype(), {}
        for path, leaf in leaf_modules(self.model).items() if self.wrap else ():
            held = [*leaf.parameters(recurse=False), *leaf.buffers(recurse=False)]
            if path in self._layers and all(t.dtype == dtype and t.device.type == self.device for t in held):
                stand_ins[id(leaf)] = _ported_leaf(self._layers[path], leaf)
        return stand_ins

    def isolated(self, unit: Unit, inputs: list) -> np.ndarray:
        with self._context():
            args = self._on_device(inputs)
            # tracing runs the layer on its example: copies, which an in-place layer may overwrite
            layers = [self._layer(c, [a.clone() for a in args] if i == 0 else [None]) for i, c in enumerate(unit.calls)]
            return to_numpy(run_calls(unit.calls, layers, args).to("cpu"))

    def end_to_end(self, inputs, units) -> EndToEnd:
        model = converted(self.model, self._torch_dtype(), self.device, self._stand_ins())
        if self.wrap:
            for path in leaf_modules(model):
                if path in self._layers and not getattr(model.get_submodule(path), "ported", False):
                    model.set_submodule(path, _ported_leaf(self._layers[path], model.get_submodule(path)))
        feeds = typed_inputs(inputs, self.fmt)
        with self._context():
            calls, out = record(model, {k: v.to(self.device) for k, v in feeds.items()})
        return EndToEnd(
            {c.key: to_numpy(c.output.to("cpu")) for c in calls if c.output is not None},
            to_numpy(out.to("cpu")),
            {c.key: [to_numpy(t.to("cpu")) for t in c.inputs] for c in calls},
        )


def _trace(module, example: tuple):
    import torch

    try:
        return torch.jit.trace(module, example, check_trace=False)
    except Exception as exc:
        raise OpbenchError(f"torchscript: {type(module).__name__} does not trace: {exc}".splitlines()[0]) from None


def torchscript(name: str, model, inputs) -> TorchPort:
    """Each leaf traced in Python, saved, and loaded and run from C++ by LibTorch (torch::jit::load,
    Module::forward), as a C++ application runs a TorchScript model; in-process where LibTorch
    cannot be built here, and the port's description says which ran."""
    libtorch = get_backend("libtorch")
    assert isinstance(libtorch, LibTorchBackend)
    missing = libtorch.missing()
    if missing is None:
        try:
            libtorch.preload()  # build (once per torch build) or load the cached build
        except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:  # cpp_extension's failed build
            missing = f"the LibTorch build failed: {first_line(exc, typed=True)}"
    if missing is not None:
        return TorchPort(name, model, SCRIPT_IN_PROCESS.format(missing), wrap=_trace, traced=True)
    return TorchPort(
        name, model, SCRIPT_FROM_CPP, wrap=lambda m, example: libtorch.script(_trace(m, example)), traced=True
    )


def _compile(module, example: tuple):
    import torch

    return torch.compile(module, dynamic=False)


def compiled(name: str, model, inputs) -> TorchPort:
    return TorchPort(name, model, "each leaf torch.compile'd (inductor)", wrap=_compile)


def low_precision(name: str, model, inputs) -> TorchPort:
    return TorchPort(name, model, f"PyTorch, weights and activations in {name}", dtype=name)


def threads(name: str, model, inputs) -> TorchPort:
    count = name.partition(":")[2]
    return TorchPort(name, model, f"PyTorch on {count} intra-op threads", threads=int(count))


def cuda(name: str, model, inputs, tf32: bool) -> TorchPort:
    described = "on: matmuls and convolutions judged at TF32 precision" if tf32 else "off"
    return TorchPort(name, model, f"PyTorch on CUDA, TF32 {described}", device="cuda", tf32=tf32)
