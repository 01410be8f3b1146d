"""The port table: every port `opbench model --port NAME` can build, one spec each.

A port is a `Port` subclass and its builder, in a module of this package, plus one `PortSpec` row
here (a kind of port may lean on shared glue of the ports floor: the ONNX ports on `onnx_graph`,
`onnx_noise` and `export_cache`); a package adds its own through the `opbench.ports` entry point
(a module exporting `PORTS`, a list of `PortSpec`). Ports a user brings (an activations file, a
Keras model) are not named by `--port`: they are `file_port.FilePort` and `keras_layers.KerasPort`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from accuracy.core.errors import OpbenchError
from accuracy.core.plugins import load_plugins
from accuracy.workflows.model.ports import (
    child_process,
    environments,
    executorch_int8,
    executorch_port,
    litert_port,
    onnx_export,
    onnx_quantized,
    openvino_int8,
    openvino_port,
    torch_variants,
    torchao_port,
)
from accuracy.workflows.model.ports.base import Port
from accuracy.workflows.model.ports.child_process import Rebuild

COUNT = ":N"  # a name ending so takes a count: threads:N is threads:1, threads:2, ...
TAKES = ("PINS", "VERSION")  # a name ending so takes any text there: env:PINS, torch==VERSION


@dataclass(frozen=True)
class PortSpec:
    """One port: its `--port` name, the backends it runs on besides torch (a Dask worker preloads
    them), whether `opbench model` runs it by default, whether it needs a GPU, whether it is a
    deploy runtime, and `build`:
    (the name as given, the model, its inputs by name) -> the Port, or a sentence saying why it
    is absent on this machine (never an error). A variant of a kind of port is its builder with
    the variant's arguments bound (`partial(onnxruntime, optimized=False)`): this table is the one
    place where a name meets its variant. `rebuilds`: a port in another process, whose
    `build` also takes a `Rebuild` (the factory, the mode and the reference's calls)."""

    name: str
    build: Callable[..., Port | str]
    backends: tuple[str, ...] = ()
    default: bool = False
    needs_gpu: bool = False
    rebuilds: bool = False
    deploy: bool = False  # a deploy runtime (the `deploy` extra): the census runs it beside the defaults
    calibrates: bool = False  # a quantized port: its `build` also takes the --calibration file (or None)

    def matches(self, name: str) -> bool:
        if self.name.endswith(COUNT):
            return name.startswith(self.name.removesuffix("N"))
        word = next((w for w in TAKES if self.name.endswith(w)), None)
        if word is None:
            return name == self.name
        prefix = self.name.removesuffix(word)
        return name.startswith(prefix) and len(name) > len(prefix)


BUILT_IN = (
    PortSpec("onnxruntime", partial(onnx_export.onnxruntime, optimized=True), ("onnxruntime",), default=True),
    PortSpec("onnxruntime-noopt", partial(onnx_export.onnxruntime, optimized=False), ("onnxruntime",), default=True),
    PortSpec("torchscript", torch_variants.torchscript, ("libtorch",), default=True),
    PortSpec("compile", torch_variants.compiled),
    PortSpec("bfloat16", torch_variants.low_precision),
    PortSpec("float16", torch_variants.low_precision),
    PortSpec("threads:N", torch_variants.threads),
    # PyTorch in a child process, its kernels held to one x86 level; absent where the CPU lacks it
    PortSpec("isa:default", child_process.isa_port, rebuilds=True),
    PortSpec("isa:avx2", child_process.isa_port, rebuilds=True),
    PortSpec("isa:avx512", child_process.isa_port, rebuilds=True),
    # PyTorch in an environment of its own that uv builds from pins: any set, or torch moved
    PortSpec("env:PINS", environments.environment_port, rebuilds=True),
    PortSpec("torch==VERSION", environments.environment_port, rebuilds=True),
    PortSpec("cuda", partial(torch_variants.cuda, tf32=False), default=True, needs_gpu=True),
    PortSpec("cuda-tf32", partial(torch_variants.cuda, tf32=True), default=True, needs_gpu=True),
    # the deploy runtimes (the `deploy` extra); each absent with a reason where it is not installed
    PortSpec("executorch", partial(executorch_port.executorch_port, delegate=True), deploy=True),
    PortSpec("executorch-portable", partial(executorch_port.executorch_port, delegate=False), deploy=True),
    PortSpec("litert", litert_port.litert_port, rebuilds=True, deploy=True),
    PortSpec("openvino", partial(openvino_port.openvino_port, reduced=False), deploy=True),
    PortSpec("openvino-f16", partial(openvino_port.openvino_port, reduced=True), deploy=True),
    # quantized: judged against the quantization noise they declare (workflows.model.quantization)
    PortSpec("ort-int8", partial(onnx_quantized.ort_int8, per_channel=True), ("onnxruntime",), calibrates=True),
    PortSpec("ort-int8-tensor", partial(onnx_quantized.ort_int8, per_channel=False), ("onnxruntime",), calibrates=True),
    PortSpec("ort-int8-dynamic", partial(onnx_quantized.ort_int8, dynamic=True), ("onnxruntime",), calibrates=True),
    PortSpec("torchao-int8-weight", partial(torchao_port.torchao_port, dynamic=False)),
    PortSpec("torchao-int8-dynamic", partial(torchao_port.torchao_port, dynamic=True)),
    PortSpec("openvino-int8", openvino_int8.openvino_int8, calibrates=True),
    PortSpec("executorch-int8", executorch_int8.executorch_int8, calibrates=True),
)


@functools.cache
def port_specs() -> tuple[PortSpec, ...]:
    """The built-in ports, then those installed packages add (a clash with a built-in name is left out)."""
    plugins = [
        s for s in load_plugins("opbench.ports", "PORTS", PortSpec) if not any(s.name == b.name for b in BUILT_IN)
    ]
    return (*BUILT_IN, *plugins)


def port_names() -> tuple[str, ...]:
    return tuple(s.name for s in port_specs())


def spec_for(name: str) -> PortSpec:
    """The spec `--port name` asks for; one line for a name no port has, before any port is built."""
    spec = next((s for s in port_specs() if s.matches(name)), None)
    if spec is None:
        raise OpbenchError(f"--port {name!r}: unknown port; choose from {', '.join(port_names())}")
    if spec.name.endswith(COUNT):
        count = name.partition(":")[2]
        if not count.isdigit() or int(count) < 1:
            example = spec.name.replace("N", "1")
            raise OpbenchError(f"--port {name}: expected {spec.name} with N >= 1, e.g. {example}")
    return spec


def default_ports(gpu: bool) -> list[str]:
    """What `opbench model` runs without --port: the GPU ones only where a GPU is."""
    return [s.name for s in BUILT_IN if s.default and (gpu or not s.needs_gpu)]


def census_ports(gpu: bool) -> list[str]:
    """What `opbench selftest --census` runs on each model: the default ports, the deploy
    runtimes, and PyTorch against itself on one thread."""
    return [*default_ports(gpu), *(s.name for s in BUILT_IN if s.deploy), "threads:1"]


def build_port(
    name: str, model, inputs: dict, rebuild: Rebuild | None = None, calibration: str | None = None
) -> Port | str:
    """The port `name`, or a sentence saying why it is absent on this machine (never an error);
    `calibration`: the --calibration file a quantized port calibrates on (None: the inputs)."""
    spec = spec_for(name)
    if spec.needs_gpu:
        import torch

        if not torch.cuda.is_available():
            return "no CUDA device on this machine"
    if spec.rebuilds:
        if rebuild is None:
            return "it runs the model rebuilt from its factory in another process, and no factory was given"
        return spec.build(name, model, inputs, rebuild)
    if spec.calibrates:
        return spec.build(name, model, inputs, calibration)
    return spec.build(name, model, inputs)
