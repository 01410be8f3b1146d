"""A quantized port's units and output judged against the quantization noise the port declared
(its scales, zero points and axes, read from its graph: accuracy.workflows.model.onnx_noise), instead of
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
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from accuracy.core.dtypes import FloatFormat
from accuracy.judge.quantization import BEYOND_FACTOR, rms, sqnr_db, threshold
from accuracy.judge.verdicts import BEYOND, SUSPICIOUS, WITHIN_NOISE, Judgement, Verdict
from accuracy.workflows.model.quantization_causes import clipping_skipped, explain_clipping, explain_quantized
from accuracy.workflows.model.rows import EndToEndVerdict, UnitRow
from accuracy.workflows.model.unit import Unit, UnitJudgement
from accuracy.workflows.model.units import float64_reference, relative

QUANTIZATION_TIER = "quantization noise of its declared steps"


def _ratio(actual: float, expected: float) -> float:
    if expected > 0:
        return actual / expected
    return 0.0 if actual == 0 else math.inf


def noise_figures(output: np.ndarray, reference: np.ndarray, noise: dict, apart: bool = True) -> dict:
    """A quantized output's figures against its float64 reference and its predicted noise.
    Clipping is counted apart: what the port's own graph changes by clipping (a ReLU's negative
    range cut at the Conv before it) is taken off its error, and the rest judged as noise; a
    computation that differs (a wrong scale, saturated or not) is left in the rest. `apart`
    False: the clipping is error too (at the model's output, where a ReLU no longer hides it)."""
    error = np.asarray(output, np.float64).reshape(reference.shape) - reference
    clipping = np.asarray(noise["clipping"], np.float64).reshape(reference.shape)
    variance = np.asarray(noise["variance"], np.float64)
    with np.errstate(invalid="ignore"):
        residual = error - clipping if apart else error
    actual, expected = rms(residual), float(np.sqrt(np.mean(variance))) if variance.size else 0.0
    scale = noise.get("output_scale")
    return {
        "expected_rms": expected,
        "rms": actual,
        "ratio": _ratio(actual, expected),
        "threshold": threshold(error.size),
        "clipped": noise["clipped"],
        "clip_affected": int(np.count_nonzero(clipping)),
        "clip_rms": rms(clipping),
        "clipping_apart": apart,
        # both less the clipping counted apart, as the ratio: a ReLU's range cut at the Conv before it
        # would read as a 1 dB unit otherwise
        "rmse_over_scale": actual / scale if scale else None,
        "sqnr_db": sqnr_db(reference, residual),
        "points": noise["points"],
    }


def verdict_of(figures: dict) -> tuple[Verdict, str]:
    """(verdict, reason) for a unit's or an output's quantization figures."""
    ratio, limit = figures["ratio"], figures["threshold"]
    counted = f"{len(figures['points'])} quantize points"
    clipped = (
        f"; {figures['clip_affected']} output elements changed by clipping, counted "
        f"{'apart' if figures['clipping_apart'] else 'as error'} ({figures['clip_rms']:.3g} rms)"
        if figures["clip_affected"]
        else ""
    )
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


def judge_quantized(unit: Unit, tensors: list, fmt: FloatFormat, output: np.ndarray, noise: dict) -> UnitJudgement:
    """A quantized port's unit judged against its quantization noise (`noise`: the port's
    prediction on the same inputs), not against rounding: no Monte Carlo of the float units."""
    reference = float64_reference(unit, tensors, fmt)
    figures = noise_figures(output, reference, noise)
    verdict, reason = verdict_of(figures)
    numbers = {"max_ulp": None, "typical_ratio": None, "bound_ratio": None, "worst": {}, "quantization": figures}
    cause = None
    if verdict != WITHIN_NOISE:  # the known quantization bugs, fitted and judged the same way

        def judged(out: np.ndarray, changed: np.ndarray) -> tuple[dict, str]:
            found = noise_figures(out, changed, noise)
            return found, verdict_of(found)[0]

        cause = explain_quantized(unit, tensors, fmt, output, noise, judged)
    judgement = Judgement(verdict, reason, fmt.name)
    return UnitJudgement(judgement, QUANTIZATION_TIER, None, numbers, relative(output, reference), cause)


def most_clipped(end: EndToEndVerdict, layers: list[UnitRow]) -> EndToEndVerdict:
    """A quantized port's output beyond its noise while each unit is within its own: the unit
    whose clipping, counted apart, changed its output most against its noise, as where it departs
    (a zero point stuck at 0, a range calibrated on other data)."""
    if end.quantization is None or end.verdict != BEYOND or end.first_departs is not None:
        return end
    clipped = [r for r in layers if r.quantization is not None and r.quantization.get("clip_affected")]
    if not clipped:
        return end
    worst = max(clipped, key=lambda r: r.quantization["clip_rms"] / (r.quantization["expected_rms"] or 1.0))  # type: ignore[index]
    return replace(end, first_departs=worst.path)


def accumulated_db(propagated: float) -> float:
    """A unit's accumulated SQNR from the float model: its propagated error, in decibels, beside its own."""
    return -20.0 * math.log10(propagated) if propagated > 0 else math.inf


def end_to_end(output: np.ndarray, reference: np.ndarray, noise: dict) -> EndToEndVerdict:
    """The port's output judged against the noise of every quantize point of its graph at once,
    its clipping counted as error (a zero point stuck at 0 clips a range the model needs; the
    negative range cut before a ReLU changes no output): a port whose every unit is within its
    noise but whose output is not is flagged."""
    figures = noise_figures(output, reference, noise, apart=False)
    verdict, reason = verdict_of(figures)
    if verdict == WITHIN_NOISE:
        return EndToEndVerdict(WITHIN_NOISE, f"output {reason}", None, figures)

    def judged(changed: np.ndarray) -> tuple[dict, str]:  # the output less some points' clipping
        found = noise_figures(changed, reference, noise, apart=False)
        return found, verdict_of(found)[0]

    cause = explain_clipping(output, noise, judged)
    if cause is not None and cause.explains:
        return EndToEndVerdict(BEYOND, f"output {reason}", cause.path, figures, cause=cause)
    return EndToEndVerdict(BEYOND, f"output {reason}", None, figures, skipped=clipping_skipped(noise) or None)


NOISE_HEADER = [
    "layer",
    "expected rms",
    "rms",
    "ratio",
    "flags over",
    "rmse/scale",
    "SQNR own dB",
    "SQNR acc dB",
    "clipped",
]


def noise_rows(shown: list[UnitRow], number: Callable[[Any], str]) -> list[list[str]]:
    """A quantized port's units against their quantization noise, in the figures of other tools:
    TensorFlow Lite's rmse / scale (0.289 is pure rounding), SQNR own and accumulated (ONNX
    Runtime's qdq_loss_debug), the values its points clipped; `number` writes each figure. One
    table for the terminal and the page."""
    return [
        [
            "  " * r.depth + " + ".join(r.covers),
            number(q["expected_rms"]),
            number(q["rms"]),
            number(q["ratio"]),
            number(q["threshold"]),
            number(q["rmse_over_scale"]),
            number(q["sqnr_db"]),
            number(q.get("sqnr_accumulated_db")),
            str(q["clipped"]),
        ]
        for r in shown
        if (q := r.quantization) is not None
    ]
