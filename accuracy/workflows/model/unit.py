"""What a unit is, apart from how it is judged: the leaf calls a port computes as one piece, the
reference's tensors as a port receives them, and one port's output of a unit once judged.

Ports, causes and the report read these; only `units` judges (the ports' floor sits below it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from accuracy.backends.pytorch import torch_dtype
from accuracy.core.dtypes import FloatFormat
from accuracy.judge.verdicts import Judgement
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
class UnitJudgement:
    """One port's output of one unit, judged: the verdict, how (`tier`, and the registry `op` where
    the unit is one), the row's numbers, and the error the unit introduces."""

    judgement: Judgement
    tier: str
    op: str | None
    numbers: dict
    introduced: float
    cause: dict | None = None  # for a unit not within rounding: the known port bug that explains it (causes/)
    runtime_limit: str | None = None  # the port's runtime's declared limit that explains it (RUNTIME_LIMIT)
