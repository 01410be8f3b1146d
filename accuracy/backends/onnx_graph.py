"""A whole torch model as an ONNX graph: export, the node-to-module map, isolated sub-graphs.

`torch.onnx.export(dynamo=False)` (the TorchScript exporter; the dynamo exporter needs
onnxscript) names every node after the module scope it was traced in, e.g.
`/layer1/layer1.0/conv1/Conv`, with `_1`, `_2` appended to a module's second and third call
(`/layer1/layer1.0/relu_1/Relu`). That is the node-to-module mapping: nodes of one leaf module's
call form its group. Modules the exporter folded away (a BatchNorm after a Conv in eval mode,
a Dropout) have no nodes of their own; the caller pairs them with the node that absorbed them.

Isolated sub-graphs come from `onnx.utils.Extractor`, which keeps every node between the given
input and output tensors (the weights' Identity nodes included).
"""

from __future__ import annotations

import io
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accuracy.core.errors import OpbenchError, first_line, quiet_stderr

OPSET = 17  # LayerNormalization is an ONNX op from opset 17 on
_CALL_SUFFIX = re.compile(r"(.+)_(\d+)")


def export(model, args: tuple, input_names: list[str]):
    """The ONNX ModelProto of `model` on `args`; an op the exporter cannot translate is named."""
    import onnx
    import torch

    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings(), quiet_stderr():  # the exporter dumps the graph on failure
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                args,
                buffer,  # type: ignore[arg-type]  # torch.onnx.export writes to a file object too
                dynamo=False,
                opset_version=OPSET,
                input_names=input_names,
                do_constant_folding=True,
            )
    except Exception as exc:
        text = first_line(exc)
        op = re.search(r"operator '([^']+)'", text)
        named = f"op {op.group(1)} does not export: " if op else ""
        raise OpbenchError(f"the model does not export to ONNX (opset {OPSET}): {named}{text}") from None
    return onnx.load_from_string(buffer.getvalue())


def module_call_of(node_name: str, modules: set[str]) -> tuple[str, int] | None:
    """(module path, call index) of the leaf scope a node was traced in, None outside any module.

    Scope segments name a child by its attribute name, or a Sequential's child by the Sequential's
    name and its index (`layer1.0`, `downsample.0`); a trailing `_N` is the module's (N+1)-th call."""
    segments = node_name.strip("/").split("/")[:-1]  # the last segment is the op
    path, call = "", 0
    for segment in segments:
        for name, index in [(segment, 0), *_suffixed(segment)]:
            candidates = [name, f"{path}.{name}" if path else name]
            last = path.rpartition(".")[2]
            if path and name.startswith(last + "."):  # a Sequential's child: `downsample.0` under `...downsample`
                candidates.append(path + name[len(last) :])
            found = next((c for c in candidates if c in modules and (not path or c.startswith(path))), None)
            if found:
                path, call = found, index
                break
        else:
            return None
    return (path, call) if path else None


def _suffixed(segment: str) -> list[tuple[str, int]]:
    match = _CALL_SUFFIX.fullmatch(segment)
    return [(match.group(1), int(match.group(2)))] if match else []


@dataclass
class Graph:
    """The exported graph and which tensors are constants (weights, folded values)."""

    model: Any  # onnx.ModelProto
    constants: set[str] = field(default_factory=set)
    producer: dict[str, object] = field(default_factory=dict)
    consumers: dict[str, list] = field(default_factory=dict)

    @classmethod
    def of(cls, model) -> Graph:
        graph = cls(model)
        g = model.graph
        graph.constants = {t.name for t in g.initializer}
        for node in g.node:  # topological order: a node of constants only gives a constant
            for out in node.output:
                graph.producer[out] = node
            for name in node.input:
                graph.consumers.setdefault(name, []).append(node)
            if all(i in graph.constants or not i for i in node.input):
                graph.constants.update(node.output)
        return graph

    def groups(self, modules: set[str], leaves: set[str]) -> dict[tuple[str, int], list]:
        """Nodes by the leaf module call they were traced in (constant-only nodes left out);
        `modules` holds every module path, `leaves` those of leaf modules."""
        groups: dict[tuple[str, int], list] = {}
        for node in self.model.graph.node:
            if all(o in self.constants for o in node.output):
                continue
            owner = module_call_of(node.name, modules)
            if owner is not None and owner[0] in leaves:
                groups.setdefault(owner, []).append(node)
        return groups

    def boundary(self, nodes: list) -> tuple[list[str], list[str]]:
        """The activation tensors a group of nodes reads from outside, and those it gives out."""
        inside = {id(n) for n in nodes}
        produced = {o for n in nodes for o in n.output}
        inputs = list(
            dict.fromkeys(i for n in nodes for i in n.input if i and i not in produced and i not in self.constants)
        )
        graph_outputs = {o.name for o in self.model.graph.output}
        outputs = [
            o
            for n in nodes
            for o in n.output
            if o in graph_outputs or any(id(c) not in inside for c in self.consumers.get(o, []))
        ]
        return inputs, outputs

    def extract(self, inputs: list[str], outputs: list[str]):
        """The isolated sub-graph from `inputs` to `outputs` (onnx.utils.Extractor)."""
        import onnx.utils

        return onnx.utils.Extractor(self.model).extract_model(inputs, outputs)

    def with_outputs(self, names: list[str], dtypes: dict[str, np.dtype]):
        """The whole model with `names` (of numpy `dtypes`) exposed as extra outputs, read in one run."""
        import onnx

        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        present = {o.name for o in model.graph.output}
        for name in names:
            if name not in present:
                kind = onnx.helper.np_dtype_to_tensor_dtype(dtypes[name])
                model.graph.output.append(onnx.helper.make_tensor_value_info(name, kind, None))
        return model

    def probe(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every activation tensor's value in one unoptimized run: their true shapes and dtypes
        (shape inference leaves a transformer's dynamic dimensions unknown)."""
        import onnx

        names = [o for n in self.model.graph.node for o in n.output if o and o not in self.constants]
        probe = onnx.ModelProto()
        probe.CopyFrom(self.model)
        del probe.graph.output[:]
        for name in names:
            probe.graph.output.append(onnx.ValueInfoProto(name=name))
        return run(session(probe, optimized=False), feeds)


def session(model, optimized: bool):
    """An ONNX Runtime CPU session with its default optimizations (fusions included) or none."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimized else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run(sess, feeds: dict[str, np.ndarray], outputs: list[str] | None = None) -> dict[str, np.ndarray]:
    names = outputs or [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))
