"""What `opbench model` answers: per port, each unit's row, the first one not within rounding, and
the end-to-end error; `--json` is `ModelReport.as_dict()`, the terminal text `render()`.

The rows are plain JSON-shaped dicts, typed here (`UnitRow`, `PortResult`), so that the JSON,
the HTML page (accuracy.report.model_page) and the text read the same fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

import numpy as np

from accuracy.core.dtypes import FORMATS, is_floating
from accuracy.core.formatting import printable
from accuracy.core.json_output import json_ready
from accuracy.judge.verdicts import BEYOND, NOT_COMPARED, RUNTIME_LIMIT, WITHIN, WITHIN_NOISE, Outcome
from accuracy.workflows.model import quantization
from accuracy.workflows.model.activations_file import OUTPUT_KEY, input_key
from accuracy.workflows.model.answer import Cause, clip, explanation, is_flagged, number, port_answer, worst_text
from accuracy.workflows.model.ports.base import EndToEnd, Port
from accuracy.workflows.model.trace import LayerCall
from accuracy.workflows.model.unit import CauseFinding, Unit, UnitJudgement
from accuracy.workflows.model.units import nonfinite_mismatches, relative


class UnitRow(TypedDict, total=False):
    path: str  # the unit's first call's key
    covers: list[str]  # every call the unit covers (a fused node covers several)
    parent: str | None  # the key of the module call it ran inside
    depth: int  # how many calls it ran inside
    own_code: bool  # flagged while every unit inside it is within rounding: its own forward differs
    op: str  # the module kinds, and the registry op where it is judged as one
    registry_op: str  # that registry op, alone (`opbench explain` takes it)
    verdict: Outcome
    reason: str
    tier: str
    max_ulp: float | None
    typical_ratio: float | None
    bound_ratio: float | None
    introduced: float  # the unit's normwise relative error on the reference's own inputs
    inherited: float  # the port's end-to-end difference from the float64 model at the unit's input
    propagated: float  # ... at its output
    worst: dict[str, Any]
    cause: CauseFinding | None  # the known port bug that explains it, or the nearest tried
    runtime_limit: str  # where the verdict is `runtime limit`: the declared limit that explains it
    # a quantized port's unit: expected noise, ratio, rmse/scale, SQNR own and accumulated, its points
    quantization: dict[str, Any]
    error_by_position: list[float]  # a flagged unit fed token sequences: its error at each position (positions.py)


# A port's end-to-end error is judged against PyTorch's own at the port's dtype on the same input:
# measured on the zoo models, correct ports (ONNX Runtime with and without graph optimizations,
# TorchScript, bfloat16 against PyTorch's bfloat16) give 0.9 to 1.2 times PyTorch's own error; the
# injected port bugs give 3e3 (a BatchNorm eps) to 3e4 (an attention scale) times it.
# Beyond END_TO_END_FACTOR times the larger of PyTorch's own and the dtype's unit roundoff, the
# port computes something else, whatever each layer's verdict says (docs/models.md).
END_TO_END_FACTOR = 100.0


class EndToEndVerdict(TypedDict):
    verdict: Outcome
    reason: str
    first_departs: str | None  # the first unit whose propagated difference departs
    quantization: NotRequired[dict]  # a quantized port's output against its predicted noise
    cause: NotRequired[CauseFinding]  # the quantize points whose clipping explains it (quantization_causes)


@dataclass(frozen=True)
class PortFacts:
    """What a report says of a port besides its numbers: plain data, which a Dask worker that ran
    the port sends back (the port itself holds sessions and compiled programs)."""

    name: str
    description: str
    fmt: Any  # FloatFormat
    products: Any = None  # FloatFormat, or None
    runtime: str = "torch"  # the library whose kernels computed its units (Port.runtime)
    noise: dict | None = None  # a quantized port's predicted noise per unit key (workflows.model.quantization)

    @classmethod
    def of(cls, port: Port) -> PortFacts:
        return cls(port.name, port.description, port.fmt, port.products, port.runtime, getattr(port, "noise", None))


class PortResult(TypedDict):
    port: str
    description: str
    dtype: str
    first_not_within: str | None
    compared: int
    flagged: int
    runtime_limits: int  # units not within rounding only by a declared limit of the port's runtime
    not_compared: int
    worst_introduced: float | None
    layers: list[UnitRow]
    output: dict[str, float | None]
    end_to_end: EndToEndVerdict
    seconds: float
    # the port's own first-layer input against the model's (preprocessing), where the port shows it:
    # [{input, layer, verdict, reason, cause (where not within rounding)}]
    inputs: NotRequired[list[dict]]


@dataclass
class ModelReport:
    model: str
    mode: str
    inputs: dict[str, list[int]]
    ports: list[PortResult]
    absent: list[dict] = field(default_factory=list)
    # a sweep stopped early (Ctrl-C, a lost Dask scheduler): why, and the ports it never finished
    interrupted: str | None = None
    not_run: list[str] = field(default_factory=list)
    not_saved: str | None = None  # why --save-activations wrote nothing, where it could not
    # inf and NaN are data: how many the inputs hold, by name, and the reference model's output
    nonfinite: dict = field(default_factory=dict)

    @property
    def within_rounding(self) -> bool:
        """Exit 0 only if some port ran, every port compared some layer, every compared layer is
        within rounding and no port's end-to-end error is beyond rounding."""
        return bool(self.ports) and all(
            p["compared"] > 0
            and p["end_to_end"]["verdict"] != BEYOND
            and all(r["verdict"] in (WITHIN, WITHIN_NOISE, RUNTIME_LIMIT, NOT_COMPARED) for r in p["layers"])
            for p in self.ports
        )

    def as_dict(self) -> dict:
        return json_ready(
            {
                "model": self.model,
                "mode": self.mode,
                "inputs": self.inputs,
                "ports": self.ports,
                "absent_ports": self.absent,
                "interrupted": self.interrupted,
                "ports_not_run": self.not_run,
                "nonfinite": self.nonfinite,
            }
        )

    def notes(self) -> list[str]:
        """What the answer says before any port's: a sweep stopped early, inf or NaN in the inputs, no port."""
        lines = []
        if self.interrupted:
            lines.append(f"partial: {self.interrupted}; not run: {', '.join(self.not_run)}")
        if self.nonfinite:
            held = [
                f"the {what} ({', '.join(f'{printable(k)}: {n}' for k, n in self.nonfinite.get(what, {}).items())})"
                for what in ("inputs", "weights")
                if self.nonfinite.get(what)
            ]
            lines.append(
                clip(
                    f"inf or NaN in {' and '.join(held)}, {self.nonfinite['output']} in the reference's output: "
                    "judged as data (--explain-verdicts says how)"
                )
            )
        if not self.ports:
            absent = f" (absent: {', '.join(printable(a['port']) for a in self.absent)})" if self.absent else ""
            lines.append(clip(f"no port ran: nothing was compared{absent}"))
        return lines

    def answers(self) -> list[str]:
        """The answer: the notes, then three lines per port (accuracy.workflows.model.answer)."""
        return self.notes() + [clip(printable(line)) for p in self.ports for line in port_answer(p).lines()]

    def derivations(self) -> list[str]:
        """The answer in full, per port: the first unit's full reason and worst element, each input
        not the model's, and how the inf and NaN of the inputs are judged (--explain-verdicts, the page)."""
        lines = []
        if self.nonfinite:
            lines.append(
                "inf or NaN in the inputs or weights are judged as data: each unit's finite elements for rounding, "
                "its others must carry the reference's inf and NaN"
            )
        for p in self.ports:
            label = f"{printable(p['port'])} [{p['dtype']}]"
            lines += [
                f"{label}: its input {printable(i['input'])} (as {printable(i['layer'])} received it) is not the "
                f"model's: {i['verdict']}: {explanation(i)}"
                for i in p.get("inputs", [])
                if i["verdict"] != WITHIN
            ]
            if p["first_not_within"] is not None:
                first = next(r for r in p["layers"] if r["path"] == p["first_not_within"])
                own = (
                    ": the difference is in its own forward, outside its submodules (each within rounding)"
                    if first.get("own_code")
                    else ""
                )
                lines.append(
                    f"{label}: first not within rounding: {printable(first['path'])} ({first['op']}){own}: "
                    f"{first['verdict']}: {explanation(first)}; worst element "
                    f"{worst_text(first['worst'])}"
                )
            lines += [
                f"{label}: {printable(r['path'])}: runtime limit: {r['reason']}"
                for r in p["layers"]
                if r["verdict"] == RUNTIME_LIMIT
            ]
            lines.append(f"{label}: end to end: {p['end_to_end']['verdict']}: {p['end_to_end']['reason']}")
        return lines


def cause_cell(given: Cause) -> str:
    """The table's cause column: the cause that explains the unit and its fitted parameters, or
    that none does; empty where the unit was not flagged."""
    cause = CauseFinding.of(given)
    if not cause:
        return ""
    if not cause.explains:
        return "no known cause"
    fitted = ", ".join(f"{k} = {v:.2g}" if isinstance(v, float) else f"{k} = {v}" for k, v in cause.parameters.items())
    return f"{cause.name}" + (f" ({fitted})" if fitted else "") + (" (+ others)" if cause.alternatives else "")


def _inherited(unit: Unit, by_key: dict[str, LayerCall], run: EndToEnd, reference64: dict) -> float | None:
    """The port's end-to-end difference at the unit's inputs, where the port's run shows them."""
    call = unit.calls[0]
    errors = []
    if run.received.get(call.key):
        for i, value in enumerate(run.received[call.key]):
            ref = reference64.get(input_key(call, i))
            if ref is not None and is_floating(value):
                errors.append(relative(value, ref))
    else:
        for producer in call.producers:
            if producer is None or producer not in run.outputs:
                return None
            errors.append(relative(run.outputs[producer], reference64[producer]))
    return max(errors) if errors else None


def _row(unit: Unit, judged: UnitJudgement) -> UnitRow:
    numbers = {k: v for k, v in judged.numbers.items() if k != "label"}
    row: UnitRow = {**numbers, "verdict": judged.judgement.verdict, "reason": judged.judgement.reason}
    row["tier"], row["introduced"] = judged.tier, judged.introduced
    if judged.cause is not None:
        row["cause"] = judged.cause
    if judged.runtime_limit is not None:
        row["runtime_limit"] = judged.runtime_limit
    return row


def port_result(
    port: PortFacts,
    calls: list[LayerCall],
    reference64: dict,
    own: dict[str, np.ndarray],
    judged: dict[str, UnitJudgement],
    units: list[Unit],
    run: EndToEnd,
    seconds: float,
    explained: dict[str, CauseFinding] | None = None,
) -> PortResult:
    """One port's result: its units' rows in order, and its end-to-end error against the float64
    model beside PyTorch's own at the port's dtype (`own`: PyTorch's activations at that dtype).
    `explained`: the causes of units whose port output has another shape (ceil_mode), by key: such
    a unit is beyond rounding, its reason the shape and its cause the one that explains it."""
    by_key = {c.key: c for c in calls}
    layers: list[UnitRow] = []
    for unit in units:
        kinds = " + ".join(dict.fromkeys(c.kind for c in unit.calls))
        parent = unit.calls[0].parent
        row: UnitRow = {"path": unit.key, "covers": unit.covers, "op": kinds, "parent": parent, "depth": 0}
        while parent is not None:
            row["depth"] += 1
            parent = by_key[parent].parent
        if unit.last in run.outputs:
            row["propagated"] = relative(run.outputs[unit.last], reference64[unit.last])
        inherited = _inherited(unit, by_key, run, reference64)
        if inherited is not None:
            row["inherited"] = inherited
        cause = (explained or {}).get(unit.key)
        if cause is not None:
            layers.append(row | {"verdict": BEYOND, "reason": unit.reason, "cause": cause, "worst": {}})
            continue
        if unit.reason or unit.key not in judged:
            reason = unit.reason or "no port output for it on identical inputs"
            if "propagated" in row:
                reason += "; its propagated difference is shown"
            layers.append(row | {"verdict": NOT_COMPARED, "reason": reason})
            continue
        result = judged[unit.key]
        if result.op is not None:
            row["op"] = f"{kinds} ({result.op})"
            row["registry_op"] = result.op
        layers.append(row | _row(unit, result))
        quantization.accumulated(layers[-1])
    compared = [r for r in layers if r["verdict"] != NOT_COMPARED]
    flagged = [r for r in compared if is_flagged(r["verdict"])]
    reference_out = reference64[OUTPUT_KEY]
    output = run.output
    return {
        "port": port.name,
        "description": port.description,
        "dtype": port.fmt.name,
        "first_not_within": _innermost(layers, flagged, by_key),
        "compared": len(compared),
        "flagged": len(flagged),
        "runtime_limits": sum(r["verdict"] == RUNTIME_LIMIT for r in compared),
        "not_compared": len(layers) - len(compared),
        "worst_introduced": max((r.get("introduced") or 0.0 for r in compared), default=None),
        "layers": layers,
        "output": {
            # non-finite where the float64 model's are finite, or the other way: infinitely far, never
            # the finite elements' 0 beside "not finite"
            "relative_error": float("inf")
            if np.shape(output) == np.shape(reference_out) and nonfinite_mismatches(output, reference_out)
            else relative(output, reference_out),
            "max_abs_error": float(np.max(np.abs(np.asarray(output, np.float64) - reference_out)))
            if np.shape(output) == np.shape(reference_out)
            else None,
            "reference_relative_error": relative(own[OUTPUT_KEY], reference_out),
        },
        "end_to_end": quantization.most_clipped(_end_to_end(port, units, run, reference64, own), layers),
        "seconds": seconds,
    }


def _innermost(layers: list[UnitRow], flagged: list[UnitRow], by_key: dict[str, LayerCall]) -> str | None:
    """The first flagged unit, in execution order, with no flagged unit inside it: where the
    difference is. A flagged parent whose units inside are all within rounding differs in its own
    forward (the attention core, a residual add), outside its submodules: its row says so."""
    inside_flagged: set[str] = set()
    for row in flagged:
        parent = row["parent"]
        while parent is not None:
            inside_flagged.add(parent)
            parent = by_key[parent].parent
    innermost = [r for r in flagged if r["path"] not in inside_flagged]
    for row in innermost:
        row["own_code"] = any(r["parent"] == row["path"] for r in layers)
    return innermost[0]["path"] if innermost else None


def _end_to_end(port: PortFacts, units: list[Unit], run: EndToEnd, reference64: dict, own: dict) -> EndToEndVerdict:
    """The port's end-to-end output judged against PyTorch's own at its dtype (END_TO_END_FACTOR),
    and the first unit whose propagated difference departs from PyTorch's own there."""
    if run.noise is not None:
        return quantization.end_to_end(run.output, reference64[OUTPUT_KEY], run.noise)  # type: ignore[return-value]
    if port.products is not None:
        return {
            "verdict": NOT_COMPARED,
            "reason": f"its products are rounded to {port.products.name}: "
            f"PyTorch's own {port.fmt.name} run is no yardstick",
            "first_departs": None,
        }
    floor = FORMATS[port.fmt.name].u

    def departs(key: str, value) -> bool:
        if nonfinite_mismatches(value, reference64[key]):
            return True
        mine, theirs = relative(value, reference64[key]), relative(own.get(key), reference64[key])
        return bool(mine > END_TO_END_FACTOR * max(theirs if theirs == theirs else 0.0, floor))

    first = next((u.last for u in units if u.last in run.outputs and departs(u.last, run.outputs[u.last])), None)
    reference_out = reference64[OUTPUT_KEY]
    if np.shape(run.output) != np.shape(reference_out):
        reason = f"the port's output has shape {np.shape(run.output)}, the model's {np.shape(reference_out)}"
        return {"verdict": BEYOND, "reason": reason, "first_departs": first}
    nonfinite = nonfinite_mismatches(run.output, reference_out)
    where = f"; first departs at {first}" if first else ""
    if nonfinite:
        reason = f"{nonfinite} output value(s) not finite where the float64 model's are, or the other way{where}"
        return {"verdict": BEYOND, "reason": reason, "first_departs": first}
    mine, theirs = relative(run.output, reference_out), relative(own[OUTPUT_KEY], reference_out)
    limit = END_TO_END_FACTOR * max(theirs, floor)
    if mine != mine or mine > limit:
        reason = (
            f"output error {number(mine)}, over {END_TO_END_FACTOR:g}x PyTorch {port.fmt.name}'s own "
            f"({number(theirs)}) on the same input{where}"
        )
        return {"verdict": BEYOND, "reason": reason, "first_departs": first}
    reason = (
        f"output error {number(mine)} within {END_TO_END_FACTOR:g}x PyTorch {port.fmt.name}'s own ({number(theirs)})"
    )
    return {"verdict": WITHIN, "reason": reason, "first_departs": None}
