"""A whole torch model as an ONNX graph: export, the node-to-module map, isolated sub-graphs.

Two exporters, tried in turn:
- `torch.onnx.export(dynamo=False)` (the TorchScript exporter) names every node after the module
  scopes it was traced in, e.g. `/layer1/layer1.0/conv1/Conv`, with `_1`, `_2` appended to a
  module's second and third call (`/layer1/layer1.0/relu_1/Relu`). It folds an eval-mode
  BatchNorm into the Conv before it, and a Dropout away: such modules have no nodes of their own,
  and the caller pairs them with the node that absorbed them.
- Where it fails (transformers' decoders: keyword inputs, caches, vmap-built masks), the dynamo
  exporter (`dynamo=True`, onnxscript), on the inputs as keywords with `use_cache=False`. It
  records each node's module scopes, outermost first, in the node's `pkg.torch.onnx.name_scopes`
  metadata (`['', 'layers.0', 'layers.0.self_attn', 'layers.0.self_attn.q_proj', 'linear']`:
  the root, full module paths, then the FX node's name), but not which call of a module a node
  belongs to: a module's calls are the separate runs of consecutive nodes inside its scope.

Every module at every level gets its nodes: a parent's are its children's and its own (the
attention core, a residual add). Isolated sub-graphs come from `onnx.utils.Extractor`, which keeps
every node between the given input and output tensors (the weights' Identity nodes included).

A graph's weights can live apart from it, in one file (`weights_apart`): the proto, each unit's
sub-graph and the serialized bytes each session is made from then hold only where each weight is,
and each session reads its own weights from the file (Qwen2.5-0.5B's 2 GB were copied into every
one of these, and the process passed 24 GB).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import io
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from accuracy.core.errors import OpbenchError, first_line, quiet_stderr

OPSET = 17  # LayerNormalization is an ONNX op from opset 17 on
DYNAMO_OPSET = 18  # the opset onnxscript's torch library is written for
SCOPES = "pkg.torch.onnx.name_scopes"  # the dynamo exporter's node metadata: its module scopes
_CALL_SUFFIX = re.compile(r"(.+)_(\d+)")
WEIGHTS_FILE = "weights.bin"  # a graph's weights apart from it (`weights_apart`), in its folder
APART_BYTES = 1024  # smaller constants (shapes, scalars) stay in the proto: shape inference reads them
# ONNX Runtime's option for a model given as bytes whose weights are in a file: the file's folder
EXTERNAL_FOLDER = "session.model_external_initializers_file_folder_path"


def export(model, inputs: dict[str, np.ndarray]):
    """The ONNX ModelProto of `model` on `inputs` (by argument name): the TorchScript exporter's,
    or where it fails the dynamo exporter's; an op neither can translate is named."""
    import onnx
    import torch

    names = list(inputs)
    args = tuple(torch.tensor(inputs[k]) for k in names)  # copies: tracing runs the forward, which may change them
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
                input_names=names,
                do_constant_folding=True,
            )
        return onnx.load_from_string(buffer.getvalue())
    except Exception as exc:
        text = first_line(exc)
    try:
        return dynamo_export(model, inputs)
    except Exception as exc:
        dynamo = _dynamo_reason(exc)
    op = re.search(r"operator '([^']+)'", text)
    named = f"op {op.group(1)} does not export: " if op else ""
    raise OpbenchError(
        f"the model does not export to ONNX (opset {OPSET}): {named}{text}; nor with the dynamo exporter: {dynamo}"
    ) from None


def _dynamo_reason(exc: Exception) -> str:
    """The dynamo exporter's one line: its exception summary's first cause (the op it has no ONNX
    function for), not its banner of next steps."""
    for line in str(exc).splitlines():
        if line.startswith("<class ") and ">: " in line:
            return line.partition(">: ")[2]
    return first_line(exc)


def dynamo_export(model, inputs: dict[str, np.ndarray]):
    """The dynamo exporter's graph, the inputs given as keywords and caches off (a cache is state
    the graph would carry as extra inputs and outputs), unoptimized: every node keeps its scopes."""
    import torch

    kwargs: dict = {k: torch.tensor(v) for k, v in inputs.items()}  # copies, as in `export`
    if "use_cache" in inspect.signature(model.forward).parameters and "use_cache" not in kwargs:
        kwargs["use_cache"] = False
    with warnings.catch_warnings(), quiet_stderr(), contextlib.redirect_stdout(io.StringIO()), torchlib_read_once():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            model, (), kwargs=kwargs, dynamo=True, opset_version=DYNAMO_OPSET, optimize=False, verbose=False
        )
    if program is None:
        raise OpbenchError("the dynamo exporter gave no program")
    return program.model_proto


# [(the torchlib registry's contents, onnxscript's list of its functions for them)]: one a process
_TORCHLIB: list[tuple[tuple, list]] = []


def torchlib_read_once():
    """Each dynamo export (this module's, generation_onnx_cache's) builds its ONNX registry from
    onnxscript's torchlib, whose list of functions re-parses the source of each of its ~1,000
    traced functions for their domain (0.3 CPU-s an export here). The list is made again only where
    the torchlib registry's functions changed since it was last made; otherwise a copy of it, of
    the same functions."""
    import importlib

    from onnxscript.function_libs.torch_lib import ops, registration
    from torch.onnx._internal._lazy_import import onnxscript_apis

    from accuracy.core.patching import replaced

    del ops  # imported for its registrations, as onnxscript's list imports it

    def once(listed):
        def torchlib_ops() -> list:
            contents = tuple(
                (name, (*f.overloads,), (*f.complex,)) for name, f in registration.default_registry.items()
            )
            if not _TORCHLIB or _TORCHLIB[0][0] != contents:
                _TORCHLIB[:] = [(contents, listed())]
            return list(_TORCHLIB[0][1])

        return torchlib_ops

    return replaced(importlib.import_module(onnxscript_apis._name), "get_torchlib_ops", once)


def module_call_of(node_name: str, modules: set[str]) -> tuple[str, int] | None:
    """(module path, call index) of the innermost scope a TorchScript-exported node was traced
    in, None outside any module."""
    calls = module_calls_of(node_name, modules)
    return calls[-1] if calls else None


def module_calls_of(node_name: str, modules: set[str]) -> list[tuple[str, int]]:
    """(module path, call index) of every scope a TorchScript-exported node was traced in,
    outermost first, up to the first segment that names no module; [] outside any module.

    Scope segments name a child by its attribute name, or a Sequential's child by the Sequential's
    name and its index (`layer1.0`, `downsample.0`), nested Sequentials by the outer one's name and
    both indices (`conv.0.0` under `features.1.conv.0`: torchvision's MobileNets and
    EfficientNets); a trailing `_N` is the module's (N+1)-th call."""
    segments = node_name.strip("/").split("/")[:-1]  # the last segment is the op
    path, found_calls = "", []
    for segment in segments:
        for name, index in [(segment, 0), *_suffixed(segment)]:
            candidates = [name, f"{path}.{name}" if path else name]
            head, dot, indices = name.partition(".")
            ancestor = path
            while dot and ancestor:  # a Sequential's child: `downsample.0` under `...downsample`
                if ancestor.rpartition(".")[2] == head:
                    candidates.append(f"{ancestor}.{indices}")
                    break
                ancestor = ancestor.rpartition(".")[0]
            found = next((c for c in candidates if c in modules and (not path or c.startswith(path))), None)
            if found:
                path = found
                found_calls.append((found, index))
                break
        else:
            break  # a name an optimizer added (`.../dense/MatMul/MatMulAddFusion`): the scopes so far
    return found_calls


def recorded_scopes(node, modules: set[str]) -> list[str] | None:
    """The module paths the dynamo exporter recorded for a node, outermost first ([] at the top
    level); None where it recorded none."""
    for prop in node.metadata_props:
        if prop.key == SCOPES:
            return [p for p in ast.literal_eval(prop.value)[1:-1] if p in modules]
    return None


def node_scopes(node, modules: set[str]) -> list[str] | None:
    """The module paths a node was traced in, by either exporter's record ([] at the top level);
    None for a node no exporter named (one an optimizer fused: `SkipLayerNorm_AddBias_0`)."""
    recorded = recorded_scopes(node, modules)
    if recorded is not None:
        return recorded
    return [path for path, _ in module_calls_of(node.name, modules)] if node.name.startswith("/") else None


def _suffixed(segment: str) -> list[tuple[str, int]]:
    match = _CALL_SUFFIX.fullmatch(segment)
    return [(match.group(1), int(match.group(2)))] if match else []


@dataclass
class Graph:
    """The exported graph and which tensors are constants (weights, folded values)."""

    model: Any  # onnx.ModelProto
    constants: set[str] = field(default_factory=set)
    producer: dict[str, Any] = field(default_factory=dict)
    consumers: dict[str, list] = field(default_factory=dict)
    folder: Path | None = None  # where its weights are, apart from it (`weights_apart`); None: in it

    @classmethod
    def of(cls, model, folder: Path | None = None) -> Graph:
        graph = cls(model, folder=folder)
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

    def owners(self, modules: set[str]) -> list[tuple[Any, list[tuple[str, int]]]]:
        """Each node (constant-only nodes left out) with the module calls it was traced in,
        outermost first."""
        owned = []
        runs: dict[str, int] = {}  # the dynamo exporter's: each module's calls so far
        inside: set[str] = set()  # the scopes of the node before
        for node in self.model.graph.node:
            if all(o in self.constants for o in node.output):
                continue
            paths = recorded_scopes(node, modules)
            if paths is not None:
                for path in paths:
                    if path not in inside:  # a new run of the module's nodes: its next call
                        runs[path] = runs.get(path, -1) + 1
                inside = set(paths)
                owned.append((node, [(p, runs[p]) for p in paths]))
            else:
                owned.append((node, module_calls_of(node.name, modules)))
        return owned

    def groups(self, modules: set[str]) -> dict[tuple[str, int], list]:
        """Nodes by the module call they were traced in, at every level: a node counts for its
        module and for each module around it."""
        groups: dict[tuple[str, int], list] = {}
        for node, owners in self.owners(modules):
            for owner in owners:
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
        """The isolated sub-graph from `inputs` to `outputs` (onnx.utils.Extractor, whose maps of
        the whole graph are built once for all the units, not once per unit)."""
        return self._extractor.extract_model(inputs, outputs)

    @functools.cached_property
    def _extractor(self):
        import onnx.utils

        return onnx.utils.Extractor(self.model)

    def with_outputs(self, names: list[str], dtypes: dict[str, np.dtype]):
        """The whole model with `names` (of numpy `dtypes`) exposed as extra outputs, read in one run."""
        import onnx

        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        _expose(model.graph, names, dtypes, keep=True)
        return model

    @contextlib.contextmanager
    def exposing(self, names: list[str], dtypes: dict[str, np.dtype] | None = None, keep: bool = True):
        """The model itself with `names` as extra outputs (`keep`: its own outputs kept too) for
        the length of the block, then as it was: a copy would hold a large model's weights twice
        (Qwen2.5-0.5B's 2 GB), beside the serialized bytes and the session each run makes."""
        import onnx

        graph = self.model.graph
        own = [onnx.ValueInfoProto.FromString(o.SerializeToString()) for o in graph.output]
        _expose(graph, names, dtypes, keep)
        try:
            yield self.model
        finally:
            del graph.output[:]
            graph.output.extend(own)

    def session(self, model, optimized: bool):
        """A session of `model` (this graph, or a sub-graph of it), its weights read from this
        graph's folder where they are apart."""
        return session(model, optimized, self.folder)

    def boundaries(self, modules: set[str]) -> set[str]:
        """The activation tensors each module call's nodes read from outside or give out: all a
        port pairs with the calls (`probe` of these alone)."""
        return {name for nodes in self.groups(modules).values() for names in self.boundary(nodes) for name in names}

    def probe(self, feeds: dict[str, np.ndarray], among: set[str] | None = None) -> dict[str, np.ndarray]:
        """Every activation tensor's value in one unoptimized run (those `among` names, where
        given): their true shapes and dtypes (shape inference leaves a transformer's dynamic
        dimensions unknown). Sequences (the dynamo exporter's SplitToSequence) are left out: no
        module gives one."""
        names = [
            o
            for n in self.model.graph.node
            for o in n.output
            if o and o not in self.constants and (among is None or o in among)
        ]
        with self.exposing(names, keep=False) as probe:
            values = run(self.session(probe, optimized=False), feeds)
        return {k: v for k, v in values.items() if isinstance(v, np.ndarray)}


def _expose(graph, names: list[str], dtypes: dict[str, np.dtype] | None, keep: bool) -> None:
    """`names` made outputs of `graph` (typed where `dtypes` gives theirs), after its own where
    `keep`, in their place otherwise."""
    import onnx

    if not keep:
        del graph.output[:]
    present = {o.name for o in graph.output}
    for name in names:
        if name in present:
            continue
        if dtypes is None:
            graph.output.append(onnx.ValueInfoProto(name=name))
        else:
            kind = onnx.helper.np_dtype_to_tensor_dtype(dtypes[name])
            graph.output.append(onnx.helper.make_tensor_value_info(name, kind, None))


def weights_apart(model, folder: Path) -> None:
    """The weights of `model` (initializers of APART_BYTES or more) written to one file in
    `folder` and dropped from the proto, in place: it keeps each one's place in the file, and a
    session made with that folder (`session`) reads them from there."""
    from onnx import external_data_helper

    external_data_helper.convert_model_to_external_data(
        model, all_tensors_to_one_file=True, location=WEIGHTS_FILE, size_threshold=APART_BYTES
    )
    external_data_helper.write_external_data_tensors(model, str(folder))  # clears each one's raw_data


NO_SPINNING = "session.intra_op.allow_spinning"


def session(model, optimized: bool, folder: Path | None = None):
    """An ONNX Runtime CPU session with its default optimizations (fusions included) or none;
    `folder`: where the model's weights are, where they are apart from it (`weights_apart`).
    Its threads sleep between runs instead of spinning: a port is judged by hundreds of short
    sessions, one run each, and spinning threads took the cores the judging needs (measured on 2
    cores: qwen2's and the MobileNets' ONNX tests 42.2 -> 32.8 CPU-s); a run's split, so its bits,
    is the same."""
    from accuracy.backends.onnxruntime import imported_quietly

    ort = imported_quietly()

    options = ort.SessionOptions()
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimized else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    options.log_severity_level = 4  # fatal only: a failed run is reported as one line by the caller
    options.add_session_config_entry(NO_SPINNING, "0")
    if folder is not None:
        options.add_session_config_entry(EXTERNAL_FOLDER, str(folder))
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run(sess, feeds: dict[str, np.ndarray], outputs: list[str] | None = None) -> dict[str, np.ndarray]:
    """The session's outputs by name, each copied out of ONNX Runtime's memory: an array it returns
    is a view that keeps the session's arena alive, and a port's kept unit outputs held every
    unit session's arena after the session was gone (Qwen2.5-0.5B: gigabytes per port)."""
    names = outputs or [o.name for o in sess.get_outputs()]
    values = sess.run(names, feeds)
    return {n: np.array(v, copy=True) if isinstance(v, np.ndarray) else v for n, v in zip(names, values, strict=True)}
