"""`--onnx LABEL=FILE`: an ONNX model the user exported or optimized elsewhere, run by ONNX Runtime.

Its values are paired with module calls:
- by the exporter's names: the reference model is exported here the same way (TorchScript's
  exporter, else the dynamo exporter), which names each module's output value as the user's
  export did (`/encoder/layer.0/output/LayerNorm/LayerNormalization_output_0`, `linear_3`); an
  optimizer (onnxruntime.transformers' fusions) keeps the names of the values it keeps;
- by a mapping file (`--onnx-map LABEL=FILE`, JSON: ONNX value name -> module path, or a call's
  key `path#2`) for the rest.

A module's unit is the graph between its paired output and the values it reads from outside it:
the outputs of other modules, the graph inputs, or values computed by nodes the exporter placed
outside the module. A module whose output an optimizer fused away (a Linear whose bias went into
BiasGelu or SkipLayerNormalization) is judged together with the module after it (one `Unit` of
several calls) where it feeds only that one, or else inside the unit of a module around it (the
block's output sublayer, whose output the fused node gives).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from accuracy.backends.pytorch import tensor_to_numpy as to_numpy
from accuracy.core.errors import OpbenchError, first_line
from accuracy.core.files import not_a_file
from accuracy.workflows.model.export_cache import cached_export
from accuracy.workflows.model.ports.onnx_export import OnnxPort
from accuracy.workflows.model.trace import LayerCall
from accuracy.workflows.model.unit import Unit

FLAG = "--onnx"
NO_VALUE = "no value of the ONNX graph is its output: fused with the code after it, or folded away at export"


def _regular_file(flag: str, label: str, path: Path | str) -> Path:
    path = Path(path)
    if path.is_symlink():
        raise OpbenchError(f"{flag} {label}={path}: a symbolic link; give the file itself")
    if not path.is_file():
        raise OpbenchError(f"{flag} {label}={path}: {not_a_file(path)}")
    return path


def read_onnx(label: str, path: Path | str):
    """The ONNX ModelProto in `path`; a symbolic link, a directory, a missing file or anything
    but an ONNX model (with its external data where it has some) is one line."""
    import onnx

    path = _regular_file(FLAG, label, path)
    try:
        model = onnx.load(path)
    except Exception as exc:
        raise OpbenchError(f"{FLAG} {label}={path}: not an ONNX model: {first_line(exc)}") from None
    if not model.graph.node:
        raise OpbenchError(f"{FLAG} {label}={path}: not an ONNX model: it holds no graph")
    return model


def read_mapping(label: str, path: Path | str) -> dict[str, str]:
    """The user's pairing file: a JSON object of ONNX value name -> module path (or call key)."""
    path = _regular_file("--onnx-map", label, path)
    try:
        mapping = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise OpbenchError(f"--onnx-map {label}={path}: not JSON: {first_line(exc)}") from None
    if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
        raise OpbenchError(f"--onnx-map {label}={path}: expected a JSON object of ONNX value name -> module path")
    return mapping


class OnnxFilePort(OnnxPort):
    """The user's ONNX model, run as written: ONNX Runtime's own graph optimizations off (the file
    is what was optimized, offline; ONNX Runtime 1.31 fails to load some optimizer outputs with
    its own on: "AddInitializedOrtValue Attempt to replace the existing tensor")."""

    brought = True

    def __init__(self, label: str, path: Path | str, mapping: dict[str, str], model, inputs: dict[str, np.ndarray]):
        self.model, self.inputs, self.mapping = model, inputs, mapping
        where = f"{FLAG} {label}={path}"
        try:
            super().__init__(label, model, inputs, optimized=False, exported=read_onnx(label, path))
        except OpbenchError as exc:
            raise OpbenchError(f"{where}: {exc}") from None
        except Exception as exc:
            raise OpbenchError(
                f"{where}: ONNX Runtime cannot run it on the model's inputs: {first_line(exc)}"
            ) from None
        self.description = f"ONNX Runtime on {Path(path).name} (given with --onnx), as written"
        self._declare_shapes()

    def _declare_shapes(self) -> None:
        """Every value's type and shape, from the probe run: shape inference knows no contrib op
        (com.microsoft's SkipLayerNormalization), and the sub-graph extractor needs them."""
        import onnx

        graph = self.graph.model.graph
        declared = {v.name for v in (*graph.value_info, *graph.input, *graph.output)}
        for name, value in self.values.items():
            if name not in declared:
                kind = onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
                graph.value_info.append(onnx.helper.make_tensor_value_info(name, kind, value.shape))

    def _paired(self, calls: list[LayerCall]) -> dict[str, str]:
        """Each module call's output value in this graph, by call key: the exporter's names, then the mapping."""
        from accuracy.workflows.model import onnx_graph

        def named(export) -> tuple[dict[str, str], dict[str, list[str]]]:
            """(call key -> value, the calls one exported node covers: a BatchNorm in its Conv)."""
            try:
                exported = cached_export(export, self.model, self.inputs)
                own = OnnxPort("names", self.model, self.inputs, optimized=False, exported=exported)
            except Exception:  # the model does not export here: the mapping alone pairs
                return {}, {}
            units = [u for u in own.units(calls) if u.detail]
            found = {
                u.last: u.detail["gives"]
                for u in units
                if u.detail["gives"] in self.values
                and self.values[u.detail["gives"]].shape == tuple(expected[u.last].output.shape)
            }
            return found, {u.last: u.covers for u in units if len(u.calls) > 1}

        expected = {c.key: c for c in calls if c.output is not None}
        paired, self.folded = named(onnx_graph.export)
        if len(paired) < len(expected) / 2:  # TorchScript's exporter took the model; the user's may be dynamo
            dynamo, folded = named(onnx_graph.dynamo_export)
            if len(dynamo) > len(paired):
                paired, self.folded = dynamo, folded
        first_call: dict[str, str] = {}
        for call in calls:
            first_call.setdefault(call.path, call.key)
        for value, module in self.mapping.items():
            key = module if module in expected else first_call.get(module)
            if key is None or key not in expected:
                raise OpbenchError(f"--onnx-map {self.name}: {module!r} names no module call with a tensor output")
            if value not in self.values:
                raise OpbenchError(f"--onnx-map {self.name}: {value!r} names no value of the ONNX graph")
            if self.values[value].shape != tuple(expected[key].output.shape):
                raise OpbenchError(
                    f"--onnx-map {self.name}: {value!r} has shape {self.values[value].shape}, "
                    f"{key}'s output {tuple(expected[key].output.shape)}"
                )
            paired[key] = value
        return paired

    def units(self, calls):
        paired = self._paired(calls)
        owners: dict[str, list[str]] = {}
        for key, value in paired.items():
            owners.setdefault(value, []).append(key)
        by_key = {c.key: c for c in calls}
        order = {c.key: i for i, c in enumerate(calls)}
        units: dict[str, Unit] = {}
        grouped: set[str] = set()
        for call in calls:
            if call.reason:
                units[call.key] = Unit([call], call.reason)
                continue
            value = paired.get(call.key)
            if value is None:
                continue  # fused away: judged with the module after it, or inside one around it
            reads, nodes = self._closure(call, value, owners, by_key, paired)
            group = [by_key[k] for k in self.folded.get(call.key, [call.key])]
            matched = self._matched(reads, group[0])
            while matched is None:  # a chain the optimizer fused: Linear (bias) + Gelu -> BiasGelu
                before = by_key.get(group[0].producers[0] or "") if len(group[0].producers) == 1 else None
                if before is None or before.key in paired or before.key in grouped or before.reason:
                    break
                group.insert(0, before)
                matched = self._matched(reads, before)
            if matched is None:
                sources = self._sources(call, reads, nodes, owners, by_key)
                if sources is not None:  # a norm fused with the residual adds before it
                    detail = {"reads": reads, "sources": sources, "gives": value, "nodes": [n.name for n in nodes]}
                    units[call.key] = Unit([call], detail=detail)
                    continue
                why = f"its value {value} is computed from {', '.join(reads) or 'constants'}, not from its inputs alone"
                units[call.key] = Unit([call], why + ": fused with the code around it")
                continue
            grouped |= {c.key for c in group}
            detail = {"reads": reads, "order": matched, "gives": value, "nodes": [n.name for n in nodes]}
            units[group[0].key] = Unit(group, detail=detail)
        for call in calls:
            if call.key not in units and call.key not in grouped:
                units[call.key] = Unit(
                    [call],
                    "no value of the ONNX graph is its output: fused with the code after it, or folded away at export",
                )
        return sorted(units.values(), key=lambda u: order[u.key])

    def _closure(self, call: LayerCall, value: str, owners: dict, by_key: dict, paired: dict):
        """(the values it reads, its nodes): the graph from `value` back to the values made outside
        the call: other modules' outputs, graph inputs, values of nodes the exporter placed outside
        it (not those of a module whose output was fused away: a Linear's MatMul before BiasGelu)."""
        kept = {by_key[k].path for k in paired}

        def inside(key: str | None) -> bool:
            while key is not None:
                if key == call.key:
                    return True
                key = by_key[key].parent
            return False

        from accuracy.workflows.model.onnx_graph import node_scopes

        reads: list[str] = []
        nodes: list = []
        seen: set[str] = set()
        stack = [value]
        while stack:
            name = stack.pop()
            if name in seen or name in self.graph.constants:
                continue
            seen.add(name)
            node = self.graph.producer.get(name)
            scopes = node_scopes(node, self.modules) if node is not None else None
            made_outside = scopes is not None and call.path not in scopes and (not scopes or scopes[-1] in kept)
            if name != value and (node is None or made_outside or any(not inside(k) for k in owners.get(name, []))):
                reads.append(name)
                continue
            if node is None:  # the call's output is a graph input
                reads.append(name)
                continue
            if all(n is not node for n in nodes):
                nodes.append(node)
            stack += [i for i in reversed(node.input) if i]
        return reads, nodes

    def _sources(self, call: LayerCall, reads: list[str], nodes: list, owners: dict, by_key: dict) -> list | None:
        """The reference's own values of `reads` (other modules' outputs, graph inputs), where the
        nodes between them and the call's output are fused nodes or the code of the modules around
        it: a SkipLayerNormalization computing a block's residual add, then the next norm. The
        float32 adds it holds are PyTorch's, so the norm is fed its own recorded input, and judged
        on it; nodes of another module on the way (a Linear's MatMul) would add their own rounding."""
        around, key = {""}, call.key
        while key is not None:
            around.add(by_key[key].path)
            key = by_key[key].parent
        from accuracy.workflows.model.onnx_graph import node_scopes

        for node in nodes:
            scopes = node_scopes(node, self.modules)
            if scopes is not None and (scopes[-1] if scopes else "") not in around:
                return None
        sources = []
        for name in reads:
            made_by = [by_key[k] for k in owners.get(name, []) if by_key[k].output is not None]
            if made_by:
                sources.append(to_numpy(made_by[0].output))
            elif name in self.input_names:
                sources.append(np.ascontiguousarray(self.inputs[name]))
            else:
                return None
        return sources

    def isolated(self, unit, inputs):
        if "sources" not in unit.detail:
            return super().isolated(unit, inputs)
        gives = unit.detail["gives"]
        feeds = dict(zip(unit.detail["reads"], unit.detail["sources"], strict=True))
        return self.onnx_graph.run(self._session(unit), feeds, [gives])[gives]

    def _matched(self, reads: list[str], call: LayerCall) -> list[int] | None:
        """Which of the call's inputs each read value is, or None where one is none of them."""
        order, free = [], list(range(len(call.inputs)))
        for name in reads:
            match = self._closest(name, call.inputs, free)
            if match is None:
                return None
            order.append(match)
            free.remove(match)
        return order
