"""ExecuTorch int8 (`executorch-int8`): the model exported by `torch.export`, quantized by
ExecuTorch's XNNPACK quantizer through PT2E (`prepare_pt2e`, calibration, `convert_pt2e`:
int8 symmetric weights per output channel, int8 activations per tensor with a zero point,
calibrated on the model's inputs or on `--calibration FILE`), lowered with the XNNPACK
partitioner and run by the ExecuTorch runtime, whose XNNPACK int8 kernels compute it.

Its quantize points are read from the converted graph, before lowering: each
`quantize_per_tensor -> dequantize_per_tensor` pair (an activation: its scale, zero point and
integer range, arguments of the nodes) and each `dequantize_per_channel` of stored int8 weights
(its per-channel scales, zero points and axis). The error model is that graph with each pair
replaced by its input clipped to the point's range plus uniform noise of one step, and each stored
weight by its dequantized value plus noise of its step, run by PyTorch with the noise at 0, with
the clipping off, and with draws of PCG64 noise (seed 0), as the ONNX ports' model
(accuracy.workflows.model.onnx_noise). The leaves are quantized, lowered and loaded together, as one
program of independent parts (deploy.ConvertedPort.units), each part calibrated on the
reference's inputs to its leaf, so that each is quantized as it would be alone; a leaf's error
model is the converted graph cut to that part. The whole model, quantized once, end to end.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from accuracy.backends.pytorch import tensor_to_numpy as to_numpy
from accuracy.core.patching import replaced
from accuracy.judge.quantization import NOISE_SEED, samples
from accuracy.workflows.model.onnx_noise import graph_noise
from accuracy.workflows.model.ports.base import EndToEnd
from accuracy.workflows.model.ports.deploy import missing, program_feed
from accuracy.workflows.model.ports.executorch_port import ExecuTorchPort, _Method, _quiet, lighter_lowering
from accuracy.workflows.model.ports.onnx_quantized import read_calibration
from accuracy.workflows.model.trace import first_tensor
from accuracy.workflows.model.unit import Unit, port_inputs


def _ops():
    import torch

    decomposed = torch.ops.quantized_decomposed
    return (
        decomposed.quantize_per_tensor.default,
        decomposed.dequantize_per_tensor.default,
        decomposed.dequantize_per_channel.default,
    )


def _points(graph_module) -> list[tuple]:
    """Each quantize point of a converted graph: ('activation', dequantize node, quantized value,
    scale, zero point, qmin, qmax) for a Q -> DQ pair; ('weight', dequantize node, the stored
    integers' name, scales, zero points, axis, qmin, qmax) for stored per-channel weights."""
    import torch

    quantize, dequantize, per_channel = _ops()
    found: list[tuple] = []
    for node in graph_module.graph.nodes:
        source = node.args[0] if node.op == "call_function" and node.args else None
        if node.target == dequantize and isinstance(source, torch.fx.Node) and source.target == quantize:
            x, scale, zero, qmin, qmax = source.args[:5]
            numbers: list[Any] = [scale, zero, qmin, qmax]  # the graph's literals
            found.append(("activation", node, x, float(numbers[0]), *(int(n) for n in numbers[1:])))
        elif node.target == per_channel and isinstance(source, torch.fx.Node) and source.op == "get_attr":
            scales, zeros = (_attribute(graph_module, a) for a in node.args[1:3])
            axis, qmin, qmax = (int(a) for a in node.args[3:6])
            found.append(("weight", node, source.target, scales, zeros, axis, qmin, qmax))
    return found


def _attribute(graph_module, node) -> np.ndarray:
    return to_numpy(getattr(graph_module, node.target)).astype(np.float64)


def _broadcast(values, axis: int, ndim: int):
    shape = [1] * ndim
    shape[axis % ndim] = -1
    return values.reshape(shape)


class _Noise:
    """What the error model's inserted calls read: whether points clip, and their noise (none, or
    drawn afresh for each run in the order the points run)."""

    def __init__(self):
        self.clip, self.drawing, self.clipped = True, False, 0
        self.rng = np.random.Generator(np.random.PCG64(NOISE_SEED))
        self.draws: dict[int, object] = {}

    def _noise(self, index: int, like):
        import torch

        if not self.drawing:
            return torch.zeros_like(like)
        if index not in self.draws:
            self.draws[index] = torch.from_numpy(np.asarray(self.rng.random(tuple(like.shape), np.float32) - 0.5))
        return self.draws[index]

    def activation(self, x, scale: float, zero: int, qmin: int, qmax: int, index: int):
        low, high = (qmin - zero) * scale, (qmax - zero) * scale
        if self.clip:  # counted where past its range by more than the half step rounding takes to its end
            self.clipped += int(((x < low - scale / 2) | (x > high + scale / 2)).sum())
            x = x.clamp(low, high)
        return x + self._noise(index, x) * scale

    def weight(self, w, scales, axis: int, index: int):
        return w + self._noise(index, w) * _broadcast(scales, axis, w.ndim)


def _with_noise(graph_module, state: _Noise):
    """A copy of the converted graph with each point replaced by its value plus `state`'s noise."""
    model = copy.deepcopy(graph_module)
    graph = model.graph
    for index, point in enumerate(_points(model)):
        kind, node = point[0], point[1]
        if kind == "activation":
            with graph.inserting_before(node):
                new = graph.call_function(state.activation, (point[2], *point[3:7], index))
            node.replace_all_uses_with(new)
        else:
            with graph.inserting_after(node):
                new = graph.call_function(state.weight, (node, node.args[1], point[5], index))
            node.replace_all_uses_with(new, delete_user_cb=lambda user, new=new: user is not new)
    graph.eliminate_dead_code()
    model.recompile()
    return model


def _point_row(point: tuple) -> dict:
    if point[0] == "activation":
        _, _, x, scale, zero, qmin, qmax = point
        return {"value": str(x), "kind": "activation", "scale": scale, "zero_point": zero, "axis": None,
                "channels": 1, "range": [qmin, qmax]}  # fmt: skip
    _, _, name, scales, zeros, axis, qmin, qmax = point
    shown = [float(scales.min()), float(scales.max())]
    return {"value": name, "kind": "weight", "scale": shown, "zero_point": [float(zeros.min()), float(zeros.max())],
            "axis": axis, "channels": int(scales.size), "range": [qmin, qmax]}  # fmt: skip


def _declared(graph_module, points: list[tuple]) -> list[dict]:
    """The stored weights as the quantization causes read them (onnx_noise.declared_weights' form)."""
    found = []
    for _, _, name, scales, zeros, axis, _qmin, _qmax in (p for p in points if p[0] == "weight"):
        integers = to_numpy(getattr(graph_module, name)).astype(np.float64)
        weight = (integers - _broadcast(zeros, axis, integers.ndim)) * _broadcast(scales, axis, integers.ndim)
        entry = {"node": name, "weight": weight, "scale": scales, "zero_point": zeros, "axis": axis}
        found.append(entry | {"transposed": False})
    return found


def part_graph(graph_module, part: int):
    """The converted graph of several independent parts cut to one: the other parts' outputs
    replaced by the graph's first input, so that their nodes (and their points) are dropped; the
    kept part's output stays at its place. It shares the graph module's tensors."""
    import torch

    with _quiet():  # copying the graph: torch's deprecation of a pytree spec class, on every copy
        graph = copy.deepcopy(graph_module.graph)
    first = next(n for n in graph.nodes if n.op == "placeholder")
    output = graph.output_node()
    outputs = output.args[0]
    output.args = (tuple(node if i == part else first for i, node in enumerate(outputs)),)
    graph.eliminate_dead_code()
    return torch.fx.GraphModule(graph_module, graph)


def error_model(graph_module, tensors: tuple, part: int | None = None) -> dict:
    """The converted graph's predicted noise at its output on `tensors` (its output `part` where
    it has several parts), as plain data for the judge (workflows.model.quantization): each
    element's variance over draws of every point's noise, what clipping changes, the values
    clipped, the points."""
    import torch

    state = _Noise()
    with _quiet():  # copying the graph module: torch's deprecation of a pytree spec class, on every copy
        model = _with_noise(graph_module, state)

    def run(clip: bool, drawing: bool) -> np.ndarray:
        state.clip, state.drawing, state.clipped, state.draws = clip, drawing, 0, {}
        with torch.no_grad():
            out = model(*[t.clone() for t in tensors])
            return to_numpy(first_tensor(out) if part is None else out[part]).astype(np.float64)

    base = run(True, False)
    clipped = state.clipped
    plain = run(False, False)
    draws = samples(base.size)
    squares = sum(((run(True, True) - base) ** 2 for _ in range(draws)), np.zeros(base.shape))
    points = _points(graph_module)
    activations = [p for p in points if p[0] == "activation"]
    scale = activations[-1][3] if activations else None
    rows = [_point_row(p) for p in points]
    return graph_noise(base, squares, draws, plain, clipped, rows, scale) | {"weights": _declared(graph_module, points)}


def conv_bn_possible(graph_module) -> bool:
    """Whether a pattern of QAT conv-BN could match here: each feeds a BatchNorm an operation's
    output (a convolution's in the XNNPACK quantizer's conv-BN annotations; divided by the BN's
    scale factor, plus its bias, in convert_pt2e's folding). A graph prepared for post-training
    quantization, as here, holds none where prepare_pt2e fused each convolution's BatchNorm; a
    BatchNorm alone (a CNN's leaves converted together hold one) takes the graph's input."""
    import torch

    return any(
        "batch_norm" in str(n.target) and isinstance(n.args[0], torch.fx.Node) and n.args[0].op == "call_function"
        for n in graph_module.graph.nodes
        if n.op == "call_function"
    )


def _quantizer():
    """ExecuTorch's XNNPACKQuantizer (int8: per-channel symmetric weights), its QAT conv-BN
    patterns left out where none can match: it exports each of their 12 by torch.export on every
    prepare_pt2e, about 5 CPU-s here, to annotate nothing in a post-training graph."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    class Quantizer(XNNPACKQuantizer):
        def annotate(self, model):
            if not conv_bn_possible(model):
                self.SUPPORTED_PATTERNS = [p for p in XNNPACKQuantizer.SUPPORTED_PATTERNS if "_bn" not in p.name]
            return super().annotate(model)

    return Quantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))


def qat_folding_where_possible():
    """convert_pt2e's QAT conv-BN folding only on a graph where one of its patterns can match: on a
    graph with a BatchNorm it exports its 56 patterns by torch.export on every call, about 11-25
    CPU-s of a pass here, to find nothing in a post-training graph. Decided graph by graph, so
    that any other caller meanwhile (a user's QAT in another thread) is folded as before."""
    from torchao.quantization.pt2e import quantize_pt2e

    def where_possible(folding):
        return lambda model: folding(model) if conv_bn_possible(model) else model

    return replaced(quantize_pt2e, "_fold_conv_bn_qat", where_possible)


class ExecuTorchInt8Port(ExecuTorchPort):
    """The model quantized by the XNNPACK quantizer (PT2E), run by ExecuTorch's XNNPACK delegate;
    the leaves quantized in one program of independent parts, each on the reference's inputs to
    it, and judged, as the whole model, against its quantize points' noise."""

    def __init__(self, name: str, model, inputs: dict[str, np.ndarray], calibration: str | None):
        super().__init__(name, model, inputs, delegate=True)
        self.batches = read_calibration(calibration, inputs) if calibration else None
        where = f"calibrated on {calibration}" if calibration else "calibrated on the model's inputs"
        self.description = (
            f"{self.description}, int8 by its XNNPACKQuantizer (PT2E: per-channel symmetric weights, "
            f"activations per tensor, {where})"
        )
        self.noise: dict[str, dict] = {}
        self._graphs: dict[int, object] = {}  # each leaf's converted graph, by its program's id

    def _quantized(self, module, batches: list[tuple]):
        """`module` exported and quantized by prepare_pt2e / convert_pt2e, calibrated on `batches`."""
        import torch

        with _quiet(), torch.no_grad(), lighter_lowering():
            from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

            prepared = prepare_pt2e(torch.export.export(module, batches[0]).module(), _quantizer())
            for batch in batches:
                prepared(*batch)
            with qat_folding_where_possible():
                return convert_pt2e(prepared)

    def _program(self, quantized, example: tuple) -> _Method:
        with _quiet():
            from executorch.runtime import Runtime

            return _Method(Runtime.get().load_program(self._lowered(quantized, example).buffer))

    def convert(self, module, example: tuple):
        quantized = self._quantized(module, [example])
        program = self._program(quantized, example)
        self._graphs[id(program)] = quantized
        return program

    def isolated(self, unit: Unit, inputs: list) -> np.ndarray:
        tensors = tuple(t.float() if t.is_floating_point() else t for t in port_inputs(inputs, self.fmt))
        if self._together is None:  # each leaf its own program (the leaves together could not be converted)
            program = self._programs[unit.detail["program"]]
            quantized, part, feeds = self._graphs[id(program)], None, tensors
            output = program(program_feed(tensors))[0]
        else:
            part = unit.detail["part"]
            together = self._together
            quantized = part_graph(self._graphs[id(together.program)], part)
            start = sum(together.sizes[:part])
            feeds = tuple(torch_tensors(a for feed in together.feeds for a in feed))
            feeds = (*feeds[:start], *tensors, *feeds[start + len(tensors) :])
            output = together.output(part, program_feed(tensors))
        if _points(quantized):
            self.noise[unit.key] = error_model(quantized, feeds, part)
        return np.asarray(output).astype(self.fmt.np_dtype)

    def end_to_end(self, inputs, units) -> EndToEnd:
        import torch

        model, tensors = self.whole(inputs)
        batches = [tensors]
        if self.batches is not None:
            batches = [tuple(torch.from_numpy(np.asarray(b[k], t.numpy().dtype)) for k, t in
                             zip(self.input_names, tensors, strict=True)) for b in self.batches]  # fmt: skip
        quantized = self._quantized(model, batches)
        program = self._program(quantized, tensors)
        run = EndToEnd({}, np.asarray(program(program_feed(tensors))[0]))
        run.noise = error_model(quantized, tensors) | {"runtime": "executorch"}  # the causes say what they skip
        return run


def torch_tensors(arrays):
    import torch

    return [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]


def executorch_int8(name: str, model, inputs, calibration: str | None = None) -> ExecuTorchInt8Port | str:
    """`executorch-int8`; absent where executorch or torchao (its PT2E quantization) is not installed."""
    absent = missing("executorch", "torchao")
    return absent if absent else ExecuTorchInt8Port(name, model, inputs, calibration)
