"""ONNX Runtime's CPU provider (MLAS kernels) running small ONNX graphs built with onnx.helper.

An implementation is a `Graph`: a few nodes from the op's inputs to one output `y`, the shape
of what an exporter writes. ORT's graph optimizer fuses such patterns (MatMul + Add -> Gemm,
the erf formula -> Gelu), and a fused kernel rounds differently, so every graph can run at
ORT's default level (all optimizations, backend `onnxruntime`) and with optimizations off
(`onnxruntime-noopt`). Sessions take their thread count when built (`intra_op_num_threads`),
so one session is kept per graph, input shapes and thread count; threads are set in-process.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from accuracy.backends.base import ThreadsPerCall
from accuracy.core.dtypes import SINGLE_DOUBLE
from accuracy.core.threads import all_cores

OPSET = 23  # Attention joined the default domain in opset 23
IR_VERSION = 10  # the newest ONNX IR this onnxruntime reads


@dataclass(frozen=True)
class Node:
    op_type: str
    inputs: tuple[str, ...]
    output: str = "y"
    attrs: tuple = ()  # (name, value) pairs: hashable, so graphs can key the session cache
    domain: str = ""  # "com.microsoft" for ORT's contrib ops (FastGelu)


@dataclass(frozen=True)
class Graph:
    """Nodes in order, plus named constants (floats take the input dtype, ints are int64)."""

    nodes: tuple[Node, ...]
    constants: tuple = ()  # (name, value) pairs

    def __call__(self, runtime, **inputs):
        return runtime.run_graph(self, inputs)


def node(op_type: str, *inputs: str, output: str = "y", domain: str = "", **attrs) -> Node:
    return Node(op_type, inputs, output, tuple(sorted(attrs.items())), domain)


def graph(*nodes: Node, **constants) -> Graph:
    return Graph(tuple(nodes), tuple(sorted(constants.items())))


def single(op_type: str, inputs: tuple[str, ...], domain: str = "", **attrs) -> Graph:
    """One node from the op's inputs (in the given order) to y: most implementations."""
    return graph(node(op_type, *inputs, domain=domain, **attrs))


def imported_quietly():
    """onnxruntime, imported with fd 2 quiet: its import writes a warning in ANSI colours where it
    cannot persist a telemetry id (XDG_CACHE_HOME naming a file), nothing the user asked about;
    a failed import still raises."""
    from accuracy.core.errors import quiet_stderr

    with quiet_stderr():
        import onnxruntime

    return onnxruntime


class OnnxRuntimeBackend(ThreadsPerCall):
    module = "onnxruntime"
    framework = "onnxruntime"
    dtypes = ("float32",)  # most ORT CPU kernels are float32 only
    float64_kernel_dtypes = SINGLE_DOUBLE  # the kernels that also have a double version
    gpu_float32 = "whatever the CUDA provider's use_tf32 option says (its default is not verified here)"

    def __init__(self, name: str = "onnxruntime", optimize: bool = True):
        self.name = name
        self.optimize = optimize
        self._sessions: dict = {}

    def available(self) -> bool:
        return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx"))

    @cached_property
    def namespace(self):
        return self  # graphs call back into run_graph

    def preload(self) -> None:
        """Importing onnxruntime starts no session, and a forked child runs sessions fine."""
        import onnx.numpy_helper  # noqa: F401 - the graph builder, imported once

        self.ort  # noqa: B018  the cached property imports onnxruntime

    @cached_property
    def ort(self):
        return imported_quietly()

    def run_graph(self, g: Graph, inputs: dict):
        threads = self.requested_threads or all_cores()
        key = (g, tuple((k, v.shape, v.dtype.str) for k, v in inputs.items()), threads)
        if key not in self._sessions:
            self._sessions[key] = self._session(g, inputs, threads)
        return self._sessions[key].run(None, inputs)[0]

    def _session(self, g: Graph, inputs: dict, threads: int):
        import onnx.numpy_helper
        from onnx import helper

        ort = self.ort
        dtype = next(iter(inputs.values())).dtype
        elem = helper.np_dtype_to_tensor_dtype(dtype)
        constants = [
            onnx.numpy_helper.from_array(np.asarray(v, dtype=np.int64 if isinstance(v, (int, tuple)) else dtype), k)
            for k, v in g.constants
        ]
        model = helper.make_model(
            helper.make_graph(
                [
                    helper.make_node(n.op_type, list(n.inputs), [n.output], domain=n.domain, **dict(n.attrs))
                    for n in g.nodes
                ],
                "opbench",
                [helper.make_tensor_value_info(k, elem, v.shape) for k, v in inputs.items()],
                [helper.make_tensor_value_info("y", elem, None)],
                initializer=constants,
            ),
            opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)],
            ir_version=IR_VERSION,
        )
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = (
            ort.GraphOptimizationLevel.ORT_ENABLE_ALL if self.optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        )
        return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])

    def info(self) -> dict:
        import onnx

        ort = self.ort
        return {
            "version": ort.__version__,
            "onnx": onnx.__version__,
            "build": ort.get_build_info() if hasattr(ort, "get_build_info") else None,
            "providers": ort.get_available_providers(),
            "math_libraries": "MLAS (bundled in onnxruntime); Eigen for some kernels",
            "knobs": {
                "graph_optimization_level": "ORT_ENABLE_ALL (onnxruntime), ORT_DISABLE_ALL (onnxruntime-noopt)",
                "intra_op_num_threads": "per session, set in-process",
                "inter_op_num_threads": 1,
            },
        }


# Graphs of several nodes, as exporters write them (ORT's optimizer fuses the first two).
LINEAR_MATMUL_ADD = graph(
    node("Transpose", "W", output="Wt", perm=(1, 0)), node("MatMul", "x", "Wt", output="xW"), node("Add", "xW", "b")
)
GELU_ERF_FORMULA = graph(
    node("Div", "x", "sqrt2", output="s"),
    node("Erf", "s", output="e"),
    node("Add", "e", "one", output="p"),
    node("Mul", "x", "p", output="xp"),
    node("Mul", "xp", "half"),
    sqrt2=math.sqrt(2.0),
    one=1.0,
    half=0.5,
)
# Attention takes (batch, heads, n, d): the op's (heads, n, d) gets a batch axis and loses it after.
ATTENTION = graph(
    *(node("Unsqueeze", t, "batch", output=f"{t}4") for t in "qkv"),
    node("Attention", "q4", "k4", "v4", output="y4"),
    node("Squeeze", "y4", "batch"),
    batch=(0,),
)


def dft(onesided: int) -> Graph:
    """DFT of real rows: a trailing axis of 1 makes them complex; the output is (..., bins, 2)."""
    return graph(
        node("Unsqueeze", "x", "last", output="xc"),
        node("DFT", "xc", "", "axis", onesided=onesided),
        last=(-1,),
        axis=-2,
    )


BACKENDS = [OnnxRuntimeBackend(), OnnxRuntimeBackend("onnxruntime-noopt", optimize=False)]
# The extra backend a graph opts into with Impl(also=...): the same graph with ORT's optimizer off.
ORT_VARIANTS = ("onnxruntime-noopt",)
