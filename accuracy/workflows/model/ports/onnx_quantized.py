"""Quantized ONNX Runtime ports: the model's export quantized by `onnxruntime.quantization`
(`ort-int8`: static QDQ, int8 weights per channel; `ort-int8-tensor`: per tensor;
`ort-int8-dynamic`: `quantize_dynamic`), or a user's quantized file (`--onnx LABEL=FILE` whose
graph holds quantize nodes).

Static ports are calibrated (MinMax, ONNX Runtime's default) on the model's inputs, or on
`--calibration FILE`. On an x86 CPU without VNNI their weights are 7-bit (`reduce_range`, as
`quantize_static`'s documentation advises there): ONNX Runtime's u8s8 kernels sum pairs of
uint8 x int8 products in int16 (VPMADDUBSW), which saturates; measured on small_cnn's Linear
(AVX2, 8-bit weights) at 6.8x its quantization noise, flagged, where the graph run unfused is
1.0x. Their activations are uint8 with a zero point, their weights int8 symmetric; ReLU and
Clip are kept as nodes (`QDQKeepRemovableActivations`), so that every module keeps its own unit.
Graph optimizations are on: ONNX Runtime fuses the QDQ pattern into its int8 kernels, as a
deployed model runs. A value holding inf or NaN on the calibration inputs (an attention mask's
fill) is left in float, the nodes giving and reading it excluded.

A unit of a quantized graph reads the float values its module's inputs are (before their
QuantizeLinear) and gives its output after its own QuantizeLinear -> DequantizeLinear: its quantize
points are the ones it meets from its inputs to its output, each judged by the error model of
accuracy.workflows.model.onnx_noise, on the same inputs it ran on.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from accuracy.core.errors import OpbenchError, first_line
from accuracy.workflows.model.export_cache import cached_export
from accuracy.workflows.model.ports.base import EndToEnd
from accuracy.workflows.model.ports.onnx_export import OnnxPort
from accuracy.workflows.model.ports.onnx_file import OnnxFilePort
from accuracy.workflows.model.unit import Unit

CALIBRATION = "--calibration"


class QuantizedGraph:
    """What the quantized ports share: units given their quantize points, and each unit's and the
    whole graph's predicted noise, kept as plain data for the judge (`noise`, by unit key)."""

    graph: Any  # accuracy.workflows.model.onnx_graph.Graph
    values: dict

    def _quantized_units(self, units: list[Unit]) -> list[Unit]:
        """The units with their output taken after its QuantizeLinear -> DequantizeLinear, their
        inputs before theirs."""
        self.noise: dict[str, dict] = {}
        self.paths: dict[str, str] = {}  # a value's unit, by the value the unit gives
        for unit in units:
            if unit.reason or "gives" not in unit.detail:
                continue
            gives = unit.detail["gives"]
            if gives not in self.values:
                unit.reason = f"the quantized graph has no value {gives}: the quantizer renamed or removed it"
                continue
            unit.detail["gives"] = self._dequantized(gives)
            self.paths[self._quantized_from(unit.detail["gives"])] = self.paths[gives] = unit.key
            unit.detail["reads"] = [self._quantized_from(name) for name in unit.detail["reads"]]
        return units

    def _quantized_from(self, name: str) -> str:
        """The float value a DequantizeLinear output was quantized from, where its QuantizeLinear
        is in the graph: a unit reads its inputs before their quantize point, which is its own."""
        dequantize = self.graph.producer.get(name)
        if dequantize is None or dequantize.op_type != "DequantizeLinear":
            return name
        quantize = self.graph.producer.get(dequantize.input[0])
        if quantize is None or quantize.op_type != "QuantizeLinear" or quantize.input[0] in self.graph.constants:
            return name
        return quantize.input[0]

    def _dequantized(self, name: str) -> str:
        consumers = self.graph.consumers.get(name, [])
        for q in (c for c in consumers if c.op_type == "QuantizeLinear"):
            for d in self.graph.consumers.get(q.output[0], []):
                if d.op_type == "DequantizeLinear":
                    return d.output[0]
        return name

    def _feeds_of(self, unit: Unit, inputs: list) -> dict[str, np.ndarray]:
        """What the unit's sub-graph was fed: the reference's inputs as the port receives them, or
        (a unit fused with the code around it, `sources`) the reference's own values."""
        from accuracy.backends.pytorch import tensor_to_numpy
        from accuracy.workflows.model.unit import port_inputs

        if "order" not in unit.detail:
            return dict(zip(unit.detail["reads"], unit.detail["sources"], strict=True))
        arrays = [tensor_to_numpy(t) for t in port_inputs(inputs, self.fmt)]  # type: ignore[attr-defined]
        return {name: arrays[i] for name, i in zip(unit.detail["reads"], unit.detail["order"], strict=True)}

    def isolated(self, unit, inputs):
        """The unit's quantized output, its noise predicted on the same feeds beside it."""
        out = super().isolated(unit, inputs)  # the port class this is mixed into
        self._unit_noise(unit, self._feeds_of(unit, inputs))
        return out

    def _unit_noise(self, unit: Unit, feeds: dict[str, np.ndarray]) -> None:
        from accuracy.workflows.model import onnx_graph
        from accuracy.workflows.model.onnx_noise import (
            declared_weights,
            expected_noise,
            is_quantized,
            modelled,
            quantize_points,
        )

        gives = unit.detail["gives"]
        sub = self.graph.extract(unit.detail["reads"], [gives])
        if not is_quantized(sub) or not modelled(sub):  # QOperator's integer ops: judged against rounding
            return
        noise = expected_noise(sub, feeds, [gives])[gives]
        facts = _facts(noise, quantize_points(sub))
        if len(unit.calls) == 1 and unit.calls[0].leaf:  # a layer's own weights, for the causes
            facts["weights"] = declared_weights(sub)
        if getattr(self, "optimized", False):  # the graph run unfused: what its int8 kernels should give
            facts["unfused"] = onnx_graph.run(onnx_graph.session(sub, optimized=False), feeds, [gives])[gives]
        self.noise[unit.key] = facts

    def _whole_noise(self, feeds: dict[str, np.ndarray], output: str) -> dict:
        """The output's predicted noise, and what the clipping causes read (run only where the
        output is flagged): the output with some points clipping, and each value's unit."""
        from accuracy.workflows.model.onnx_noise import Clipping, expected_noise, quantize_points

        model = self.graph.model
        noise = expected_noise(model, feeds, [output])[output]
        paths = {v: self._unit_of(v) for n in model.graph.node if n.op_type == "QuantizeLinear" for v in n.input[:1]}
        clipping = {"clipping_runs": Clipping(model, feeds, output), "paths": paths}
        return _facts(noise, quantize_points(model)) | clipping

    def _unit_of(self, value: str) -> str | None:
        """The unit that gives `value`, or else the first unit its value reaches (a value inside a
        unit, the model's input), following the graph forward."""
        paths: dict[str, str] = getattr(self, "paths", {})
        seen, frontier = {value}, [value]
        while frontier:
            name = frontier.pop(0)
            if name in paths:
                return paths[name]
            for consumer in self.graph.consumers.get(name, []):
                frontier += [o for o in consumer.output if o not in seen]
                seen.update(consumer.output)
        return None


def _facts(noise, points: list) -> dict:
    """A unit's predicted noise as plain data for the judge (workflows.model.quantization)."""
    outputs = [p for p in points if p.kind == "activation"]
    return {
        "base": noise.base,
        "variance": noise.variance,
        "clipping": noise.clipping,
        "clipped": noise.clipped,
        "points": [p.as_dict() for p in points],
        # its last activation point's step: TensorFlow Lite's rmse / scale divides by it
        "output_scale": float(outputs[-1].scale.max()) if outputs and outputs[-1].scale is not None else None,
    }


class QuantizedOnnxPort(QuantizedGraph, OnnxPort):
    """The model's export quantized here; its units are those of the float export, whose value
    names the quantizer keeps."""

    def __init__(self, name: str, model, inputs: dict[str, np.ndarray], quantized, float_export, how: str):
        self.float_port = OnnxPort(name, model, inputs, optimized=False, exported=float_export)
        super().__init__(name, model, inputs, optimized=True, exported=quantized)
        self.description = f"ONNX Runtime int8 ({how}; onnxruntime.quantization), graph optimizations on"

    def units(self, calls):
        return self._quantized_units(self.float_port.units(calls))

    def end_to_end(self, inputs, units) -> EndToEnd:
        run = super().end_to_end(inputs, units)
        run.noise = self._whole_noise(self._feeds(inputs), self.graph.model.graph.output[0].name)
        return run


class QuantizedOnnxFilePort(QuantizedGraph, OnnxFilePort):
    """A user's quantized ONNX file (`--onnx`), paired with modules by its value names."""

    def units(self, calls):
        return self._quantized_units(super().units(calls))

    def end_to_end(self, inputs, units) -> EndToEnd:
        from accuracy.workflows.model.onnx_noise import modelled

        run = super().end_to_end(inputs, units)
        if modelled(self.graph.model):
            run.noise = self._whole_noise(self._feeds(inputs), self.graph.model.graph.output[0].name)
        return run


def onnx_file_port(label: str, path, mapping: dict[str, str], model, inputs: dict[str, np.ndarray]) -> OnnxFilePort:
    """The port of a user's ONNX file: quantized where its graph holds quantize nodes."""
    from accuracy.workflows.model.onnx_noise import is_quantized
    from accuracy.workflows.model.ports.onnx_file import read_onnx

    if is_quantized(read_onnx(label, path)):
        return QuantizedOnnxFilePort(label, path, mapping, model, inputs)
    return OnnxFilePort(label, path, mapping, model, inputs)


def read_calibration(path: Path | str, inputs: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """The calibration batches in `path` (.npz, .safetensors, .pt: arrays by input name, each
    the model input's shape or a multiple of it along the first axis); anything else is one line."""
    from accuracy.workflows.array_files import read_arrays

    where = f"{CALIBRATION} {path}"
    try:
        arrays = read_arrays(path)
    except OpbenchError as exc:
        raise OpbenchError(f"{where}: {exc}") from None
    except Exception as exc:
        raise OpbenchError(f"{where}: not an arrays file: {first_line(exc)}") from None
    missing = [k for k in inputs if k not in arrays]
    if missing:
        raise OpbenchError(f"{where}: holds no {', '.join(missing)} (the model's inputs: {', '.join(inputs)})")
    counts = set()
    for name, given in inputs.items():
        array = np.asarray(arrays[name])
        rows = given.shape[0] if given.ndim else 1
        if array.shape[1:] != given.shape[1:] or array.ndim != given.ndim or array.shape[0] % rows:
            raise OpbenchError(
                f"{where}: {name} has shape {array.shape}; the model's input is {given.shape} "
                f"(give it that shape, or a multiple along the first axis)"
            )
        if not np.all(np.isfinite(array.astype(np.float64))):
            raise OpbenchError(f"{where}: {name} holds inf or NaN, which calibration cannot take")
        counts.add(array.shape[0] // rows)
    if len(counts) != 1:
        raise OpbenchError(f"{where}: its arrays hold different numbers of batches")
    batches = counts.pop()
    return [
        {name: np.ascontiguousarray(np.array_split(np.asarray(arrays[name]), batches)[b].astype(given.dtype))
         for name, given in inputs.items()}
        for b in range(batches)
    ]  # fmt: skip


def _reader(batches: list[dict[str, np.ndarray]]):
    from onnxruntime.quantization import CalibrationDataReader

    class Batches(CalibrationDataReader):
        """The calibration batches, each once (what ONNX Runtime's calibrator reads)."""

        def __init__(self):
            self.left = iter(batches)

        def get_next(self):
            return next(self.left, None)

    return Batches()


def reduced_range() -> bool:
    """7-bit weights: on x86 without VNNI, where ONNX Runtime's u8s8 products saturate in int16."""
    import platform

    from accuracy.backends.cpu_levels import cpu_flags

    flags = cpu_flags() or frozenset()
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i686")
    return x86 and not flags & {"avx512_vnni", "avx_vnni", "amx_int8"}


def _unquantizable(float_export, batches: list[dict[str, np.ndarray]]) -> list[str]:
    """The nodes that give or read a value holding inf or NaN on the calibration inputs (an
    attention mask's -inf fill, the Softmax after it): no step covers its range, so they are left
    in float, as a user would leave them."""
    from accuracy.workflows.model import onnx_graph

    graph = onnx_graph.Graph.of(float_export)
    names = set()
    for batch in batches:
        for value, array in graph.probe(batch).items():
            if np.issubdtype(array.dtype, np.floating) and not np.all(np.isfinite(array)):
                names.add(graph.producer[value].name)
                names.update(n.name for n in graph.consumers.get(value, []))
    return sorted(names)


def _quantized(
    float_export,
    batches: list[dict[str, np.ndarray]],
    reduce: bool | None = None,
    *,
    dynamic: bool = False,
    per_channel: bool = True,
):
    """The export quantized by onnxruntime.quantization, as the port `name` asks; `reduce`: 7-bit
    weights (None: where the CPU lacks VNNI, `reduced_range`)."""
    reduce = reduced_range() if reduce is None else reduce
    import logging

    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder) / "float.onnx", Path(folder) / "int8.onnx"
        onnx.save(float_export, source)
        logger = logging.getLogger()
        level = logger.level
        logger.setLevel(logging.ERROR)  # the quantizer's advice to pre-process, on the root logger
        try:
            if dynamic:
                quantize_dynamic(source, target, weight_type=QuantType.QInt8, reduce_range=reduce)
            else:
                quantize_static(
                    source,
                    target,
                    _reader(batches),
                    quant_format=QuantFormat.QDQ,
                    per_channel=per_channel,
                    activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8,
                    reduce_range=reduce,
                    nodes_to_exclude=_unquantizable(float_export, batches),
                    extra_options={"QDQKeepRemovableActivations": True},
                )
        finally:
            logger.setLevel(level)
        return onnx.load(target)


def ort_int8(
    name: str,
    model,
    inputs: dict[str, np.ndarray],
    calibration: str | None = None,
    *,
    dynamic: bool = False,
    per_channel: bool = True,
) -> QuantizedOnnxPort:
    """`ort-int8` (static, `per_channel` weights), `ort-int8-tensor` (per tensor) and
    `ort-int8-dynamic` (`dynamic`: activations quantized at run time, nothing calibrated); a
    static port is calibrated on `calibration`'s batches where given, else on the model's inputs."""
    from accuracy.workflows.model import onnx_graph

    float_export = cached_export(onnx_graph.export, model, inputs)
    batches = read_calibration(calibration, inputs) if calibration else [inputs]
    weights = "per-channel" if per_channel else "per-tensor"
    how = "dynamic activations, int8 weights" if dynamic else f"static QDQ, {weights} weights"
    where = f"on {Path(calibration).name}" if calibration else "on the model's inputs"
    how += ", 7-bit weights (no VNNI)" if reduced_range() else ""
    if not dynamic:
        how += f", calibrated {where}"
    quantized = _quantized(float_export, batches, dynamic=dynamic, per_channel=per_channel)
    return QuantizedOnnxPort(name, model, inputs, quantized, float_export, how)
