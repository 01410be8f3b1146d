"""What `opbench model` answers: per port, each unit's row, the first one not within rounding, and
the end-to-end error; `--json` is `ModelReport.as_dict()`, the terminal text `render()`.

Each port's rows are built here, each complete once (accuracy.workflows.model.rows: `UnitRow`,
`EndToEndVerdict`, `PortResult`, frozen dataclasses whose verdicts are the Verdict enum): the
JSON, the HTML page (accuracy.report.model_page) and the text read the same objects, and the JSON
is made only at the edge, by each row's `to_json()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from accuracy.core.dtypes import FORMATS, is_floating
from accuracy.core.formatting import printable
from accuracy.core.json_output import json_ready, json_restored
from accuracy.judge.verdicts import BEYOND, NOT_COMPARED, RUNTIME_LIMIT, WITHIN, WITHIN_NOISE
from accuracy.workflows.model import quantization
from accuracy.workflows.model.activations_file import OUTPUT_KEY, input_key
from accuracy.workflows.model.answer import Cause, clip, explanation, is_flagged, number, port_answer, worst_text
from accuracy.workflows.model.ports.base import EndToEnd, Port
from accuracy.workflows.model.rows import AbsentPort, EndToEndVerdict, PortResult, UnitRow
from accuracy.workflows.model.trace import LayerCall
from accuracy.workflows.model.unit import CauseFinding, Unit, UnitJudgement
from accuracy.workflows.model.units import nonfinite_mismatches, relative

# A port's end-to-end error is judged against PyTorch's own at the port's dtype on the same input:
# measured on the zoo models, correct ports (ONNX Runtime with and without graph optimizations,
# TorchScript, bfloat16 against PyTorch's bfloat16) give 0.9 to 1.2 times PyTorch's own error; the
# injected port bugs give 3e3 (a BatchNorm eps) to 3e4 (an attention scale) times it.
# Beyond END_TO_END_FACTOR times the larger of PyTorch's own and the dtype's unit roundoff, the
# port computes something else, whatever each layer's verdict says (docs/models.md).
END_TO_END_FACTOR = 100.0


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


@dataclass
class ModelReport:
    model: str
    mode: str
    inputs: dict[str, list[int]]
    ports: list[PortResult]
    absent: list[AbsentPort] = field(default_factory=list)
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
            p.compared > 0
            and p.end_to_end.verdict != BEYOND
            and all(r.verdict in (WITHIN, WITHIN_NOISE, RUNTIME_LIMIT, NOT_COMPARED) for r in p.layers)
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

    @classmethod
    def from_json(cls, data: dict) -> ModelReport:
        """The report a saved `--json` output was written from (its non-finite numbers read back)."""
        data = json_restored(data)
        ports = [PortResult.from_json(p) for p in data["ports"]]
        absent = [AbsentPort.from_json(a) for a in data["absent_ports"]]
        interrupted, not_run = data["interrupted"], data["ports_not_run"]
        return cls(
            data["model"], data["mode"], data["inputs"], ports, absent, interrupted, not_run, None, data["nonfinite"]
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
            absent = f" (absent: {', '.join(printable(a.port) for a in self.absent)})" if self.absent else ""
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
            label = f"{printable(p.port)} [{p.dtype}]"
            lines += [
                f"{label}: its input {printable(i.input)} (as {printable(i.layer)} received it) is not the "
                f"model's: {i.verdict}: {explanation(i.cause, i.reason)}"
                for i in p.inputs or []
                if i.verdict != WITHIN
            ]
            if p.first_not_within is not None:
                first = next(r for r in p.layers if r.path == p.first_not_within)
                own = (
                    ": the difference is in its own forward, outside its submodules (each within rounding)"
                    if first.own_code
                    else ""
                )
                lines.append(
                    f"{label}: first not within rounding: {printable(first.path)} ({first.op}){own}: "
                    f"{first.verdict}: {explanation(first.cause, first.reason)}; worst element "
                    f"{worst_text(first.worst or {})}"
                )
            lines += [
                f"{label}: {printable(r.path)}: runtime limit: {r.reason}"
                for r in p.layers
                if r.verdict == RUNTIME_LIMIT
            ]
            lines.append(f"{label}: end to end: {p.end_to_end.verdict}: {p.end_to_end.reason}")
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


def _judged_row(base: dict[str, Any], judged: UnitJudgement, propagated: float | None) -> UnitRow:
    """A compared unit's row: its verdict, how it was judged and the numbers behind it (the
    quantized unit's accumulated SQNR from the float model, its propagated error, beside its own)."""
    numbers = judged.numbers
    figures = numbers.get("quantization")
    if figures is not None and propagated is not None:
        figures = figures | {"sqnr_accumulated_db": quantization.accumulated_db(propagated)}
    return UnitRow(
        **base,
        verdict=judged.judgement.verdict,
        reason=judged.judgement.reason,
        tier=judged.tier,
        introduced=judged.introduced,
        **{k: numbers[k] for k in NUMBERS if k in numbers},
        quantization=figures,
        cause=judged.cause,
        runtime_limit=judged.runtime_limit,
    )


NUMBERS = ("compute", "contract", "max_ulp", "typical_ratio", "bound_ratio", "threshold_ulp", "lapack_ratio", "worst")


def _unit_row(
    unit: Unit, by_key: dict[str, LayerCall], judged: UnitJudgement | None, cause: CauseFinding | None, run: EndToEnd,
    reference64: dict,
) -> UnitRow:  # fmt: skip
    """One unit's row: where it sits, the port's end-to-end difference at its input and output, and
    its verdict: beyond rounding with the cause that explains its other output shape, not compared
    (why), or as judged."""
    kinds = " + ".join(dict.fromkeys(c.kind for c in unit.calls))
    parent, depth = unit.calls[0].parent, 0
    while parent is not None:
        depth += 1
        parent = by_key[parent].parent
    propagated = relative(run.outputs[unit.last], reference64[unit.last]) if unit.last in run.outputs else None
    base: dict[str, Any] = {"path": unit.key, "covers": unit.covers, "parent": unit.calls[0].parent, "depth": depth}
    base |= {"propagated": propagated, "inherited": _inherited(unit, by_key, run, reference64)}
    if cause is not None:
        return UnitRow(**base, op=kinds, verdict=BEYOND, reason=unit.reason, cause=cause, worst={})
    if unit.reason or judged is None:
        reason = unit.reason or "no port output for it on identical inputs"
        if propagated is not None:
            reason += "; its propagated difference is shown"
        return UnitRow(**base, op=kinds, verdict=NOT_COMPARED, reason=reason)
    if judged.op is not None:
        base |= {"op": f"{kinds} ({judged.op})", "registry_op": judged.op}
    return _judged_row({"op": kinds} | base, judged, propagated)


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
    rows = [
        _unit_row(unit, by_key, judged.get(unit.key), (explained or {}).get(unit.key), run, reference64)
        for unit in units
    ]
    compared = [r for r in rows if r.verdict != NOT_COMPARED]
    flagged = [r for r in compared if is_flagged(r.verdict)]
    first, own_code = _innermost(rows, flagged, by_key)
    layers = [replace(r, own_code=own_code[r.path]) if r.path in own_code else r for r in rows]
    reference_out = reference64[OUTPUT_KEY]
    output = run.output
    return PortResult(
        port=port.name,
        description=port.description,
        dtype=port.fmt.name,
        first_not_within=first,
        compared=len(compared),
        flagged=len(flagged),
        runtime_limits=sum(r.verdict == RUNTIME_LIMIT for r in compared),
        not_compared=len(layers) - len(compared),
        worst_introduced=max((r.introduced or 0.0 for r in compared), default=None),
        layers=layers,
        output={
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
        end_to_end=quantization.most_clipped(_end_to_end(port, units, run, reference64, own), layers),
        seconds=seconds,
    )


def _innermost(
    layers: list[UnitRow], flagged: list[UnitRow], by_key: dict[str, LayerCall]
) -> tuple[str | None, dict[str, bool]]:
    """The first flagged unit, in execution order, with no flagged unit inside it: where the
    difference is; and each such unit's `own_code`. A flagged parent whose units inside are all
    within rounding differs in its own forward (the attention core, a residual add), outside its
    submodules: its row says so."""
    inside_flagged: set[str] = set()
    for row in flagged:
        parent = row.parent
        while parent is not None:
            inside_flagged.add(parent)
            parent = by_key[parent].parent
    innermost = [r for r in flagged if r.path not in inside_flagged]
    own_code = {row.path: any(r.parent == row.path for r in layers) for row in innermost}
    return (innermost[0].path if innermost else None), own_code


def _end_to_end(port: PortFacts, units: list[Unit], run: EndToEnd, reference64: dict, own: dict) -> EndToEndVerdict:
    """The port's end-to-end output judged against PyTorch's own at its dtype (END_TO_END_FACTOR),
    and the first unit whose propagated difference departs from PyTorch's own there."""
    if run.noise is not None:
        return quantization.end_to_end(run.output, reference64[OUTPUT_KEY], run.noise)
    if port.products is not None:
        reason = f"its products are rounded to {port.products.name}: PyTorch's own {port.fmt.name} run is no yardstick"
        return EndToEndVerdict(NOT_COMPARED, reason, None)
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
        return EndToEndVerdict(BEYOND, reason, first)
    nonfinite = nonfinite_mismatches(run.output, reference_out)
    where = f"; first departs at {first}" if first else ""
    if nonfinite:
        reason = f"{nonfinite} output value(s) not finite where the float64 model's are, or the other way{where}"
        return EndToEndVerdict(BEYOND, reason, first)
    mine, theirs = relative(run.output, reference_out), relative(own[OUTPUT_KEY], reference_out)
    limit = END_TO_END_FACTOR * max(theirs, floor)
    if mine != mine or mine > limit:
        reason = (
            f"output error {number(mine)}, over {END_TO_END_FACTOR:g}x PyTorch {port.fmt.name}'s own "
            f"({number(theirs)}) on the same input{where}"
        )
        return EndToEndVerdict(BEYOND, reason, first)
    reason = (
        f"output error {number(mine)} within {END_TO_END_FACTOR:g}x PyTorch {port.fmt.name}'s own ({number(theirs)})"
    )
    return EndToEndVerdict(WITHIN, reason, None)
