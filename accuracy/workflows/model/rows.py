"""The rows of `opbench model`'s answer, typed: a unit's row, a port's end-to-end verdict, a
port's own input judged, a port's result, a port absent. Each is made complete once, by the
sweep's report (accuracy.workflows.model.report), and read by attribute everywhere: the terminal
text, the page, the answer lines, the self-tests. Their JSON is made only at the edge: `to_json()`
(accuracy.core.json_output writes each through it) gives the keys and key order of the dicts they
replaced, an optional field that was never set absent; `from_json` reads that form back (the page
of a saved report). Frozen: a row that gains a field later (`own_code`, `error_by_position`) is a
new row (`dataclasses.replace`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Self

from accuracy.judge.verdicts import Outcome, Unjudged, Verdict
from accuracy.workflows.model.unit import CauseFinding

OUTCOMES: dict[str, Outcome] = {str(o): o for o in (*Verdict, *Unjudged)}  # a verdict's words -> the enum


def _present(**given: Any) -> dict[str, Any]:
    """The fields that are set: a row's JSON omits each optional field it was made without."""
    return {k: v for k, v in given.items() if v is not None}


class _Judged:
    """A typed row with a verdict and perhaps a cause: `from_json` gives the row its --json form
    (read back by json_output.json_restored) was written from."""

    __slots__ = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls(**_given(cls, data) | _judged(data))


@dataclass(frozen=True, slots=True)
class UnitRow(_Judged):
    """One unit of one port, made complete once (`port_result`); `to_json` is its --json form."""

    path: str  # the unit's first call's key
    covers: list[str]  # every call the unit covers (a fused node covers several)
    op: str  # the module kinds, and the registry op where it is judged as one
    parent: str | None  # the key of the module call it ran inside
    depth: int  # how many calls it ran inside
    verdict: Outcome
    reason: str
    propagated: float | None = None  # the port's end-to-end difference from the float64 model at its output
    inherited: float | None = None  # ... at the unit's input
    registry_op: str | None = None  # that registry op, alone (`opbench explain` takes it)
    # how it was judged (None: not compared, or not judged: a port output of another shape)
    tier: str | None = None
    introduced: float | None = None  # the unit's normwise relative error on the reference's own inputs
    # the numbers behind the verdict (function_tier.judged_row; a lookup or quantized unit has the first four)
    compute: str | None = None
    contract: str | None = None
    max_ulp: float | None = None
    typical_ratio: float | None = None
    bound_ratio: float | None = None
    threshold_ulp: float | None = None
    lapack_ratio: float | None = None
    worst: dict[str, Any] | None = None
    # a quantized port's unit: expected noise, ratio, rmse/scale, SQNR own and accumulated, its points
    quantization: dict[str, Any] | None = None
    cause: CauseFinding | None = None  # the known port bug that explains it, or the nearest tried
    runtime_limit: str | None = None  # where the verdict is `runtime limit`: the declared limit that explains it
    own_code: bool | None = None  # the innermost flagged: whether it has units inside it (its own forward differs)
    error_by_position: list[float] | None = None  # a flagged unit fed token sequences: its error at each position

    def to_json(self) -> dict[str, Any]:
        """The row as `--json` writes it: the keys it had before it was typed, in their order."""
        out: dict[str, Any] = {"path": self.path, "covers": self.covers, "op": self.op}
        out |= {"parent": self.parent, "depth": self.depth}
        out |= _present(propagated=self.propagated, inherited=self.inherited, registry_op=self.registry_op)
        if self.tier is None:
            out |= {"verdict": self.verdict, "reason": self.reason} | _present(cause=self.cause, worst=self.worst)
        else:
            ratios = {"max_ulp": self.max_ulp, "typical_ratio": self.typical_ratio, "bound_ratio": self.bound_ratio}
            if self.compute is not None:  # judged_row's numbers, verdict first
                out |= {"verdict": self.verdict, "reason": self.reason, "compute": self.compute}
                out |= {"contract": self.contract} | ratios
                out |= {"threshold_ulp": self.threshold_ulp, "lapack_ratio": self.lapack_ratio, "worst": self.worst}
            else:
                out |= ratios | {"worst": self.worst} | _present(quantization=self.quantization)
                out |= {"verdict": self.verdict, "reason": self.reason}
            out |= {"tier": self.tier, "introduced": self.introduced}
            out |= _present(cause=self.cause, runtime_limit=self.runtime_limit)
        return out | _present(own_code=self.own_code, error_by_position=self.error_by_position)


@dataclass(frozen=True, slots=True)
class EndToEndVerdict(_Judged):
    """A port's output judged end to end, and the first unit whose propagated difference departs."""

    verdict: Outcome
    reason: str
    first_departs: str | None  # the first unit whose propagated difference departs
    quantization: dict[str, Any] | None = None  # a quantized port's output against its predicted noise
    cause: CauseFinding | None = None  # the quantize points whose clipping explains it (quantization_causes)
    skipped: list[dict[str, str]] | None = None  # the clipping causes not tried on its runtime, with why

    def to_json(self) -> dict[str, Any]:
        out = {"verdict": self.verdict, "reason": self.reason, "first_departs": self.first_departs}
        return out | _present(quantization=self.quantization, cause=self.cause, skipped=self.skipped)


@dataclass(frozen=True, slots=True)
class InputRow(_Judged):
    """A port's own input to its first layer judged against the model's (preprocessing.input_rows),
    with the input cause that explains it where it is not within rounding."""

    input: str  # the model input's name
    layer: str  # the first layer that received it
    verdict: Outcome
    reason: str
    cause: CauseFinding | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"input": self.input, "layer": self.layer, "verdict": self.verdict, "reason": self.reason}
        return out | _present(cause=self.cause)


@dataclass(frozen=True, slots=True)
class AbsentPort:
    """A port asked for that did not run here, with why (a CUDA port without a GPU, a model its
    converter does not take): `--json`'s `absent_ports`."""

    port: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"port": self.port, "reason": self.reason}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AbsentPort:
        return cls(data["port"], data["reason"])


@dataclass(frozen=True, slots=True)
class PortResult:
    """One port's result: its units' rows in order, its counts and its end-to-end verdict."""

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
    # the port's own first-layer input against the model's (preprocessing), where the port shows it
    inputs: list[InputRow] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "inputs"}
        return out | _present(inputs=self.inputs)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PortResult:
        """The result its --json form (read back by json_output.json_restored) was written from."""
        given = _given(cls, data)
        inputs = data.get("inputs")
        given["layers"] = [UnitRow.from_json(r) for r in data["layers"]]
        given["end_to_end"] = EndToEndVerdict.from_json(data["end_to_end"])
        given["inputs"] = None if inputs is None else [InputRow.from_json(i) for i in inputs]
        return cls(**given)


def _given(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of `cls` a --json form holds (the ones never set are absent there)."""
    return {f.name: data[f.name] for f in fields(cls) if f.name in data}


def _judged(data: Mapping[str, Any]) -> dict[str, Any]:
    """A --json form's verdict as the enum, and its cause typed (None where it has none)."""
    return {"verdict": OUTCOMES[data["verdict"]], "cause": CauseFinding.of(data.get("cause"))}
