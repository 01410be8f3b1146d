"""The self-test of the quantization causes, entered beside the catalogue's (cause_selftest): each
bug injected into a zoo model's ONNX Runtime int8 graph (ort-int8, per channel), judged as a
user's quantized file, with the correct quantized ports beside it.

Per model, each cause is injected at the first layer whose output it changes beyond its noise
(a zero point shifted on the weights after a LayerNorm changes nothing: their inputs sum to 0):
- a weight scale doubled (the step declared 2x the one quantized with), factor 2;
- a weight zero point shifted by 3 steps;
- per-channel steps dequantized along the other axis of a square weight (axis: the one quantized along);
- per-channel steps over integers quantized with one step for the tensor (tensor_step: the
  largest channel step, what a per-tensor symmetric quantizer takes);
- an int32 bias's step 1.5x input step x weight step, factor 1.5;
- where the CPU lacks VNNI: 8-bit weights, whose int8 kernels saturate (the graph run unfused does not).
Named right: that cause explains the injected layer, its parameter within 10%, and no cause is named
on another layer. Two bugs leave every unit within its noise (their clipping counted apart) and are
named end to end, at the point whose clipping changes the output most, and its unit:
- an activation's uint8 zero point set to 0, at the first point where that flags the output
  (zero_point: the one calibrated);
- the graph calibrated on other data: another draw of the inputs, or one at half their size, the
  first that flags the output (low, high: the range calibration on the inputs gives that point).
On the correct ports no cause may be named, at a unit or end to end.

torchao's ports (where torchao is installed) get the weight bugs a torchao `Int8Tensor` can hold,
each injected into one quantized Linear's weight in turn, in each port, until its layer is flagged:
its per-row steps doubled (factor 2); its integers 3 below those quantized (what a zero point
shifted by 3 steps dequantizes to: the tensor holds none of its own; shift 3); its integers
quantized again with the largest row's step under the per-row steps (tensor_step), on a Linear whose
rows' steps differ by more than the 2% the cause is tried at (elsewhere, per tensor is per row).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from accuracy.core.errors import OpbenchError
from accuracy.judge.verdicts import BEYOND, SUSPICIOUS
from accuracy.workflows.model import zoo
from accuracy.workflows.model.cause_selftest import NOT_INJECTED, NOT_NAMED, RIGHT, WRONG, Injection, parameter_close
from accuracy.workflows.model.ports.deploy import missing
from accuracy.workflows.model.quantization_causes import (
    AXIS,
    BIAS,
    LEAST_FACTOR,
    OTHER_RANGE,
    PER_TENSOR,
    SATURATES,
    SCALE,
    STUCK_ZERO,
    ZERO_POINT,
)
from accuracy.workflows.model.unit import CauseFinding

TORCHAO = (SCALE, ZERO_POINT, PER_TENSOR)  # the weight bugs an Int8Tensor can hold

MODELS = ("small_cnn", "small_transformer")
CORRECT_PORTS = ("ort-int8", "ort-int8-tensor", "ort-int8-dynamic")
TORCHAO_PORTS = ("torchao-int8-weight", "torchao-int8-dynamic")
SCALE_FACTOR, SHIFT, BIAS_FACTOR = 2.0, 3, 1.5
OTHER_SEED, NARROWER = 1, 0.5  # the other calibration data: PCG64 draws of the inputs' shape

FLAGGED = (SUSPICIOUS, BEYOND)  # a unit the port is wrong on


def _weight_nodes(graph) -> list:
    """The DequantizeLinear nodes of stored weights feeding a Conv, Gemm or MatMul, in order."""
    from accuracy.workflows.model.onnx_noise import LINEAR_OPS

    producer = {o: n for n in graph.node for o in n.output}
    return [
        producer[node.input[1]]
        for node in graph.node
        if node.op_type in LINEAR_OPS
        and node.input[1] in producer
        and producer[node.input[1]].op_type == "DequantizeLinear"
    ]


def _module(graph, dequantize) -> str:
    """The module path of the layer a weight's node belongs to (the exporter's scope)."""
    consumer = next(n for n in graph.node if dequantize.output[0] in n.input)
    return consumer.name.strip("/").split("/")[0]


def _initializer(graph, name: str):
    return next(t for t in graph.initializer if t.name == name)


def _scaled(graph, name: str, factor: float) -> None:
    from onnx import numpy_helper

    tensor = _initializer(graph, name)
    values = numpy_helper.to_array(tensor)
    tensor.CopyFrom(numpy_helper.from_array((values * factor).astype(values.dtype), name))


def _shifted(graph, name: str, shift: int) -> None:
    from onnx import numpy_helper

    tensor = _initializer(graph, name)
    values = numpy_helper.to_array(tensor)
    tensor.CopyFrom(numpy_helper.from_array((values.astype(np.int64) + shift).astype(values.dtype), name))


def _injections(graph) -> dict[str, list[tuple[object, Callable, object]]]:
    """Per cause: (the parameter injected, a change of a copy of the graph, the weight's node) for
    each weight it applies to, in order."""
    found: dict[str, list[tuple[object, Callable, object]]] = {}
    for node in _weight_nodes(graph):
        scale, zero = node.input[1], node.input[2]
        found.setdefault(SCALE, []).append((SCALE_FACTOR, lambda g, s=scale: _scaled(g, s, SCALE_FACTOR), node))
        found.setdefault(ZERO_POINT, []).append((SHIFT, lambda g, z=zero: _shifted(g, z, SHIFT), node))
        axis = next((a.i for a in node.attribute if a.name == "axis"), None)
        stored = next((t for t in graph.initializer if t.name == node.input[0]), None)
        if axis in (0, 1) and stored is not None and len(stored.dims) >= 2 and stored.dims[0] == stored.dims[1]:
            found.setdefault(AXIS, []).append((axis, lambda g, n=node.name: _flipped(g, n), node))
        scales = next((t for t in graph.initializer if t.name == scale), None)
        if axis is not None and stored is not None and scales is not None and len(scales.dims) == 1:
            change = lambda g, n=node: _per_tensor(g, n)  # noqa: E731
            found.setdefault(PER_TENSOR, []).append((_tensor_step(graph, scale), change, node))
        consumer = next(n for n in graph.node if node.output[0] in n.input)
        bias = next((n for n in graph.node if len(consumer.input) > 2 and consumer.input[2] in n.output), None)
        if bias is not None and bias.op_type == "DequantizeLinear" and _is_int32(graph, bias.input[0]):
            change = lambda g, s=bias.input[1]: _scaled(g, s, BIAS_FACTOR)  # noqa: E731
            found.setdefault(BIAS, []).append((BIAS_FACTOR, change, node))
    return found


def _tensor_step(graph, scale: str) -> float:
    from onnx import numpy_helper

    return float(np.max(numpy_helper.to_array(_initializer(graph, scale))))


def _per_tensor(graph, node) -> None:
    """A per-channel weight's integers quantized again with one step, the largest channel's, its
    per-channel steps kept: the integers a per-tensor quantizer gives, under per-channel steps."""
    from onnx import numpy_helper

    stored, scale = _initializer(graph, node.input[0]), numpy_helper.to_array(_initializer(graph, node.input[1]))
    integers = numpy_helper.to_array(stored)
    axis = next(a.i for a in node.attribute if a.name == "axis") % integers.ndim
    shape = [1] * integers.ndim
    shape[axis] = scale.size
    requantized = np.rint(integers * (scale.reshape(shape) / scale.max()))
    info = np.iinfo(integers.dtype)
    integers = np.clip(requantized, info.min, info.max).astype(integers.dtype)
    stored.CopyFrom(numpy_helper.from_array(integers, stored.name))


def _is_int32(graph, name: str) -> bool:
    import onnx

    tensor = next((t for t in graph.initializer if t.name == name), None)
    return tensor is not None and tensor.data_type == onnx.TensorProto.INT32


def _flipped(graph, name: str) -> None:
    node = next(n for n in graph.node if n.name == name)
    for attribute in node.attribute:
        if attribute.name == "axis":
            attribute.i = 1 - attribute.i


def _outcome(result: Any, cause: str, injected: object, path: str | None) -> tuple[str, CauseFinding | None, str]:
    """(outcome, the cause named at the injected layer, why) for one injected port's result."""
    named = [r for r in result.layers if _explains(r.cause)]
    if path is None:  # the kernels' saturation: wherever a unit is flagged
        flagged = [r for r in result.layers if r.verdict in FLAGGED]
        if not flagged:
            return NOT_NAMED, None, "no unit flagged"
        right = all(_explains(r.cause) and r.cause.name == cause for r in flagged)
        return (RIGHT if right else WRONG), flagged[0].cause, ""
    row = next((r for r in result.layers if r.path == path), None)
    found = row.cause if row is not None else None
    elsewhere = [r.path for r in named if r.path != path]
    if not found or not found.explains:
        return NOT_NAMED, found, "the layer was not flagged" if not found else "no cause explains it"
    entry = next((c for c in found.entries() if c.name == cause), None)
    if entry is None or elsewhere or not all(parameter_close(v, injected) for v in entry.parameters.values()):
        return WRONG, found, f"a cause named elsewhere too: {', '.join(elsewhere)}" if elsewhere else ""
    return RIGHT, found, ""


def _explains(cause: CauseFinding | None) -> bool:
    return cause is not None and cause.explains


def _first_flagging(
    name: str, model, given: dict, calls, graph, folder: Path, cause: str, options: list
) -> tuple | None:
    """The first injection of `cause` that flags its layer: (its result, the value, the layer), or why none."""
    import onnx

    from accuracy.workflows.model.ports.onnx_quantized import QuantizedOnnxFilePort
    from accuracy.workflows.model.sweep import evaluate_ports

    modules = dict(model.named_modules())
    for index, (value, change, node) in enumerate(options):
        if not _own_weights(graph, node, modules.get(_module(graph.graph, node))):
            continue  # a Conv with a BatchNorm folded in: its weights are not its module's
        copy = onnx.ModelProto()
        copy.CopyFrom(graph)
        change(copy.graph)
        path = folder / f"{name}_{index}.onnx"
        onnx.save(copy, path)
        label = f"mutant:{cause}"
        port = QuantizedOnnxFilePort(label, path, {}, model, given)
        results, _ = evaluate_ports([port], model, given, calls)
        layer = _module(graph.graph, node)
        row = next((r for r in results[0].layers if r.path == layer), None) if results else None
        if row is not None and row.verdict in FLAGGED:
            return results[0], value, layer
    return None


def _own_weights(graph, node, module) -> bool:
    """Whether the weight `node` dequantizes is `module`'s own, to within a step."""
    from accuracy.workflows.model.onnx_noise import declared_weights

    declared = next((d for d in declared_weights(graph) if node.output[0] in _inputs(graph, d["node"])), None)
    weight = getattr(module, "weight", None)
    if declared is None or weight is None:
        return False
    values = weight.detach().double().numpy()
    values = values.T if declared["transposed"] and values.ndim == 2 else values
    steps = float(np.max(declared["scale"]))
    return values.shape == declared["weight"].shape and bool(np.all(np.abs(values - declared["weight"]) <= steps))


def _inputs(graph, name: str) -> list[str]:
    return list(next(n for n in graph.graph.node if n.name == name).input)


def quantization_selftest(progress=None) -> Iterator[dict]:
    """Per zoo model: the quantization causes' injections and what the correct quantized ports named,
    in the form of cause_selftest.model_selftest's reports."""
    from accuracy.workflows.model import onnx_graph
    from accuracy.workflows.model.ports import build_port
    from accuracy.workflows.model.ports.onnx_quantized import QuantizedOnnxPort, _quantized, reduced_range
    from accuracy.workflows.model.sweep import evaluate_ports
    from accuracy.workflows.model.trace import run_reference

    for name in MODELS:
        started = time.perf_counter()
        model = getattr(zoo, name)().eval()
        given = zoo.example_inputs(name)
        calls, _ = run_reference(model, given, name)
        exported = onnx_graph.export(model, given)
        graph = _quantized(exported, [given])
        injections = []
        by_cause = _injections(graph.graph)
        with tempfile.TemporaryDirectory() as folder:
            for cause in (SCALE, ZERO_POINT, AXIS, PER_TENSOR, BIAS):
                if cause not in by_cause:
                    why = "no weight of this model takes it"
                    injections.append(Injection(cause, name, outcome=NOT_INJECTED, why=why))
                    continue
                found = _first_flagging(name, model, given, calls, graph, Path(folder), cause, by_cause[cause])
                if found is None:
                    injections.append(Injection(cause, name, outcome=NOT_NAMED, why="no injection flagged its layer"))
                    continue
                result, value, layer = found
                outcome, named, why = _outcome(result, cause, value, layer)
                injections.append(_injection(cause, name, layer, outcome, named, value, why))
            subject = (name, model, given, calls, Path(folder))
            injections.append(_stuck_zero(subject, graph))
            injections.append(_other_range(subject, exported, graph))
        if reduced_range():
            full = _quantized(exported, [given], reduce=False)
            port = QuantizedOnnxPort("mutant:saturates", model, given, full, exported, "8-bit weights without VNNI")
            results, _ = evaluate_ports([port], model, given, calls)
            outcome, named, why = _outcome(results[0], SATURATES, None, None)
            injections.append(_injection(SATURATES, name, None, outcome, named, None, why))
        correct = [p for p in (build_port(c, model, given) for c in CORRECT_PORTS) if not isinstance(p, str)]
        yield _reported(f"{name} (quantized)", started, injections, correct, (model, given, calls), progress)
        if missing("torchao") is None:
            started = time.perf_counter()
            built = [build_port(c, model, given) for c in TORCHAO_PORTS]
            correct = [p for p in built if not isinstance(p, str)]  # a port absent here has no mutants either
            injections = [_torchao_injection(p.name, c, (name, model, given, calls)) for p in correct for c in TORCHAO]
            yield _reported(f"{name} (torchao)", started, injections, correct, (model, given, calls), progress)


def _reported(label: str, started: float, injections: list, correct: list, subject: tuple, progress) -> dict:
    """A model's report: its injections, and the causes named on its correct ports."""
    from accuracy.workflows.model.sweep import evaluate_ports

    model, given, calls = subject
    results, _ = evaluate_ports(correct, model, given, calls)
    causes = [(r.port, row.path, row.cause) for r in results for row in r.layers]
    named_on_correct = [f"{port}: {path}: {cause.name}" for port, path, cause in causes if cause and cause.explains]
    ends = [(r.port, r.end_to_end.cause) for r in results]
    named_on_correct += [f"{port}: output: {cause.name}" for port, cause in ends if cause and cause.explains]
    report = {
        "model": label,
        "injections": [i.as_dict() for i in injections],
        "correct_ports": [p.name for p in correct],
        "named_on_correct": named_on_correct,
        "seconds": time.perf_counter() - started,
    }
    if progress:
        progress(report["model"], report["seconds"])
    return report


def _torchao_bug(weight, cause: str) -> float | int:
    """A torchao Int8Tensor changed in place as `cause` would leave it; the parameter injected."""
    import torch

    with torch.no_grad():
        if cause == SCALE:
            weight.scale.mul_(SCALE_FACTOR)
            return SCALE_FACTOR
        integers = weight.qdata.to(torch.int32)
        if cause == ZERO_POINT:
            weight.qdata.copy_((integers - SHIFT).clamp(-128, 127).to(torch.int8))
            return SHIFT
        steps = weight.scale.reshape(-1, *[1] * (integers.ndim - 1))
        weight.qdata.copy_(torch.round(integers * steps / steps.max()).to(torch.int8))
        return float(steps.max())


def _steps_differ(weight) -> bool:
    """Whether a torchao weight's per-row steps differ enough for the per-tensor cause to be tried on it."""
    steps = weight.scale.float().reshape(-1)
    return bool(steps.max() - steps.min() > LEAST_FACTOR * steps.max())


def _torchao_injection(port_name: str, cause: str, subject: tuple) -> Injection:
    """`cause` injected into each of a torchao port's quantized Linear layers in turn, until one is flagged."""
    from accuracy.workflows.model.ports.torchao_port import _quantized_weight
    from accuracy.workflows.model.sweep import evaluate_ports

    name, model, given, calls = subject
    weights = {p: _quantized_weight(m) for p, m in _torchao(port_name, model, given).quantized.named_modules()}
    paths = [p for p, w in weights.items() if w is not None and (cause != PER_TENSOR or _steps_differ(w))]
    if not paths:  # small_cnn's fc: its rows' steps within 1% of each other
        why = "no quantized Linear whose rows' steps differ by more than the cause's 2% (per tensor is per row there)"
        return Injection(cause, f"{name} {port_name}", outcome=NOT_INJECTED, why=why)
    ratios = []
    for path in paths:
        port = _torchao(port_name, model, given)
        port.name = f"mutant:{cause}"
        injected = _torchao_bug(port.quantized.get_submodule(path).weight, cause)
        results, _ = evaluate_ports([port], model, given, calls)
        row = next((r for r in results[0].layers if r.path == path), None)
        if row is not None and row.verdict in FLAGGED:
            outcome, named, why = _outcome(results[0], cause, injected, path)
            return _injection(cause, f"{name} {port_name}", path, outcome, named, injected, why)
        if row is not None and row.quantization:
            ratios.append(f"{path} {row.quantization['ratio']:.3g}x its noise")
    why = f"no injection flagged its layer ({', '.join(ratios)})"
    return Injection(cause, f"{name} {port_name}", outcome=NOT_NAMED, why=why)


def _torchao(port_name: str, model, given: dict):
    """The torchao port `port_name` as the port table builds it, its variant bound there."""
    from accuracy.workflows.model.ports import build_port
    from accuracy.workflows.model.ports.torchao_port import TorchaoPort

    port = build_port(port_name, model, given)
    if not isinstance(port, TorchaoPort):
        raise OpbenchError(f"{port_name}: {port}")
    return port


def _judged_file(subject: tuple, graph, label: str) -> Any:
    """A quantized graph judged as a user's file: its result, or None where nothing was compared."""
    import onnx

    from accuracy.workflows.model.ports.onnx_quantized import QuantizedOnnxFilePort
    from accuracy.workflows.model.sweep import evaluate_ports

    name, model, given, calls, folder = subject
    path = folder / f"{name}_{label.replace(' ', '_')}.onnx"
    onnx.save(graph, path)
    results, _ = evaluate_ports([QuantizedOnnxFilePort(f"mutant:{label}", path, {}, model, given)], model, given, calls)
    return results[0] if results else None


def _value_layer(graph, value: str) -> str | None:
    """The module whose node gives `value` (the exporter's scope), or None for a model input."""
    producer = next((n for n in graph.node if value in n.output), None)
    return producer.name.strip("/").split("/")[0] if producer is not None else None


def _end_outcome(
    result: Any, cause: str, close: Callable[[CauseFinding], bool]
) -> tuple[str, CauseFinding | None, str]:
    """(outcome, the cause named end to end, why) for a bug that leaves each unit within its noise:
    named right where the cause explains the output, at the unit of the point it names, with its
    parameters `close`, and no unit is given a cause."""
    if result is None or result.end_to_end.verdict != BEYOND:
        return NOT_NAMED, None, "the output was not flagged"
    found = result.end_to_end.cause
    if not found or not found.explains:
        return NOT_NAMED, found, "no clipping explains the output"
    elsewhere = [r.path for r in result.layers if _explains(r.cause)]
    if found.name != cause or elsewhere or not close(found):
        return WRONG, found, f"a cause named at {', '.join(elsewhere)} too" if elsewhere else ""
    return RIGHT, found, ""


def _stuck_zero(subject: tuple, graph) -> Injection:
    """Each uint8 activation zero point above 0 set to 0 in turn, until the output is flagged."""
    import onnx
    from onnx import numpy_helper

    name = subject[0]
    producer = {o: n for n in graph.graph.node for o in n.output}
    tried: set[str] = set()
    for node in graph.graph.node:
        source = producer.get(node.input[0]) if node.input else None
        if node.op_type != "DequantizeLinear" or source is None or source.op_type != "QuantizeLinear":
            continue
        zero = next((t for t in graph.graph.initializer if len(node.input) > 2 and t.name == node.input[2]), None)
        layer = _value_layer(graph.graph, source.input[0])
        if zero is None or zero.name in tried or layer is None or zero.data_type != onnx.TensorProto.UINT8:
            continue
        tried.add(zero.name)
        value = int(numpy_helper.to_array(zero).item())
        if value == 0:
            continue
        copy = onnx.ModelProto()
        copy.CopyFrom(graph)
        _initializer(copy.graph, zero.name).CopyFrom(numpy_helper.from_array(np.zeros((), np.uint8), zero.name))
        result = _judged_file(subject, copy, STUCK_ZERO)
        if result is None or result.end_to_end.verdict != BEYOND:
            continue

        def close(found: CauseFinding, layer=layer, value=value) -> bool:
            return found.path == layer and parameter_close(found.parameters["zero_point"], value)

        outcome, named, why = _end_outcome(result, STUCK_ZERO, close)
        return _injection(STUCK_ZERO, name, layer, outcome, named, value, why)
    return Injection(STUCK_ZERO, name, outcome=NOT_NAMED, why="no zero point set to 0 flagged the output")


def _other_range(subject: tuple, exported, graph) -> Injection:
    """The export calibrated on another draw of the inputs (or one at half their size), the first
    that flags the output; the range fitted against what calibration on the inputs gives."""
    from accuracy.workflows.model.onnx_noise import Clipping
    from accuracy.workflows.model.ports.onnx_quantized import _quantized

    name, _model, given, _calls, _folder = subject
    declared = {r.value: (r.low, r.high) for r in Clipping(graph, given, graph.graph.output[0].name).ranges()}
    rng = np.random.Generator(np.random.PCG64(OTHER_SEED))
    for size in (1.0, NARROWER):
        other = {k: (size * rng.standard_normal(v.shape)).astype(v.dtype) for k, v in given.items()}
        result = _judged_file(subject, _quantized(exported, [other]), f"{OTHER_RANGE} {size}")
        if result is None or result.end_to_end.verdict != BEYOND:
            continue

        def close(found: CauseFinding) -> bool:
            low, high = declared.get(found.value or "", (np.nan, np.nan))
            fitted = found.parameters
            width = high - low
            right_place = found.path == _value_layer(graph.graph, found.value or "")
            return right_place and abs(fitted["low"] - low) <= 0.1 * width and abs(fitted["high"] - high) <= 0.1 * width

        outcome, named, why = _end_outcome(result, OTHER_RANGE, close)
        where = (named.path if named else None) or "its output"
        return _injection(OTHER_RANGE, name, where, outcome, named, f"calibrated on a draw x {size}", why)
    return Injection(OTHER_RANGE, name, outcome=NOT_NAMED, why="calibrating on other draws flagged no output")


def _injection(cause: str, model: str, path, outcome: str, named: CauseFinding | None, value, why: str) -> Injection:
    injection = Injection(cause, model, path or "its int8 kernels", outcome, injected=value, why=why)
    if named:
        injection.named = named.name if named.explains else None
        injection.parameters = named.parameters
    return injection
