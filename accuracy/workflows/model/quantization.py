"""A quantized port's units and output judged against the quantization noise the port declared
(its scales, zero points and axes, read from its graph: accuracy.backends.onnx_noise), instead of
against rounding.

Per unit: the rms of its error against the float64 reference unit, over the rms its quantize
points' noise predicts on the same inputs (clipping counted apart and added). Within the noise:
`within quantization noise`, not flagged; beyond it, `suspicious` or `beyond rounding` (past
BEYOND_FACTOR) with a reason that says "beyond its quantization noise". The row also gives the
figures users know from other tools: rmse / scale (TensorFlow Lite's QuantizationDebugger), SQNR
in dB, the unit's own and accumulated from the float model (ONNX Runtime's qdq_loss_debug).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from accuracy.core.dtypes import FloatFormat
from accuracy.judge.quantization import BEYOND_FACTOR, expected_rms, rms, sqnr_db, threshold
from accuracy.judge.verdicts import BEYOND, SUSPICIOUS, WITHIN_NOISE, Judgement
from accuracy.workflows.model.units import Unit, UnitJudgement, float64_reference

QUANTIZATION_TIER = "quantization noise of its declared steps"


def _ratio(actual: float, expected: float) -> float:
    if expected > 0:
        return actual / expected
    return 0.0 if actual == 0 else math.inf


def noise_figures(output: np.ndarray, reference: np.ndarray, noise: dict) -> dict:
    """A quantized output's figures against its float64 reference and its predicted noise."""
    error = np.asarray(output, np.float64).reshape(reference.shape) - reference
    actual, expected = rms(error), expected_rms(noise["noise_rms"], noise["clip_rms"])
    scale = noise.get("output_scale")
    return {
        "expected_rms": expected,
        "noise_rms": noise["noise_rms"],
        "clip_rms": noise["clip_rms"],
        "clipped": noise["clipped"],
        "rms": actual,
        "ratio": _ratio(actual, expected),
        "threshold": threshold(error.size),
        "rmse_over_scale": actual / scale if scale else None,
        "sqnr_db": sqnr_db(reference, error),
        "points": noise["points"],
    }


def verdict_of(figures: dict) -> tuple[str, str]:
    """(verdict, reason) for a unit's or an output's quantization figures."""
    ratio, limit = figures["ratio"], figures["threshold"]
    counted = f"{len(figures['points'])} quantize points"
    clipped = f"; {figures['clipped']} values clipped, {figures['clip_rms']:.3g} rms of it" if figures["clipped"] else ""
    how = (
        f"rms error {figures['rms']:.3g}, its {counted}' uniform noise (s^2/12 each) predicts "
        f"{figures['expected_rms']:.3g}{clipped}; flags over {limit:.3g}x here"
    )
    if not math.isfinite(figures["expected_rms"]):
        return BEYOND, (
            f"beyond its quantization noise: a quantize point's step is not finite (a range calibrated on "
            f"inf or NaN, an attention mask's fill); rms error {figures['rms']:.3g}"
        )
    if ratio <= limit:
        return WITHIN_NOISE, f"{ratio:.3g}x its quantization noise: {how}"
    tier = BEYOND if ratio > BEYOND_FACTOR * limit else SUSPICIOUS
    return tier, f"{ratio:.3g}x, beyond its quantization noise: {how}"


def judge_quantized(
    judged: UnitJudgement, unit: Unit, tensors: list, fmt: FloatFormat, output: np.ndarray, noise: dict
) -> UnitJudgement:
    """A quantized port's unit judged against its quantization noise (`noise`: the port's
    prediction on the same inputs); its rounding figures are kept beside."""
    reference = float64_reference(unit, tensors, fmt)
    figures = noise_figures(output, reference, noise)
    verdict, reason = verdict_of(figures)
    judgement: Judgement = replace(judged.judgement, verdict=verdict, reason=reason)
    numbers = judged.numbers | {"quantization": figures}
    return replace(judged, judgement=judgement, tier=QUANTIZATION_TIER, numbers=numbers)


def accumulated(row: dict) -> None:
    """The row's accumulated SQNR from the float model (its propagated error), beside its own."""
    figures = row.get("quantization")
    if figures is not None and row.get("propagated") is not None:
        propagated = row["propagated"]
        figures["sqnr_accumulated_db"] = -20.0 * math.log10(propagated) if propagated > 0 else math.inf


def end_to_end(output: np.ndarray, reference: np.ndarray, noise: dict) -> dict:
    """The port's output judged against the noise of every quantize point of its graph at once:
    a port whose every unit is within its noise but whose output is not is flagged."""
    figures = noise_figures(output, reference, noise)
    verdict, reason = verdict_of(figures)
    if verdict == WITHIN_NOISE:
        return {"verdict": WITHIN_NOISE, "reason": f"output {reason}", "first_departs": None, "quantization": figures}
    return {"verdict": BEYOND, "reason": f"output {reason}", "first_departs": None, "quantization": figures}

