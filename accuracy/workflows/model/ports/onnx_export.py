"""torch.onnx.export of the whole model, run by ONNX Runtime with graph optimizations on or off."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from accuracy.backends.pytorch import tensor_to_numpy as to_numpy
from accuracy.core.errors import OpbenchError
from accuracy.workflows.model.export_cache import cached_export
from accuracy.workflows.model.ports.base import EndToEnd, Port
from accuracy.workflows.model.trace import LayerCall
from accuracy.workflows.model.unit import Unit, port_inputs


class OnnxPort(Port):
    """Units follow the exported graph: one per module call, parents as well as leaves, with the
    nodes traced inside it (accuracy.workflows.model.onnx_graph). A leaf with no node of its own (a
    BatchNorm folded into the Conv before it, a Dropout) joins the unit of the leaf call whose
    output it takes, so the fused node is judged as one unit covering both layers."""

    runtime = "onnxruntime"
    _weights: tempfile.TemporaryDirectory | None = None  # the folder of its weights, where they are apart

    def __init__(
        self, name: str, model, inputs: dict[str, np.ndarray], optimized: bool, exported=None, apart: bool = False
    ):
        """`exported`: the ONNX model to run (default: `model` exported here). `apart`: its weights
        moved to a file of the port's own (`onnx_graph.weights_apart`), so that its sessions and
        each unit's sub-graph read them from there instead of holding copies in the proto."""
        import onnx

        from accuracy.workflows.model import onnx_graph

        self.name, self.optimized, self.onnx_graph = name, optimized, onnx_graph
        self.description = f"ONNX Runtime (torch.onnx.export), graph optimizations {'on' if optimized else 'off'}"
        exported = cached_export(onnx_graph.export, model, inputs) if exported is None else exported
        folder = None
        if apart:
            self._weights = tempfile.TemporaryDirectory(prefix="opbench-onnx-")
            folder = Path(self._weights.name)
            onnx_graph.weights_apart(exported, folder)
        inferred = onnx.shape_inference.infer_shapes(exported)  # Extractor needs shapes
        del exported  # a copy of the proto: the inferred graph holds it
        self.graph = onnx_graph.Graph.of(inferred, folder)
        self.input_names = [i.name for i in inferred.graph.input]
        self.modules = {name for name, _ in model.named_modules() if name}
        # an exported graph is paired by its module calls' boundaries alone, not every value held
        # for the port's life (one Qwen2.5-0.5B layer: 33 MiB of values, 14 at its boundaries)
        among = self.graph.boundaries(self.modules) if apart else None
        self.values = self._feeds(inputs) | self.graph.probe(self._feeds(inputs), among)
        self.dtypes = {k: v.dtype for k, v in self.values.items()}

    def close(self) -> None:
        self.graph, self.values = None, {}  # type: ignore[assignment]
        if self._weights is not None:
            self._weights.cleanup()

    def _feeds(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [k for k in self.input_names if k not in inputs]
        if missing:
            raise OpbenchError(f"the ONNX graph takes {', '.join(missing)}, which the model's inputs lack")
        return {k: np.ascontiguousarray(inputs[k]) for k in self.input_names}

    def units(self, calls):
        owned = {id(node): owners for node, owners in self.graph.owners(self.modules)}
        groups = self.graph.groups(self.modules)
        inside = _descendants(calls)
        counts: dict[str, int] = {}
        units: list[Unit] = []
        previous: Unit | None = None  # the last leaf call's unit
        for call in calls:
            index = counts.get(call.path, 0)
            counts[call.path] = index + 1
            nodes = groups.get((call.path, index))
            if call.reason:
                unit = Unit([call], call.reason)
            elif nodes and not _nodes_match_the_call((call.path, index), nodes, owned, groups, inside):
                unit = Unit([call], _CALLS_MERGED)
            elif nodes:
                unit = self._unit(call, nodes)
            elif (
                call.leaf
                and previous is not None
                and not previous.reason
                and call.producers == [previous.last]
                and call.output.shape == previous.calls[-1].output.shape
                and self._computes(previous, call)
            ):
                previous.calls.append(call)  # folded into the node before it
                continue
            elif "/" in call.path:  # the exporter's node names join scopes with '/': its own is split
                unit = Unit([call], "its name holds '/', which the exporter's node names use between scopes")
            else:
                unit = Unit([call], "no ONNX node computes it: folded away or constant at export")
            units.append(unit)
            if call.leaf:
                previous = unit
        return units

    def _computes(self, unit: Unit, call: LayerCall) -> bool:
        """Whether `unit`'s ONNX output is `call`'s, folded in (a BatchNorm into the Conv before
        it), rather than the unit's own last layer's: a layer whose nodes were not found by name
        joined the unit before it, which was then judged against a reference one layer further on."""
        gives = self.values[unit.detail["gives"]]
        return _distance(gives, to_numpy(call.output)) <= _distance(gives, to_numpy(unit.calls[-1].output))

    def _closest(self, name: str, tensors: list, among: list[int]) -> int | None:
        """Which of `tensors` (by index, of those `among`) the graph's value `name` is: of the same
        shape, the nearest in value (a rotary embedding's cos and sin have one shape)."""
        value = self.values.get(name)
        if value is None:
            return None
        same = [i for i in among if tuple(tensors[i].shape) == value.shape]
        wide = value.astype(np.float64)
        return min(
            same, key=lambda i: float(np.abs(wide - to_numpy(tensors[i]).astype(np.float64)).sum()), default=None
        )

    def _unit(self, call: LayerCall, nodes) -> Unit:
        reads, gives = self.graph.boundary(nodes)
        order, free = [], list(range(len(call.inputs)))
        for name in reads:
            match = self._closest(name, call.inputs, free)
            if match is None:
                return Unit([call], f"its ONNX nodes read {name}, which is none of the module's inputs")
            order.append(match)
            free.remove(match)
        out = self._closest_output(gives, call.output)
        if out is None:
            return Unit([call], "its ONNX nodes give no tensor of the module's output shape")
        return Unit([call], detail={"reads": reads, "order": order, "gives": out, "nodes": [n.name for n in nodes]})

    def _closest_output(self, gives: list[str], output) -> str | None:
        same = [g for g in gives if g in self.values and self.values[g].shape == tuple(output.shape)]
        return min(same, key=lambda g: _distance(self.values[g], to_numpy(output)), default=None)

    def _session(self, unit: Unit):
        """A session of the unit's nodes alone, made for its one run and not kept: a parent's holds
        its weights (BERT-base's encoder: 340 MB), and each level of nesting again."""
        sub = self.graph.extract(unit.detail["reads"], [unit.detail["gives"]])
        return self.graph.session(sub, self.optimized)

    def isolated(self, unit, inputs):
        arrays = [to_numpy(t) for t in port_inputs(inputs, self.fmt)]
        feeds = {name: arrays[i] for name, i in zip(unit.detail["reads"], unit.detail["order"], strict=True)}
        return self.onnx_graph.run(self._session(unit), feeds, [unit.detail["gives"]])[unit.detail["gives"]]

    def end_to_end(self, inputs, units) -> EndToEnd:
        exposed = [u for u in units if not u.reason]
        names = [u.detail["gives"] for u in exposed]
        feeds = self._feeds(inputs)
        with self.graph.exposing(names, self.dtypes) as exposing:
            everything = self.onnx_graph.run(self.graph.session(exposing, self.optimized), feeds)
        plain = self.onnx_graph.run(self.graph.session(self.graph.model, self.optimized), feeds)
        return EndToEnd({u.last: everything[u.detail["gives"]] for u in exposed}, next(iter(plain.values())))


_CALLS_MERGED = (
    "the exporter's node names do not tell this module's calls apart (a module called again, as ALBERT's "
    "shared layer): its nodes are not one call's"
)


def _descendants(calls: list[LayerCall]) -> dict[tuple[str, int], set[tuple[str, int]]]:
    """Each module call, as (path, call index), with the calls the trace ran inside it."""
    counts: dict[str, int] = {}
    at: dict[str, tuple[str, int]] = {}
    parent: dict[str, str | None] = {}
    inside: dict[tuple[str, int], set[tuple[str, int]]] = {}
    for call in calls:
        index = counts.get(call.path, 0)
        counts[call.path] = index + 1
        at[call.key], parent[call.key] = (call.path, index), call.parent
        inside[(call.path, index)] = set()
        outer = call.parent
        while outer is not None:
            inside[at[outer]].add((call.path, index))
            outer = parent[outer]
    return inside


def _nodes_match_the_call(call, nodes: list, owned: dict[int, list], groups: dict, inside: dict) -> bool:
    """Whether the nodes named for `call` are its own call's and all of it: none traced in a call
    the reference ran outside it, and every call it ran inside it with nodes of its own among them.
    The TorchScript exporter names a module's second call `_1` at some scope levels only: ALBERT's
    shared layer, called once per depth, had its two calls' nodes under one name."""
    own = inside.get(call, set())
    for node in nodes:
        owners = owned[id(node)]
        if any(o in inside and o not in own for o in owners[_depth(owners, call) :]):
            return False
    ids = {id(n) for n in nodes}
    return all({id(n) for n in groups[d]} <= ids for d in own if d in groups)


def _depth(owners: list[tuple[str, int]], call: tuple[str, int]) -> int:
    """Where, in a node's owners (outermost first), the ones inside `call` begin."""
    return next((i + 1 for i, owner in enumerate(owners) if owner == call), len(owners))


def _distance(a: np.ndarray, b: np.ndarray) -> float:
    """How far apart two arrays of one shape are (equal infinities, a mask's -inf, are no distance)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):
        return float(np.nan_to_num(np.where(a == b, 0.0, np.abs(a - b)), nan=np.inf).sum())


def onnxruntime(name: str, model, inputs, optimized: bool) -> OnnxPort:
    return OnnxPort(name, model, inputs, optimized=optimized, apart=True)
