"""A quantized ONNX graph's quantize points, and the graph as its error model: each point replaced
by uniform noise of its declared step, run by ONNX Runtime.

The points are read from the graph, never guessed:
- static QDQ (`QuantizeLinear` -> `DequantizeLinear`): an activation, its scale, zero point and
  axis (per channel where the scale has one entry per channel); its range is
  [(qmin - zp) s, (qmax - zp) s], outside which values are clipped;
- a `DequantizeLinear` of a constant integer tensor: a weight or a bias, quantized offline;
- dynamic (`DynamicQuantizeLinear` feeding `MatMulInteger` / `ConvInteger`, what
  `onnxruntime.quantization.quantize_dynamic` writes): the activation's scale is computed from its
  own range at run time, the weight's integers are stored.

The error model keeps the graph's operations and replaces each point by the value it quantizes
plus uniform noise of one step (variance s^2/12), clipped to the point's range first: run with
the noise at zero it is the port without rounding (its weights as stored, its clipping kept),
run with noise it draws the rounding. The step is in the model's own units, so that the noise is
carried through the unit exactly as the unit's operations carry it (first order for smooth
operations, as the typical tier carries rounding).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from accuracy.judge.quantization import NOISE_SEED, integer_range, samples

QUANTIZE = "QuantizeLinear"
DEQUANTIZE = "DequantizeLinear"
DYNAMIC = "DynamicQuantizeLinear"
INTEGER_OPS = {"MatMulInteger": "MatMul", "ConvInteger": "Conv"}
NOISE = "opbench_noise_"  # the noise inputs' names
CLIPPED = "opbench_clipped_"  # the clipped counts' outputs


@dataclass(frozen=True)
class QuantPoint:
    """One quantize point: the value quantized, how (`activation`, `weight` (a constant), or
    `dynamic` (its scale from its own range at run time)), its step and zero point (one per
    channel along `axis`, or one), and its integer range."""

    value: str
    kind: str
    scale: np.ndarray | None
    zero_point: np.ndarray | None
    axis: int | None
    qmin: int
    qmax: int

    def as_dict(self) -> dict:
        """As a row shows it: a per-channel step and zero point by their extremes and count."""

        def shown(a: np.ndarray | None):
            if a is None:
                return None
            return a.item() if a.size == 1 else [a.min().item(), a.max().item()]

        channels = 1 if self.scale is None else int(self.scale.size)
        return {
            "value": self.value,
            "kind": self.kind,
            "scale": shown(self.scale),
            "zero_point": shown(self.zero_point),
            "axis": self.axis,
            "channels": channels,
            "range": [self.qmin, self.qmax],
        }


def is_quantized(model) -> bool:
    """Whether the graph holds a quantize point of a kind read here."""
    return any(n.op_type in (QUANTIZE, DYNAMIC) or n.op_type in INTEGER_OPS for n in model.graph.node)


def modelled(model) -> bool:
    """Whether every quantized operation of the graph is one the error model reads: QDQ pairs,
    stored weights, dynamic integer products; not QOperator's (`QLinearConv`, `QLinearMatMul`)."""
    consumers: dict[str, list] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    return not any(
        n.op_type.startswith("QLinear")
        or (n.op_type == QUANTIZE and any(c.op_type != DEQUANTIZE for c in consumers.get(n.output[0], [])))
        for n in model.graph.node
    )


def _constants(model) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    found = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute:
            found[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return found


def _axis(node) -> int:
    return next((a.i for a in node.attribute if a.name == "axis"), 1)


def quantize_points(model) -> list[QuantPoint]:
    """Every quantize point of the graph, in node order."""
    constants = _constants(model)
    producer = {o: n for n in model.graph.node for o in n.output}
    points = []
    for node in model.graph.node:
        if node.op_type == DEQUANTIZE:
            scale = constants.get(node.input[1])
            zero = constants.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
            source = producer.get(node.input[0])
            if scale is None:
                continue
            kind = "weight" if node.input[0] in constants else "activation"
            if kind == "activation" and (source is None or source.op_type != QUANTIZE):
                continue
            dtype = (zero if zero is not None else constants.get(node.input[0], np.zeros(0, np.uint8))).dtype
            low, high = integer_range(dtype)
            value = source.input[0] if kind == "activation" and source is not None else node.input[0]
            axis = _axis(node) if np.size(scale) > 1 else None
            points.append(QuantPoint(value, kind, np.asarray(scale, np.float64), zero, axis, low, high))
        elif node.op_type == DYNAMIC:
            points.append(QuantPoint(node.input[0], "dynamic", None, None, None, 0, 255))
        elif node.op_type in INTEGER_OPS:
            stored = constants.get(node.input[1])
            if stored is not None:
                zero = constants.get(node.input[3]) if len(node.input) > 3 and node.input[3] else None
                low, high = integer_range(stored.dtype)
                points.append(QuantPoint(node.input[1], "weight", None, zero, None, low, high))
    return points


LINEAR_OPS = ("Conv", "Gemm", "MatMul")


def _dequantized(constants: dict, node) -> tuple[np.ndarray, np.ndarray, np.ndarray, int | None]:
    """(the weight as its DequantizeLinear gives it, its step, zero point, axis) of a stored weight."""
    stored, scale = constants[node.input[0]], np.asarray(constants[node.input[1]], np.float64)
    zero = np.asarray(constants.get(node.input[2], np.zeros(())) if len(node.input) > 2 else np.zeros(()))
    axis = _axis(node) if scale.size > 1 else None
    shape = [1] * stored.ndim
    if axis is not None:
        shape[axis % stored.ndim] = scale.size
    s, z = scale.reshape(shape), zero.astype(np.float64).reshape(shape if zero.size > 1 else ())
    return (stored.astype(np.float64) - z) * s, scale, zero, axis


def declared_weights(model) -> list[dict]:
    """The weights and biases a graph's Conv, Gemm and MatMul nodes dequantize from stored
    integers: each weight as dequantized, its step, zero point and axis (whether stored
    transposed, as a MatMul's [in, out]); each bias's step beside the input's step times the
    weight's, which it should be."""
    constants = _constants(model)
    producer = {o: n for n in model.graph.node for o in n.output}
    found = []
    for node in model.graph.node:
        if node.op_type not in LINEAR_OPS or len(node.input) < 2:
            continue
        weight = producer.get(node.input[1])
        if weight is None or weight.op_type != DEQUANTIZE or weight.input[0] not in constants:
            continue
        values, scale, zero, axis = _dequantized(constants, weight)
        transposed = node.op_type == "MatMul" or any(a.name == "transB" and a.i == 0 for a in node.attribute)
        entry = {"node": node.name, "weight": values, "scale": scale, "zero_point": zero, "axis": axis}
        entry["transposed"] = bool(transposed and node.op_type != "Conv")
        activation = producer.get(node.input[0])
        bias = producer.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if (
            activation is not None
            and activation.op_type == DEQUANTIZE
            and bias is not None
            and bias.op_type == DEQUANTIZE
        ):
            x_scale = constants.get(activation.input[1])
            b_scale = constants.get(bias.input[1])
            if x_scale is not None and b_scale is not None:
                entry["bias_scale"] = np.asarray(b_scale, np.float64)
                entry["bias_expected"] = float(np.asarray(x_scale).item()) * scale
        found.append(entry)
    return found


class _Builder:
    """The error model's graph, made node by node from the quantized one."""

    def __init__(self, model, shapes: dict[str, tuple], clip: bool, only: frozenset[str] | None = None):
        import onnx

        self.onnx, self.shapes, self.clip, self.only = onnx, shapes, clip, only
        self.constants = _constants(model)
        self.model = onnx.ModelProto()
        self.model.CopyFrom(model)
        self.noises: list[tuple[str, tuple]] = []
        self.clipped: list[str] = []
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"opbench_{base}_{self.count}"

    def constant(self, value: np.ndarray) -> str:
        name = self.name("c")
        self.model.graph.initializer.append(self.onnx.numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], output: str | None = None, **attributes) -> tuple[str, object]:
        output = output or self.name(op.lower())
        return output, self.onnx.helper.make_node(op, inputs, [output], name=output, **attributes)

    def noise(self, shape: tuple) -> str:
        name = f"{NOISE}{len(self.noises)}"
        self.noises.append((name, shape))
        return name

    def broadcast(self, values: np.ndarray, axis: int | None, rank: int) -> np.ndarray:
        """A per-channel scale (or range) shaped to broadcast along `axis` of a rank-`rank` value."""
        values = np.asarray(values, np.float64)
        if axis is None or values.size == 1:
            return values.reshape(())
        shape = [1] * rank
        shape[axis % rank] = values.size
        return values.reshape(shape)

    def activation(self, quantize, dequantize) -> list:
        """Q -> DQ: the value clipped to the point's range, plus uniform noise of its step."""
        x, scale = quantize.input[0], self.constants[dequantize.input[1]]
        zero = self.constants.get(dequantize.input[2], np.zeros((), np.uint8)) if len(dequantize.input) > 2 else None
        zero = np.zeros((), np.uint8) if zero is None else zero
        shape = self.constants[x].shape if x in self.constants else self.shapes[x]  # a Constant node's value
        axis = _axis(dequantize) if np.size(scale) > 1 else None
        low, high = integer_range(zero.dtype)
        s = self.broadcast(scale, axis, len(shape))
        lo, hi = (low - self.broadcast(zero, axis, len(shape))) * s, (high - self.broadcast(zero, axis, len(shape))) * s
        nodes = []
        lo_name, hi_name = self.constant(lo), self.constant(hi)
        value = x
        if self.clip and (
            self.only is None or x in self.only
        ):  # counted where past its range by more than the half step rounding takes to its end
            under, n1 = self.node("Less", [x, self.constant(lo - s / 2)])
            over, n2 = self.node("Greater", [x, self.constant(hi + s / 2)])
            either, n3 = self.node("Or", [under, over])
            floats, n4 = self.node("Cast", [either], to=self.onnx.TensorProto.FLOAT)
            counted, n5 = self.node("ReduceSum", [floats], keepdims=0)
            self.clipped.append(counted)
            low_cut, n6 = self.node("Max", [x, lo_name])
            value, n7 = self.node("Min", [low_cut, hi_name])
            nodes += [n1, n2, n3, n4, n5, n6, n7]
        step, n8 = self.node("Mul", [self.noise(shape), self.constant(s)])
        _, n9 = self.node("Add", [value, step], dequantize.output[0])
        return [*nodes, n8, n9]

    def weight(self, dequantize) -> list:
        """DQ of stored integers: the stored weight plus uniform noise of its step."""
        stored, scale = self.constants[dequantize.input[0]], self.constants[dequantize.input[1]]
        axis = _axis(dequantize) if np.size(scale) > 1 else None
        s = self.broadcast(scale, axis, stored.ndim)
        kept = self.name("stored")
        copy = self.onnx.helper.make_node(DEQUANTIZE, list(dequantize.input), [kept], name=kept)
        if axis is not None:
            copy.attribute.append(self.onnx.helper.make_attribute("axis", axis))
        step, n1 = self.node("Mul", [self.noise(tuple(stored.shape)), self.constant(s)])
        _, n2 = self.node("Add", [kept, step], dequantize.output[0])
        return [copy, n1, n2]

    def integer_op(self, node, dynamic: dict) -> list:
        """MatMulInteger / ConvInteger of a dynamically quantized activation and stored weights:
        the same product in floats, in integer units, each side plus a uniform step (1)."""
        x_q, w_q = node.input[0], node.input[1]
        if x_q not in dynamic:
            raise ValueError(f"{node.name}: its activation is not dynamically quantized")
        x, x_scale = dynamic[x_q]
        units, n1 = self.node("Div", [x, x_scale])
        a, n2 = self.node("Add", [units, self.noise(self.shapes[x])])
        stored = self.constants[w_q]
        weight, n3 = self.node("Cast", [w_q], to=self.onnx.TensorProto.FLOAT)
        nodes = [n1, n2, n3]
        if len(node.input) > 3 and node.input[3]:
            zero = np.asarray(self.constants[node.input[3]], np.float64)
            axis = 0 if node.op_type == "ConvInteger" else stored.ndim - 1
            weight, n4 = self.node("Sub", [weight, self.constant(self.broadcast(zero, axis, stored.ndim))])
            nodes.append(n4)
        b, n5 = self.node("Add", [weight, self.noise(tuple(stored.shape))])
        attributes = {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}
        _, n6 = self.node(INTEGER_OPS[node.op_type], [a, b], node.output[0], **attributes)
        return [*nodes, n5, n6]

    def build(self):
        graph = self.model.graph
        producer = {o: n for n in graph.node for o in n.output}
        dynamic = {n.output[0]: (n.input[0], n.output[1]) for n in graph.node if n.op_type == DYNAMIC}
        nodes: list = []
        for node in graph.node:
            source = producer.get(node.input[0]) if node.input else None
            if node.op_type == QUANTIZE:
                continue  # made again by its DequantizeLinear below, or not needed
            if node.op_type == DEQUANTIZE and source is not None and source.op_type == QUANTIZE:
                nodes += self.activation(source, node)
            elif node.op_type == DEQUANTIZE and node.input[0] in self.constants:
                nodes += self.weight(node)
            elif node.op_type in INTEGER_OPS:
                nodes += self.integer_op(node, dynamic)
            else:
                nodes.append(node)
        del graph.node[:]
        graph.node.extend(nodes)
        for name, shape in self.noises:
            graph.input.append(self.onnx.helper.make_tensor_value_info(name, self.onnx.TensorProto.FLOAT, shape))
        for name in self.clipped:
            graph.output.append(self.onnx.helper.make_tensor_value_info(name, self.onnx.TensorProto.FLOAT, []))
        del graph.value_info[:]  # the rewritten values' types changed (a DQ output is now an Add's)
        return self.model


@dataclass(frozen=True)
class Noise:
    """A graph's predicted error at one output: the port without rounding (`base`: its stored
    weights, its clipping), each element's variance its points' rounding adds (over the draws
    accuracy.judge.quantization.samples gives), what clipping changes (`clipping`: `base` less the
    same graph unclipped, counted apart), and how many values its points clipped."""

    base: np.ndarray
    variance: np.ndarray
    clipping: np.ndarray
    clipped: int


def _shapes(model, feeds: dict[str, np.ndarray]) -> dict[str, tuple]:
    """The shape of every value a dynamic or static point quantizes, from one run that gives them."""
    import onnx

    from accuracy.workflows.model import onnx_graph

    wanted = [n.input[0] for n in model.graph.node if n.op_type in (QUANTIZE, DYNAMIC) and n.input[0] not in feeds]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    for name in dict.fromkeys(wanted):
        probe.graph.output.append(onnx.ValueInfoProto(name=name))
    found = onnx_graph.run(onnx_graph.session(probe, optimized=False), feeds) if wanted else {}
    return {k: tuple(np.shape(v)) for k, v in (feeds | found).items()}


def expected_noise(model, feeds: dict[str, np.ndarray], outputs: list[str]) -> dict:
    """Each of `outputs`' Noise when `model` (a quantized graph) runs on `feeds`."""
    from accuracy.workflows.model import onnx_graph

    shapes = _shapes(model, feeds)
    builders = {clip: _Builder(model, shapes, clip=clip) for clip in (True, False)}
    graphs = {clip: b.build() for clip, b in builders.items()}
    sessions = {clip: onnx_graph.session(g, optimized=False) for clip, g in graphs.items()}
    counts = builders[True].clipped

    def run(clip: bool, draws: list[np.ndarray] | None, wanted: list[str]) -> dict[str, np.ndarray]:
        noises = builders[clip].noises
        drawn = draws or [np.zeros(shape, np.float32) for _, shape in noises]
        extra = {name: n for (name, _), n in zip(noises, drawn, strict=True)}
        return onnx_graph.run(sessions[clip], feeds | extra, wanted)

    base = run(True, None, [*outputs, *counts])
    plain = run(False, None, list(outputs))
    rng = np.random.Generator(np.random.PCG64(NOISE_SEED))
    squares = {name: np.zeros(np.shape(base[name])) for name in outputs}
    draws_made = samples(min(int(np.size(base[name])) for name in outputs))
    for _ in range(draws_made):
        # drawn in float32 directly: resnet18's weights' draws in float64, then cast, took 8 of its 40 s
        draws = [np.asarray(rng.random(shape, np.float32) - np.float32(0.5)) for _, shape in builders[True].noises]
        drawn = run(True, draws, list(outputs))
        for name in outputs:
            squares[name] += _squares(drawn[name], base[name])
    clips = int(sum(float(base[c]) for c in counts))
    return {
        name: Noise(
            base[name].astype(np.float64),
            squares[name] / draws_made,
            np.where(_squares(base[name], plain[name]) > 0, base[name] - plain[name].astype(np.float64), 0.0),
            clips,
        )
        for name in outputs
    }


def graph_noise(
    base: np.ndarray,
    squares: np.ndarray,
    draws: int,
    unclipped: np.ndarray,
    clipped: int,
    points: list[dict],
    output_scale: float | None,
) -> dict[str, Any]:
    """A runtime's quantized program as its own error model (OpenVINO's and ExecuTorch's int8
    ports): its output with every quantize point rounding and clipping (`base`), the variance of
    `draws` runs with each point's rounding drawn instead (`squares`: their summed squares), what
    its clipping changes against the run that clips nothing (`unclipped`), how many values were
    clipped, its points, and the last activation point's scale."""
    return {
        "base": base,
        "variance": squares / draws,
        "clipping": base - unclipped,
        "clipped": clipped,
        "points": points,
        "output_scale": output_scale,
    }


def _squares(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each element's squared difference; NaN where one is not finite and the other not the same."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    with np.errstate(invalid="ignore"):
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        return np.where(same, 0.0, (a - b) ** 2)


@dataclass(frozen=True)
class ActivationRange:
    """An activation point's declared range beside the values it quantizes with no point clipping
    (what calibration on these inputs would have given it: MinMax, 0 included), and how many of
    them fall below or above its range by more than the half step rounding takes to its end."""

    value: str
    scale: float
    zero_point: int
    qmin: int
    qmax: int
    low: float  # the range declared, in the model's units
    high: float
    seen_low: float  # the values' own range, 0 included
    seen_high: float
    below: int
    above: int
    size: int


@dataclass(frozen=True)
class Clipping:
    """The graph's error model with its rounding off, run with its clipping at some activation
    points only: what each point's clipping changes at the output (a zero point stuck at 0, a
    range calibrated on other data). Plain data, so that a result can travel."""

    model: Any  # an onnx.ModelProto
    feeds: dict
    output: str

    @functools.cached_property
    def shapes(self) -> dict[str, tuple]:
        return _shapes(self.model, self.feeds)  # one probe run for every run after

    def _run(self, only: frozenset[str] | None, outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        from accuracy.workflows.model import onnx_graph

        builder = _Builder(self.model, self.shapes, clip=True, only=only)
        graph = builder.build()
        zeros = {name: np.zeros(shape, np.float32) for name, shape in builder.noises}
        wanted = list(dict.fromkeys([self.output, *(outputs or [])]))
        if outputs:
            graph = onnx_graph.Graph.of(graph).with_outputs(wanted, dict.fromkeys(wanted, np.dtype(np.float32)))
        return onnx_graph.run(onnx_graph.session(graph, optimized=False), self.feeds | zeros, wanted)

    def __call__(self, only: list[str]) -> np.ndarray:
        """The output with only the points quantizing `only` clipping."""
        return np.asarray(self._run(frozenset(only))[self.output], np.float64)

    def ranges(self) -> list[ActivationRange]:
        """Each per-tensor activation point with the values it quantizes when no point clips."""
        constants = _constants(self.model)
        producer = {o: n for n in self.model.graph.node for o in n.output}
        pairs = []
        for node in self.model.graph.node:
            source = producer.get(node.input[0]) if node.input else None
            if node.op_type != DEQUANTIZE or source is None or source.op_type != QUANTIZE:
                continue
            scale = constants.get(node.input[1])
            zero = constants.get(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros((), np.uint8)
            if scale is not None and zero is not None and np.size(scale) == 1 and source.input[0] not in constants:
                pairs.append((source.input[0], float(np.asarray(scale).item()), zero))
        wanted = [name for name, _, _ in pairs if name not in self.feeds]
        values = self.feeds | (self._run(frozenset(), wanted) if pairs else {})
        return [_range(name, np.asarray(values[name], np.float64), scale, zero) for name, scale, zero in pairs]


def _range(name: str, x: np.ndarray, scale: float, zero: np.ndarray) -> ActivationRange:
    x = x[np.isfinite(x)]
    low, high = integer_range(zero.dtype)
    zp = int(np.asarray(zero).item())
    lo, hi = (low - zp) * scale, (high - zp) * scale
    seen = (min(float(x.min()), 0.0), max(float(x.max()), 0.0)) if x.size else (0.0, 0.0)
    below, above = int(np.sum(x < lo - scale / 2)), int(np.sum(x > hi + scale / 2))
    return ActivationRange(name, scale, zp, low, high, lo, hi, *seen, below, above, int(x.size))
