"""What a unit is, apart from how it is judged: the leaf calls a port computes as one piece, the
reference's tensors as a port receives them, and one port's output of a unit once judged.

Ports, causes and the report read these; only `units` judges (the ports' floor sits below it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from accuracy.backends.pytorch import torch_dtype
from accuracy.core.dtypes import FloatFormat
from accuracy.judge.verdicts import Judgement, Verdict
from accuracy.workflows.model.trace import LayerCall


@dataclass
class Unit:
    """Layers a port computes as one piece, judged as one; `reason` says why it is not compared."""

    calls: list[LayerCall]
    reason: str = ""
    detail: dict = field(default_factory=dict)  # port-specific: the ONNX tensors it reads and gives

    @property
    def key(self) -> str:
        return self.calls[0].key

    @property
    def covers(self) -> list[str]:
        return [c.key for c in self.calls]

    @property
    def last(self) -> str:
        return self.calls[-1].key


def leaf_units(calls: list[LayerCall]) -> list[Unit]:
    """One unit per leaf call; a call that cannot be judged (no tensor output) says why."""
    return [Unit([c], c.reason) for c in calls if c.leaf]


def nested_units(calls: list[LayerCall]) -> list[Unit]:
    """One unit per module call, parents (blocks, attention, MLPs) as well as leaves: a port that
    runs the reference's own modules judges the code between leaf layers too."""
    return [Unit([c], c.reason) for c in calls]


def port_inputs(tensors: list, fmt: FloatFormat) -> list:
    """The reference's tensors as the port receives them: floats rounded to its dtype, always
    copies, so that a port's in-place layer cannot overwrite the reference's activations."""
    return [t.to(torch_dtype(fmt), copy=True) if t.is_floating_point() else t.clone() for t in tensors]


@dataclass(frozen=True)
class IsolatedOutput:
    """A port's output of one unit run isolated: the unit's index among the port's units, the
    tensors the port fed it, whose they are (`Feed.source`), and the output."""

    index: int
    tensors: list
    source: str
    output: Any  # an ndarray


@dataclass(frozen=True)
class UnitJudgement:
    """One port's output of one unit, judged: the verdict, how (`tier`, and the registry `op` where
    the unit is one), the row's numbers, and the error the unit introduces."""

    judgement: Judgement
    tier: str
    op: str | None
    numbers: dict
    introduced: float
    cause: CauseFinding | None = None  # for a unit not within rounding: the known port bug that explains it (causes/)
    runtime_limit: str | None = None  # the port's runtime's declared limit that explains it (RUNTIME_LIMIT)


@dataclass(frozen=True)
class NamedCause:
    """Another catalogue entry that explains the unit as well: its name, words and fitted parameters."""

    name: str
    words: str | None
    parameters: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "words": self.words, "parameters": self.parameters}


@dataclass(frozen=True)
class SkippedCause:
    """A catalogue entry not tried on the unit, and why (a change its module cannot take)."""

    name: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "reason": self.reason}


@dataclass(frozen=True)
class CauseFinding:
    """What the cause search found for a flagged unit (causes.explain, the quantization causes):
    the entry that explains it (`explains`) or the nearest tried, its words (None: no entry
    applies), fitted parameters, the changed reference's verdict and ratio to its threshold, the
    others that explain it too, those skipped with why; a clipping cause's quantize point (`value`)
    and the unit it feeds (`path`); the error's shape along a token sequence (`positions`)."""

    name: str | None = None
    words: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    verdict: Verdict | None = None
    ratio: float | None = None
    explains: bool = False
    alternatives: tuple[NamedCause, ...] = ()
    skipped: tuple[SkippedCause, ...] = ()
    value: str | None = None
    path: str | None = None
    positions: dict[str, Any] | None = None

    def entries(self) -> tuple[NamedCause, ...]:
        """The entry named, then the others that explain the unit as well."""
        return (NamedCause(self.name or "", self.words, self.parameters), *self.alternatives)

    def to_json(self) -> dict[str, Any]:
        """The finding as `--json` writes it (the fields of before it was typed, in their order)."""
        found: dict[str, Any] = {
            "name": self.name,
            "words": self.words,
            "parameters": self.parameters,
            "verdict": self.verdict,
            "ratio": self.ratio,
            "explains": self.explains,
        }
        if self.value is not None:
            found |= {"value": self.value, "path": self.path}
        found |= {"alternatives": [a.to_json() for a in self.alternatives]}
        found |= {"skipped": [s.to_json() for s in self.skipped]}
        return found | ({"positions": self.positions} if self.positions is not None else {})

    @classmethod
    def of(cls, cause: CauseFinding | Mapping[str, Any] | None) -> CauseFinding | None:
        """A finding, from itself or its JSON form (a saved report read back, rows.py; the
        causes generation names end to end are given in that form too)."""
        if isinstance(cause, CauseFinding):
            return cause
        if not cause:
            return None
        verdict = cause.get("verdict")
        return cls(
            name=cause.get("name"),
            words=cause.get("words"),
            parameters=dict(cause.get("parameters") or {}),
            verdict=None if verdict is None else Verdict(verdict),
            ratio=cause.get("ratio"),
            explains=bool(cause.get("explains")),
            alternatives=tuple(
                NamedCause(a["name"], a["words"], a["parameters"]) for a in cause.get("alternatives", ())
            ),
            skipped=tuple(SkippedCause(s["name"], s["reason"]) for s in cause.get("skipped", ())),
            value=cause.get("value"),
            path=cause.get("path"),
            positions=cause.get("positions"),
        )
