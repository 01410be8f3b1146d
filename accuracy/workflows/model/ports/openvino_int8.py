"""OpenVINO int8 (`openvino-int8`): the model converted by `openvino.convert_model`, quantized by
NNCF's post-training quantization (`nncf.quantize`, its defaults: int8 symmetric weights per
output channel, 256-level activations per tensor, calibrated on the model's inputs or on
`--calibration FILE`), run by OpenVINO's CPU plugin in f32 with its int8 kernels. Its bias
correction is off: NNCF's fast bias correction refits the biases on the calibration batch, which
moves the output off the float model beyond its quantize points' noise (measured on small_cnn:
17.3x that noise with it, 0.7x without), a change of the model, not of its rounding.

Its quantize points are read from the quantized model: each `FakeQuantize` (an activation: input
range [input_low, input_high] on `levels` levels, step (high - low) / (levels - 1)), and each
weight stored as integers (`Convert` of an int8 constant, then its zero point and its per-channel
step). The error model is the quantized model with each FakeQuantize replaced by its input clipped
to its range plus uniform noise of one step, and each stored weight by its integers plus noise of
one integer: run by OpenVINO with the noise at 0, with the clipping off, and with draws of PCG64
noise (seed 0), as the ONNX ports' model (accuracy.workflows.model.onnx_noise). Each leaf is converted and
quantized alone, calibrated on the reference's inputs to it (the values the whole model's
calibration sees there), and judged on them; the whole model, quantized once, end to end.
"""

from __future__ import annotations

import contextlib
import io
import logging
from typing import Any

import numpy as np

from accuracy.backends import cpu_levels
from accuracy.core.errors import quiet_stderr
from accuracy.judge.quantization import NOISE_SEED, samples
from accuracy.workflows.model.onnx_noise import graph_noise
from accuracy.workflows.model.ports.base import EndToEnd
from accuracy.workflows.model.ports.deploy import missing, program_feed
from accuracy.workflows.model.ports.onnx_quantized import read_calibration, reduced_range
from accuracy.workflows.model.ports.openvino_port import OpenVinoPort
from accuracy.workflows.model.unit import Unit, port_inputs

SEVEN_BIT = ", 7-bit weights (no VNNI)"
INTEGERS = ("i8", "u8")  # stored weights' element types


class OpenVinoInt8Port(OpenVinoPort):
    """The model quantized by NNCF, run by OpenVINO; each leaf quantized alone on the reference's
    inputs to it, and judged, as the whole model, against its quantize points' noise."""

    def __init__(self, name: str, model, inputs: dict[str, np.ndarray], calibration: str | None):
        import nncf

        super().__init__(name, model, inputs, "f32", "float32")
        self.batches = read_calibration(calibration, inputs) if calibration else None
        where = f"calibrated on {calibration}" if calibration else "calibrated on the model's inputs"
        self.description = (
            f"OpenVINO {self.ov.__version__.partition('-')[0]} int8 (nncf {nncf.__version__} quantize, "
            f"{where}, bias correction off{SEVEN_BIT if _seven_bit() else ''}) on CPU"
        )
        self.noise: dict[str, dict] = {}
        self._leaves: dict[int, Any] = {}  # each compiled leaf's quantized model, by the compiled one's id

    def units(self, calls):
        """One unit per leaf call, each converted and quantized alone (NNCF's ranges are a
        layer's inputs' own, whichever program holds it)."""
        return self.units_alone(calls)

    def convert(self, module, example: tuple):
        quantized = self._quantize(self._ov_model(module, example), [program_feed(example)])
        compiled = self._compile(quantized)
        self._leaves[id(compiled)] = quantized
        return compiled

    def isolated(self, unit: Unit, inputs: list) -> np.ndarray:
        arrays = program_feed(port_inputs(inputs, self.fmt))
        compiled = self._programs[unit.detail["program"]]
        quantized = self._leaves[id(compiled)]
        if _points(quantized):
            self.noise[unit.key] = error_model(self.ov, self._compile, quantized, arrays)
        return np.asarray(compiled(arrays)[0]).astype(self.fmt.np_dtype)

    def _quantize(self, ov_model, batches: list[list[np.ndarray]]):
        """`ov_model` quantized by nncf.quantize on `batches` (a layer with nothing to quantize as it is)."""
        import nncf
        from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix

        nncf.set_log_level(logging.ERROR)
        options = AdvancedQuantizationParameters(
            disable_bias_correction=True,
            overflow_fix=OverflowFix.ENABLE if _seven_bit() else OverflowFix.DISABLE,
        )
        with quiet_stderr(), contextlib.redirect_stdout(io.StringIO()):  # its progress bars
            try:
                return nncf.quantize(
                    ov_model, nncf.Dataset(batches), subset_size=len(batches), advanced_parameters=options
                )
            except nncf.ValidationError:  # no operation it quantizes
                return ov_model

    def end_to_end(self, inputs, units) -> EndToEnd:
        import torch

        from accuracy.workflows.model.ports.openvino_port import _is_output, _layer_nodes

        model, tensors = self.whole(inputs)
        arrays = program_feed(tensors)
        batches = [arrays]
        if self.batches is not None:
            batches = [[np.asarray(b[k], a.dtype) for k, a in zip(self.input_names, arrays, strict=True)]
                       for b in self.batches]  # fmt: skip
        with torch.no_grad():
            quantized = self._quantize(self._ov_model(model, tensors), batches)
        noise = error_model(self.ov, self._compile, quantized, arrays)
        output = np.asarray(self._compile(quantized)(arrays)[0])
        nodes = {k: n for k, n in _layer_nodes(quantized, units).items() if not _is_output(n)}
        outputs: dict[str, np.ndarray] = {}
        if nodes:
            probed = quantized.clone()
            probed.add_outputs([n.output(0) for n in _layer_nodes(probed, units).values() if not _is_output(n)])
            values = list(self._compile(probed)(arrays).values())[1:]
            outputs = {key: np.asarray(v) for key, v in zip(nodes, values, strict=True)}
        run = EndToEnd(outputs, output)
        run.noise = noise | {"runtime": "openvino"}  # the causes say what they skip
        return run


def _seven_bit() -> bool:
    """7-bit weights where OpenVINO's oneDNN runs int8 without VNNI: on a CPU without it, and on one
    with it where ONEDNN_MAX_CPU_ISA caps oneDNN below it (its u8s8 products saturate in int16 alike)."""
    return reduced_range() or cpu_levels.onednn_capped("int8") is not None


def _constant(output) -> np.ndarray | None:
    node = output.get_node()
    return np.asarray(node.get_data(), np.float64) if node.get_type_name() == "Constant" else None


def _shown(a: np.ndarray) -> float | list[float]:
    return float(a.ravel()[0]) if np.ptp(a) == 0 else [float(a.min()), float(a.max())]


def _points(ov_model) -> list[tuple]:
    """Each quantize point: (node, kind, its range's low, high and step in the model's units,
    levels) for a FakeQuantize; (node, 'weight', None, None, step, levels) for stored integers."""
    found: list[tuple] = []
    for node in ov_model.get_ordered_ops():
        kind = node.get_type_name()
        if kind == "FakeQuantize":
            low, high = _constant(node.input_value(1)), _constant(node.input_value(2))
            levels = int(node.get_attributes()["levels"])
            if low is not None and high is not None:
                found.append((node, "activation", low, high, (high - low) / (levels - 1), levels))
        elif kind == "Convert" and _stored_integers(node):
            found.append((node, "weight", None, None, _weight_step(node), 256))
    return found


def _stored_integers(convert) -> bool:
    source = convert.input_value(0)
    return source.get_node().get_type_name() == "Constant" and source.get_element_type().get_type_name() in INTEGERS


def _weight_step(convert) -> np.ndarray:
    """The step a stored weight's integers are multiplied by (its Multiply's constant), or 1."""
    for target in convert.output(0).get_target_inputs():
        node = target.get_node()
        while node.get_type_name() == "Subtract":  # its zero point
            node = next(iter(node.output(0).get_target_inputs())).get_node()
        if node.get_type_name() == "Multiply":
            for value in node.input_values():
                step = _constant(value)
                if step is not None:
                    return step
    return np.ones(1)


def _point_row(point: tuple) -> dict:
    node, kind, low, _high, step, levels = point
    channels = int(step.size)
    axis = None if channels == 1 else int(np.argmax(step.shape))
    return {
        "value": node.get_friendly_name(),
        "kind": kind,
        "scale": _shown(step),
        "zero_point": _shown(np.rint(-low / np.where(step > 0, step, 1))) if low is not None else 0,
        "axis": axis,
        "channels": channels,
        "range": [0, levels - 1] if kind == "activation" else [-128, 127],
    }


def _with_noise(ov, quantized, clip: bool) -> tuple:
    """The quantized model with each point replaced by its value (clipped to its range where
    `clip`) plus a noise input of one step, and each activation point's clipped count as an
    output after the model's; (model, the noise inputs' shapes)."""
    import openvino.opset13 as ops

    model = quantized.clone()
    noises, counts = [], []
    for node, kind, low, high, step, _levels in _points(model):
        targets = list(node.output(0).get_target_inputs())
        shape = list(node.get_output_partial_shape(0).to_shape())
        noise = ops.parameter(shape, ov.Type.f32)
        if kind == "activation":
            x = node.input_value(0)
            clipped = ops.minimum(ops.maximum(x, low.astype(np.float32)), high.astype(np.float32))
            counts.append(ops.reduce_sum(ops.convert(ops.not_equal(x, clipped), "f32"), list(range(len(shape)))))
            value = clipped if clip else x
            new = ops.add(value, ops.multiply(noise, step.astype(np.float32)))
        else:
            new = ops.add(node.output(0), noise)  # one integer of the stored weight's
        for target in targets:
            target.replace_source_output(new.output(0))
        noises.append(noise)
    model.add_parameters(noises)
    if counts:
        model.add_outputs([c.output(0) for c in counts])
    return model, [tuple(n.get_output_shape(0)) for n in noises]


def error_model(ov, compile_model, quantized, arrays: list[np.ndarray]) -> dict:
    """The quantized model's predicted noise at its output, as plain data for the judge
    (workflows.model.quantization): each output element's variance over draws of every point's
    noise, what clipping changes, the values clipped, the points."""
    clipping_on, shapes = _with_noise(ov, quantized, clip=True)
    clipping_off, _shapes = _with_noise(ov, quantized, clip=False)

    def run(model, noise: list[np.ndarray]) -> list[np.ndarray]:
        # compiled for each run: OpenVINO 2026.4's CPU plugin gives a weight read from an input
        # its first run's value in later runs of the same compiled model (measured: 0.097 off)
        return [np.asarray(v, np.float64) for v in compile_model(model)([*arrays, *noise]).values()]

    zeros = [np.zeros(s, np.float32) for s in shapes]
    ran = run(clipping_on, zeros)
    base, clipped = ran[0], int(sum(float(np.sum(c)) for c in ran[1:]))
    unclipped = run(clipping_off, zeros)[0]
    rng = np.random.Generator(np.random.PCG64(NOISE_SEED))
    draws = samples(base.size)
    squares = np.zeros(base.shape)
    for _ in range(draws):
        squares += (run(clipping_on, [rng.uniform(-0.5, 0.5, s).astype(np.float32) for s in shapes])[0] - base) ** 2
    points = _points(quantized)
    activations = [p for p in points if p[1] == "activation"]
    scale = float(activations[-1][4].max()) if activations else None
    return graph_noise(base, squares, draws, unclipped, clipped, [_point_row(p) for p in points], scale)


def openvino_int8(name: str, model, inputs, calibration: str | None = None) -> OpenVinoInt8Port | str:
    """`openvino-int8`; absent where openvino or nncf is not installed."""
    absent = missing("openvino", "nncf")
    return absent if absent else OpenVinoInt8Port(name, model, inputs, calibration)
