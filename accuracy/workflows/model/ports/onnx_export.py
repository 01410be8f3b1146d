"""torch.onnx.export of the whole model, run by ONNX Runtime with graph optimizations on or off."""

from __future__ import annotations

import numpy as np

from accuracy.backends.pytorch import tensor_to_numpy as to_numpy
from accuracy.workflows.model.ports.base import EndToEnd, Port
from accuracy.workflows.model.trace import LayerCall, leaf_modules
from accuracy.workflows.model.units import Unit, port_inputs


class OnnxPort(Port):
    """Units follow the exported graph: one per leaf call with its nodes; a leaf with no node of its
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
        for call in (c for c in calls if c.leaf):  # its nodes are mapped to leaf modules
            index = counts.get(call.path, 0)
            counts[call.path] = index + 1
            if call.reason:
                units.append(Unit([call], call.reason))
                continue
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

    def end_to_end(self, inputs, units) -> EndToEnd:
        exposed = [u for u in units if not u.reason]
        names = [u.detail["gives"] for u in exposed]
        feeds = self._feeds(inputs)
        exposing = self.graph.with_outputs(names, self.dtypes)
        everything = self.onnx_graph.run(self.onnx_graph.session(exposing, self.optimized), feeds)
        plain = self.onnx_graph.run(self.onnx_graph.session(self.graph.model, self.optimized), feeds)
        return EndToEnd({u.last: everything[u.detail["gives"]] for u in exposed}, next(iter(plain.values())))


def onnxruntime(name: str, model, inputs) -> OnnxPort:
    return OnnxPort(name, model, inputs, optimized=name == "onnxruntime")
