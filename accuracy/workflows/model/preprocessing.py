"""A port's own first-layer input against the reference model's: the preprocessing check.

A runtime's activations file gives each layer's inputs as the runtime computed them
(`<path>/in0`); its layers are judged on those, so a port that prepared the image otherwise (BGR,
another mean and std, [0, 255] pixels) passes every layer and differs end to end. Here the input
the port's first layer received is judged against the one the reference model's received, as a
unit (causes.inputs.ModelInput, the identity) with the one judge, and where it is not within
rounding the input causes of the catalogue are tried on it.
"""

from __future__ import annotations

import numpy as np

from accuracy.backends.pytorch import tensor_to_numpy as to_numpy
from accuracy.judge.verdicts import BEYOND, WITHIN
from accuracy.workflows.model.causes import explain
from accuracy.workflows.model.causes.inputs import ModelInput
from accuracy.workflows.model.ports.base import Port
from accuracy.workflows.model.rows import InputRow
from accuracy.workflows.model.trace import LayerCall
from accuracy.workflows.model.unit import Unit, port_inputs
from accuracy.workflows.model.units import judge_unit


def _first_calls(calls: list[LayerCall], given: dict[str, np.ndarray]) -> list[tuple[str, LayerCall, int]]:
    """(model input name, the first call that received it as it is, the input's index there)."""
    found = []
    for name, value in given.items():
        hit = next(
            (
                (name, call, i)
                for call in calls
                for i, t in enumerate(call.inputs)
                if call.producers[i:i + 1] == [None] and tuple(t.shape) == value.shape
                and np.array_equal(to_numpy(t), value)
            ),
            None,
        )  # fmt: skip
        if hit is not None:
            found.append(hit)
    return found


def input_rows(port: Port, calls: list[LayerCall], given: dict[str, np.ndarray]) -> list[InputRow]:
    """Per model input whose first layer the port shows its own input for: that input judged
    against the model's, with the cause where it is not within rounding."""
    rows = []
    for name, call, i in _first_calls(calls, given):
        feed = port.inputs_for(Unit([call]))
        if isinstance(feed, str) or feed.source != port.name:  # the port is fed the reference's inputs
            continue
        theirs, reference = to_numpy(feed.tensors[i]), call.inputs[i]
        if theirs.shape != tuple(reference.shape):
            rows.append(InputRow(name, call.key, BEYOND, f"shape {theirs.shape}, the model's {tuple(reference.shape)}"))
            continue
        unit = Unit([LayerCall(name, name, ModelInput(), [reference], None, [None])])
        tensors = port_inputs([reference], port.fmt)
        if np.array_equal(theirs, to_numpy(tensors[0]), equal_nan=True):
            rows.append(InputRow(name, call.key, WITHIN, "the same values as the model's input"))
            continue
        judged = judge_unit(unit, tensors, port.fmt, {port.name: theirs})[port.name].judgement
        cause = explain(unit, tensors, port.fmt, port.name, theirs, None) if judged.verdict != WITHIN else None
        rows.append(InputRow(name, call.key, judged.verdict, judged.reason, cause))
    return rows
