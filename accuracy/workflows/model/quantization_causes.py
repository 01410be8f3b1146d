"""Why a quantized unit is beyond its quantization noise: the known quantization bugs, each a
hypothesis tested with the same judge (accuracy.workflows.model.quantization).

A cause *explains* the unit when the float64 reference unit with the bug applied (its weights
scaled by a fitted factor, shifted by a fitted number of steps, its per-channel steps applied
along another axis, its bias scaled) puts the port's output within its quantization noise. The
parameter is fitted in closed form from the weights the port's graph dequantizes against the
module's own (accuracy.workflows.model.onnx_noise.declared_weights; a torchao Linear's Int8Tensor, read
the same way). One cause is no change of the reference: the port's int8 kernels give other values
than its own graph run unfused (ONNX Runtime's u8s8 products, summed in pairs in int16 without
VNNI, saturate).

Two bugs only clip, leaving each unit within its noise (its clipping counted apart) and the
output beyond it: a zero point stuck at 0 and a range calibrated on other data. They are named
end to end (`explain_clipping`), at the activation point whose clipping alone changes the output
most, fitted from the values it quantizes (the zero point, or the range, calibration on them gives).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from accuracy.core.dtypes import FloatFormat
from accuracy.workflows.model.unit import CauseFinding, NamedCause, SkippedCause, Unit
from accuracy.workflows.model.units import float64_reference

SCALE, ZERO_POINT, AXIS, PER_TENSOR, BIAS, SATURATES, STUCK_ZERO, OTHER_RANGE = (
    "wrong weight scale",
    "shifted weight zero point",
    "per-channel steps on the wrong axis",
    "per-tensor integers under per-channel steps",
    "bias scale not input x weight scale",
    "int8 kernels differ from the graph",
    "asymmetric zero point stuck at 0",
    "range calibrated on other data",
)
NAMES = (SCALE, ZERO_POINT, AXIS, PER_TENSOR, BIAS, SATURATES, STUCK_ZERO, OTHER_RANGE)
LEAST_FACTOR = 0.02  # a fitted factor this near 1 is no wrong scale: rounding moves it that much
# the causes that cannot apply to a runtime's quantized modules, and why: a runtime's declared quantize
# points name it (a torchao Linear: ports/torchao_port.py)
CANNOT_APPLY = {
    "torchao": (
        (BIAS, "torchao keeps the Linear's bias in float: it has no step to compare with input x weight step"),
        (SATURATES, "torchao runs PyTorch's kernels on its tensors: there is no graph to run unfused beside them"),
        (
            STUCK_ZERO,
            "torchao's activations are float (weight-only) or quantized symmetric per row at run time: no zero point",
        ),
        (OTHER_RANGE, "torchao calibrates nothing: its activation steps come from each row's own range at run time"),
    ),
}

# the runtimes whose flagged output the clipping causes are not read from, and why: they need the
# error model's runs with one point's clipping alone, which onnx_noise.Clipping gives an ONNX graph
_ONE_POINT = "its error model has no run with one point's clipping alone (onnx_noise.Clipping reads ONNX graphs only)"
CLIPPING_NOT_READ = {
    "openvino": f"not read from OpenVINO's quantized model: {_ONE_POINT}",
    "executorch": f"not read from ExecuTorch's converted graph: {_ONE_POINT}",
}


def clipping_skipped(noise: dict) -> list[dict]:
    """The clipping causes a flagged output's runtime is not tried for, each with why."""
    why = CLIPPING_NOT_READ.get(noise.get("runtime", ""))
    return [{"name": name, "reason": why} for name in (STUCK_ZERO, OTHER_RANGE)] if why else []


@dataclass(frozen=True)
class Hypothesis:
    """One cause fitted to one weight: its name, words, parameter and the changed module."""

    name: str
    words: str
    parameters: dict
    module: Any


def _weight(module: Any, declared: dict) -> np.ndarray | None:
    """The module's weight in the graph's layout (a MatMul's transposed), or None where its shape
    is not the graph's weight's."""
    weight = getattr(module, "weight", None)
    if weight is None:
        return None
    values = weight.detach().double().numpy()
    values = values.T if declared["transposed"] and values.ndim == 2 else values
    return values if values.shape == declared["weight"].shape else None


def _steps(declared: dict, axis: int | None, ndim: int) -> np.ndarray:
    scale = np.asarray(declared["scale"], np.float64)
    if axis is None or scale.size == 1:
        return scale.reshape(())
    shape = [1] * ndim
    shape[axis % ndim] = scale.size
    return scale.reshape(shape)


def _with(module: Any, attribute: str, values: np.ndarray, declared: dict) -> Any:
    """A copy of `module` with `attribute` set to `values` (given in the graph's layout)."""
    import torch

    changed = copy.deepcopy(module)
    values = values.T if attribute == "weight" and declared["transposed"] and values.ndim == 2 else values
    with torch.no_grad():
        getattr(changed, attribute).copy_(torch.from_numpy(np.ascontiguousarray(values)))
    return changed


def hypotheses(module: Any, declared: dict) -> list[Hypothesis]:
    """Each cause's fit to one weight the graph dequantizes, where its parameter is not the
    correct one (a factor of 1, a shift of 0, the declared axis)."""
    weight = _weight(module, declared)
    if weight is None:
        return []
    found = []
    given = declared["weight"]
    factor = float(np.sum(given * weight) / np.sum(weight * weight))
    if abs(factor - 1) > LEAST_FACTOR:
        words = f"its weights dequantized at {factor:.3g}x their step (a wrong scale)"
        found.append(Hypothesis(SCALE, words, {"factor": factor}, _with(module, "weight", factor * weight, declared)))
    steps = _steps(declared, declared["axis"], weight.ndim)
    shift = int(np.rint(np.mean((weight - given) / steps)))
    if shift:
        words = f"its weights' zero point shifted by {shift} steps"
        changed = _with(module, "weight", weight - shift * steps, declared)
        found.append(Hypothesis(ZERO_POINT, words, {"shift": shift}, changed))
    count = np.asarray(declared["scale"]).size
    if declared["axis"] is not None:  # integers quantized along `axis`, dequantized along the declared one
        for axis in range(weight.ndim):
            if axis != declared["axis"] % weight.ndim and weight.shape[axis] == count:
                moved = weight * steps / _steps(declared, axis, weight.ndim)
                words = f"its per-channel steps applied along axis {declared['axis']}, its integers' along {axis}"
                found.append(Hypothesis(AXIS, words, {"axis": axis}, _with(module, "weight", moved, declared)))
    if declared["axis"] is not None and np.ptp(steps) > LEAST_FACTOR * np.max(steps):
        # integers quantized with one step for the tensor, dequantized with the declared per-channel
        # steps: given = weight x step_c / step_tensor; 1 / step_tensor fitted by least squares
        scaled = weight * steps
        tensor_step = float(np.sum(scaled * scaled) / np.sum(given * scaled))
        words = f"its integers quantized per tensor (step {tensor_step:.3g}), dequantized with per-channel steps"
        changed = _with(module, "weight", scaled / tensor_step, declared)
        found.append(Hypothesis(PER_TENSOR, words, {"tensor_step": tensor_step}, changed))
    if "bias_scale" in declared and getattr(module, "bias", None) is not None:
        ratio = float(np.mean(np.asarray(declared["bias_scale"]) / np.asarray(declared["bias_expected"])))
        if abs(ratio - 1) > LEAST_FACTOR:
            bias = module.bias.detach().double().numpy()
            words = f"its bias dequantized at {ratio:.3g}x input step x weight step"
            found.append(Hypothesis(BIAS, words, {"factor": ratio}, _with(module, "bias", ratio * bias, declared)))
    return found


def explain_quantized(
    unit: Unit,
    tensors: list,
    fmt: FloatFormat,
    output: np.ndarray,
    noise: dict,
    judged: Callable[[np.ndarray, np.ndarray], tuple[dict, str]],
) -> CauseFinding:
    """The known quantization bug that explains a unit beyond its noise, with its fitted
    parameters and the others that explain it too; or the nearest, `explains: False`.
    `judged(output, reference)`: the unit's figures (ratio, threshold) and verdict against a reference."""
    tried: list[CauseFinding] = []
    module = unit.calls[0].module
    for declared in noise.get("weights", []) if len(unit.calls) == 1 else []:
        for hypothesis in hypotheses(module, declared):
            changed = Unit([dataclasses.replace(unit.calls[0], module=hypothesis.module)])
            judgement = judged(output, float64_reference(changed, tensors, fmt))
            tried.append(_tried(hypothesis.name, hypothesis.words, hypothesis.parameters, *judgement))
    if "unfused" in noise:  # the runtime's kernels against its own graph: no change of the reference
        judgement = judged(noise["unfused"], float64_reference(unit, tensors, fmt))
        words = "its fused int8 kernels, not its graph: the graph run unfused is within its noise (u8s8 saturation)"
        tried.append(_tried(SATURATES, words, {}, *judgement))
    skipped = tuple(SkippedCause(name, why) for name, why in CANNOT_APPLY.get(noise.get("runtime", ""), ()))
    if not tried:
        return CauseFinding(skipped=skipped)
    explaining = [t for t in tried if t.explains]
    best = explaining[0] if explaining else min(tried, key=lambda t: float(t.ratio))  # type: ignore[arg-type]
    alternatives = tuple(NamedCause(t.name or "", t.words, t.parameters) for t in explaining[1:])
    return dataclasses.replace(best, alternatives=alternatives, skipped=skipped)


def _clipping_cause(point: Any, more: list) -> tuple[str, str, dict]:
    """(name, words, parameters) of the activation point whose clipping changes the output most:
    an unsigned point whose zero point is 0 clipping the values below it is a zero point stuck
    at 0 (the zero point it should have had fitted from the values' range, and the fraction
    clipped); any other, a range calibrated on other data (the range its values have, fitted)."""
    named = ", ".join(p.value for p in more[:3]) + (f" and {len(more) - 3} more" if len(more) > 3 else "")
    also = f"; the clipping of {named} changes it less" if more else ""
    if point.zero_point == point.qmin == 0 and point.below > point.above:
        zero = int(np.clip(np.rint(-point.seen_low / point.scale), point.qmin, point.qmax))
        fraction = point.below / max(point.size, 1)
        words = (
            f"{point.value}'s zero point stuck at 0, where its values' range puts it at {zero}: "
            f"{fraction:.1%} of them, below 0, clipped{also}"
        )
        return STUCK_ZERO, words, {"zero_point": zero, "clipped_fraction": fraction}
    words = (
        f"{point.value}'s range [{point.low:.3g}, {point.high:.3g}], where its values span "
        f"[{point.seen_low:.3g}, {point.seen_high:.3g}]: {point.below + point.above} clipped{also}"
    )
    return OTHER_RANGE, words, {"low": point.seen_low, "high": point.seen_high}


def explain_clipping(
    output: np.ndarray, noise: dict, judged: Callable[[np.ndarray], tuple[dict, str]]
) -> CauseFinding | None:
    """The activation point whose clipping puts a port's output beyond its noise while each unit
    is within its own (its clipping counted apart): where the output less what every point's
    clipping changes is within its noise, the point whose clipping alone changes the output most
    (a ReLU's negative range cut at the Conv before it changes nothing). `judged(output)`: the
    output's figures and verdict. None where no point's clipping changes the output."""
    clipping, base = noise.get("clipping_runs"), noise.get("base")
    if clipping is None or base is None:
        return None
    clipped = [p for p in clipping.ranges() if p.below or p.above]
    plain = clipping([])
    effects = {p.value: float(np.sum((clipping([p.value]) - plain) ** 2)) for p in clipped}
    mattering = sorted((p for p in clipped if effects[p.value] > 0), key=lambda p: -effects[p.value])
    if not mattering:
        return None
    figures, verdict = judged(np.asarray(output, np.float64).reshape(base.shape) - (base - plain))
    name, words, parameters = _clipping_cause(mattering[0], mattering[1:])
    path = noise.get("paths", {}).get(mattering[0].value)
    return dataclasses.replace(_tried(name, words, parameters, figures, verdict), value=mattering[0].value, path=path)


def _tried(name: str, words: str, parameters: dict, figures: dict, verdict: Any) -> CauseFinding:
    return CauseFinding(
        name=name,
        words=words,
        parameters=parameters,
        verdict=verdict,
        ratio=figures["ratio"],
        explains=bool(figures["ratio"] <= figures["threshold"]),
    )
