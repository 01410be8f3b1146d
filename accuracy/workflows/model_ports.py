"""Ports of a reference model: the same layers run elsewhere, in isolation and end to end.

A port answers two questions for `opbench model`:
- `isolated(unit, inputs)`: the port's output for one unit (a leaf layer, or the layers one fused
  port node covers) given *the same inputs* the reference layer received, rounded to the port's
  dtype: the error that unit introduces;
- `end_to_end(inputs)`: every unit's output when the whole port runs on the model input: the
  error each layer inherits.

Built-in ports: `onnxruntime` / `onnxruntime-noopt` (torch.onnx.export, graph optimizations on /
off), `torchscript` (each leaf traced, then run from C++ by LibTorch: torch::jit::load and
forward; in-process where no C++ compiler is), `compile` (each leaf torch.compile'd),
`bfloat16` / `float16` (weights and activations), `threads:N`, and `cuda` / `cuda-tf32` where a
GPU is. Ports brought by the user: an activations file from any runtime, or a Keras model with a
mapping from its layers to the torch module paths.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field

import numpy as np

from accuracy.backends import get_backend
from accuracy.backends.libtorch import LibTorchBackend
from accuracy.core.dtypes import FORMATS, FloatFormat, format_of
from accuracy.core.errors import OpbenchError
from accuracy.judge.precision import TF32
from accuracy.workflows.check import _first_line
from accuracy.workflows.model_activations import (
    INPUT_SUFFIX,
    OUTPUT_KEY,
    LayerCall,
    composed,
    converted,
    leaf_modules,
    record,
    to_numpy,
)

FLOAT32 = FORMATS["float32"]
SCRIPT_FROM_CPP = "TorchScript from C++ (LibTorch)"
SCRIPT_IN_PROCESS = "TorchScript in-process ({})"  # why C++ is not there: "no C++ compiler"
DEFAULT_PORTS = ("onnxruntime", "onnxruntime-noopt", "torchscript")
GPU_PORTS = ("cuda", "cuda-tf32")  # added to the defaults where a GPU is
PORT_NAMES = (
    "onnxruntime",
    "onnxruntime-noopt",
    "torchscript",
    "compile",
    "bfloat16",
    "float16",
    "threads:N",
    "cuda",
    "cuda-tf32",
)


@dataclass
class Unit:
    """Layers a port computes as one piece, judged as one; `reason` says why it is not compared."""

    calls: list[LayerCall]
    reason: str = ""
    detail: dict = field(default_factory=dict)  # port-specific: the ONNX tensors it reads and gives

    @property
    def key(self) -> str:
        return self.calls[0].key

    @property
    def covers(self) -> list[str]:
        return [c.key for c in self.calls]

    @property
    def last(self) -> str:
        return self.calls[-1].key


def leaf_units(calls: list[LayerCall]) -> list[Unit]:
    return [Unit([c]) for c in calls]


def _is_float(t) -> bool:
    return t.is_floating_point()


def port_inputs(tensors: list, fmt: FloatFormat) -> list:
    """The reference's tensors as the port receives them: floats rounded to its dtype."""
    import torch

    dtype = getattr(torch, fmt.name)
    return [t.to(dtype) if _is_float(t) else t for t in tensors]


class Port:
    name: str
    description: str  # what runs, in words: the report says it next to the port's name
    fmt: FloatFormat = FLOAT32
    products: FloatFormat | None = None  # the format its matmuls and convolutions round their inputs to (TF32)

    def units(self, calls: list[LayerCall]) -> list[Unit]:
        return leaf_units(calls)

    def isolated(self, unit: Unit, inputs: list) -> np.ndarray:
        raise NotImplementedError

    def end_to_end(self, inputs: dict[str, np.ndarray], units: list[Unit]) -> tuple[dict, dict, np.ndarray]:
        """(unit outputs by layer key, port inputs by layer key (lists; may be empty), model output)."""
        raise NotImplementedError


def _ported_leaf(fn, original):
    """A leaf that runs `fn` (a traced or compiled module) in place of `original`, holding the
    original's parameters and buffers so that code reading the model's own (a transformers
    model's `.dtype`) still finds them."""
    import torch

    class Ported(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.__dict__["fn"] = fn  # not a child: the stand-in stays a leaf with the same path
            self._parameters.update(original._parameters)
            self._buffers.update(original._buffers)

        def forward(self, *args):
            return self.fn(*args)

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
    ):
        self.name, self.model, self.description, self.fmt = name, model, description, FORMATS[dtype]
        self.device, self.threads, self.wrap = device, threads, wrap
        self.products = TF32 if tf32 else None
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

    def _layer(self, call: LayerCall, inputs: list):
        if call.path not in self._layers:
            module = converted(call.module, self._torch_dtype(), self.device)
            self._layers[call.path] = self.wrap(module, tuple(inputs)) if self.wrap else module
        return self._layers[call.path]

    def _on_device(self, tensors: list) -> list:
        return [t.to(self.device) for t in port_inputs(tensors, self.fmt)]

    def isolated(self, unit: Unit, inputs: list) -> np.ndarray:
        with self._context():
            args = self._on_device(inputs)
            layers = [self._layer(c, args if i == 0 else [None]) for i, c in enumerate(unit.calls)]
            return to_numpy(composed(layers)(*args).to("cpu"))

    def end_to_end(self, inputs, units):
        import torch

        model = converted(self.model, self._torch_dtype(), self.device)
        if self.wrap:
            for path in leaf_modules(model):
                if path in self._layers:
                    model.set_submodule(path, _ported_leaf(self._layers[path], model.get_submodule(path)))
        feeds = {
            k: (
                torch.as_tensor(v).to(self._torch_dtype())
                if np.issubdtype(v.dtype, np.floating)
                else torch.as_tensor(v)
            )
            for k, v in inputs.items()
        }
        with self._context():
            calls, out = record(model, {k: v.to(self.device) for k, v in feeds.items()})
        outputs = {c.key: to_numpy(c.output.to("cpu")) for c in calls}
        received = {c.key: [to_numpy(t.to("cpu")) for t in c.inputs] for c in calls}
        return outputs, received, to_numpy(out.to("cpu"))


def _trace(module, example: tuple):
    import torch

    try:
        return torch.jit.trace(module, example, check_trace=False)
    except Exception as exc:
        raise OpbenchError(f"torchscript: {type(module).__name__} does not trace: {exc}".splitlines()[0]) from None


def torchscript_port(model) -> TorchPort:
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
            missing = f"the LibTorch build failed: {type(exc).__name__}: {_first_line(exc)}"
    if missing is not None:
        return TorchPort("torchscript", model, SCRIPT_IN_PROCESS.format(missing), wrap=_trace)
    return TorchPort("torchscript", model, SCRIPT_FROM_CPP, wrap=lambda m, example: libtorch.script(_trace(m, example)))


def _compile(module, example: tuple):
    import torch

    return torch.compile(module, dynamic=False)


class OnnxPort(Port):
    """torch.onnx.export of the whole model, run by ONNX Runtime with optimizations on or off.

    Units follow the exported graph: one per leaf call with its nodes; a leaf with no node of its
    own (a BatchNorm folded into the Conv before it, a Dropout) joins the unit of the call whose
    output it takes, so the fused node is judged as one unit covering both layers."""

    def __init__(self, name: str, model, inputs: dict[str, np.ndarray], optimized: bool):
        import onnx
        import torch

        from accuracy.backends import onnx_graph

        self.name, self.optimized, self.onnx_graph = name, optimized, onnx_graph
        self.description = f"ONNX Runtime (torch.onnx.export), graph optimizations {'on' if optimized else 'off'}"
        names = list(inputs)
        args = tuple(torch.as_tensor(inputs[k]) for k in names)
        inferred = onnx.shape_inference.infer_shapes(onnx_graph.export(model, args, names))  # Extractor needs shapes
        self.graph = onnx_graph.Graph.of(inferred)
        self.input_names = [i.name for i in inferred.graph.input]
        self.leaves = set(leaf_modules(model))
        self.modules = {name for name, _ in model.named_modules() if name}
        probed = self._feeds(inputs) | self.graph.probe(self._feeds(inputs))
        self.shapes = {k: tuple(v.shape) for k, v in probed.items()}
        self.dtypes = {k: v.dtype for k, v in probed.items()}
        self._sessions: dict[str, object] = {}

    def _feeds(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {k: np.ascontiguousarray(inputs[k]) for k in self.input_names}

    def units(self, calls):
        groups = self.graph.groups(self.modules, self.leaves)
        counts: dict[str, int] = {}
        units: list[Unit] = []
        for call in calls:
            index = counts.get(call.path, 0)
            counts[call.path] = index + 1
            nodes = groups.get((call.path, index))
            if not nodes:
                previous = units[-1] if units else None
                if (
                    previous
                    and not previous.reason
                    and call.producers == [previous.last]
                    and call.output.shape == previous.calls[-1].output.shape
                ):
                    previous.calls.append(call)  # folded into the node before it
                else:
                    units.append(Unit([call], "no ONNX node computes it: folded away or constant at export"))
                continue
            units.append(self._unit(call, nodes))
        return units

    def _unit(self, call: LayerCall, nodes) -> Unit:
        reads, gives = self.graph.boundary(nodes)
        want = [tuple(t.shape) for t in call.inputs]
        order, free = [], list(range(len(want)))
        for name in reads:
            match = next((i for i in free if self.shapes.get(name) == want[i]), None)
            if match is None:
                return Unit([call], f"its ONNX nodes read {name}, which is none of the layer's inputs")
            order.append(match)
            free.remove(match)
        out = [o for o in gives if self.shapes.get(o) == tuple(call.output.shape)]
        if len(out) != 1:
            return Unit([call], "its ONNX nodes give no single tensor of the layer's output shape")
        return Unit([call], detail={"reads": reads, "order": order, "gives": out[0], "nodes": [n.name for n in nodes]})

    def _session(self, unit: Unit):
        key = unit.detail["gives"]
        if key not in self._sessions:
            sub = self.graph.extract(unit.detail["reads"], [key])
            self._sessions[key] = self.onnx_graph.session(sub, self.optimized)
        return self._sessions[key]

    def isolated(self, unit, inputs):
        arrays = [to_numpy(t) for t in port_inputs(inputs, self.fmt)]
        feeds = {name: arrays[i] for name, i in zip(unit.detail["reads"], unit.detail["order"], strict=True)}
        return self.onnx_graph.run(self._session(unit), feeds, [unit.detail["gives"]])[unit.detail["gives"]]

    def end_to_end(self, inputs, units):
        exposed = [u for u in units if not u.reason]
        names = [u.detail["gives"] for u in exposed]
        feeds = self._feeds(inputs)
        exposing = self.graph.with_outputs(names, self.dtypes)
        everything = self.onnx_graph.run(self.onnx_graph.session(exposing, self.optimized), feeds)
        plain = self.onnx_graph.run(self.onnx_graph.session(self.graph.model, self.optimized), feeds)
        return {u.last: everything[u.detail["gives"]] for u in exposed}, {}, next(iter(plain.values()))


class FilePort(Port):
    """Activations from any runtime, in the activations file format."""

    def __init__(self, name: str, arrays: dict[str, np.ndarray]):
        self.name, self.arrays = name, arrays
        self.description = "an activations file"
        outputs = [a for k, a in arrays.items() if "/" not in k]
        self.fmt = format_of(outputs[0])

    def units(self, calls):
        return [
            Unit([c]) if c.key in self.arrays else Unit([c], "the activations file has no output for it") for c in calls
        ]

    def given_inputs(self, unit: Unit) -> list | None:
        call = unit.calls[0]
        keys = [call.key + INPUT_SUFFIX.format(i) for i in range(len(call.inputs))]
        return [self.arrays[k] for k in keys] if all(k in self.arrays for k in keys) else None

    def isolated(self, unit, inputs):
        return self.arrays[unit.last]

    def end_to_end(self, inputs, units):
        outputs = {k: a for k, a in self.arrays.items() if "/" not in k and k != OUTPUT_KEY}
        return outputs, {}, self.arrays[OUTPUT_KEY]


class KerasPort(Port):
    """A Keras model with a mapping {Keras layer name: torch layer key} (accuracy.backends.keras_port).

    A key is a module path, or `path#2` for a module's second call. Several Keras layers mapped
    to one key run in the model's order as that layer (a ZeroPadding2D before a Conv2D, a Permute
    before a Flatten)."""

    def __init__(self, name: str, model, mapping: dict[str, str], calls: list[LayerCall], source: str):
        from accuracy.backends import keras_port

        keras_port.check_mapping(model, mapping, {c.key for c in calls}, source)
        self.name, self.model, self.keras = name, model, keras_port
        self.description = "a Keras model, its layers mapped to the torch layers"
        order = [layer.name for layer in model.layers]
        self.chains: dict[str, list[str]] = {}
        for layer in sorted(mapping, key=order.index):
            self.chains.setdefault(mapping[layer], []).append(layer)

    def units(self, calls):
        return [
            Unit([c]) if c.key in self.chains else Unit([c], "the mapping names no Keras layer for it") for c in calls
        ]

    def isolated(self, unit, inputs):
        arrays = [to_numpy(t) for t in port_inputs(inputs, self.fmt)]
        return self.keras.call_layers(self.model, self.chains[unit.key], arrays)

    def end_to_end(self, inputs, units):
        compared = [u for u in units if not u.reason]
        names = [self.chains[u.key][-1] for u in compared]
        outputs, out = self.keras.run_layers(self.model, names, list(inputs.values()))
        return {u.key: outputs[self.chains[u.key][-1]] for u in compared}, {}, out


def keras_port(made, calls: list[LayerCall]) -> KerasPort:
    """The Keras port from (keras model, mapping), or from a factory MODULE:FUNCTION returning them."""
    from accuracy.workflows.check import load_function

    source = f"--keras {made}" if isinstance(made, str) else "keras"
    if isinstance(made, str):
        from accuracy.backends import start_tensorflow

        start_tensorflow()  # before any Keras layer starts TF's runtime
        try:
            made = load_function(made, "--keras")()
        except OpbenchError:
            raise
        except Exception as exc:
            raise OpbenchError(f"{source}: the factory failed: {type(exc).__name__}: {exc}") from None
    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[1], dict)):
        raise OpbenchError(f"{source}: expected (keras model, {{Keras layer name: torch module path}})")
    return KerasPort("keras", made[0], made[1], calls, source)


def check_port_name(name: str) -> None:
    """One line for a port name `build_port` would refuse, before any port is built anywhere."""
    if name.startswith("threads:"):
        count = name.partition(":")[2]
        if not count.isdigit() or int(count) < 1:
            raise OpbenchError(f"--port {name}: expected threads:N with N >= 1, e.g. threads:1")
    elif name not in PORT_NAMES:
        raise OpbenchError(f"--port {name!r}: unknown port; choose from {', '.join(PORT_NAMES)}")


def port_backends(name: str) -> tuple[str, ...]:
    """The backends built-in port `name` runs on besides torch, which builds every port's model."""
    if name in ("onnxruntime", "onnxruntime-noopt"):
        return ("onnxruntime",)
    return ("libtorch",) if name == "torchscript" else ()


def build_port(name: str, model, inputs: dict[str, np.ndarray]) -> Port | str:
    """The port `name`, or a sentence saying why it is absent on this machine (never an error)."""
    import torch

    check_port_name(name)
    if name in ("onnxruntime", "onnxruntime-noopt"):
        return OnnxPort(name, model, inputs, optimized=name == "onnxruntime")
    if name == "torchscript":
        return torchscript_port(model)
    if name == "compile":
        return TorchPort(name, model, "each leaf torch.compile'd (inductor)", wrap=_compile)
    if name in ("bfloat16", "float16"):
        return TorchPort(name, model, f"PyTorch, weights and activations in {name}", dtype=name)
    if name.startswith("threads:"):
        count = name.partition(":")[2]
        return TorchPort(name, model, f"PyTorch on {count} intra-op threads", threads=int(count))
    if not torch.cuda.is_available():  # name is cuda or cuda-tf32
        return "no CUDA device on this machine"
    tf32 = name == "cuda-tf32"
    described = "on: matmuls and convolutions judged at TF32 precision" if tf32 else "off"
    return TorchPort(name, model, f"PyTorch on CUDA, TF32 {described}", device="cuda", tf32=tf32)
