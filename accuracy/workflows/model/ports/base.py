"""What every port is: units, the inputs it judges them on, and two runs (isolated, end to end).

A port answers two questions for `opbench model`:
- `isolated(unit, inputs)`: the port's output for one unit (a leaf layer, or the layers one fused
  port node covers) given *the same inputs* the reference layer received, rounded to the port's
  dtype: the error that unit introduces;
- `end_to_end(inputs, units)`: every unit's output when the whole port runs on the model input:
  the error each layer inherits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from accuracy.core.dtypes import FORMATS, FloatFormat
from accuracy.workflows.model.trace import LayerCall
from accuracy.workflows.model.unit import Unit, leaf_units, port_inputs

FLOAT32 = FORMATS["float32"]
# Whose activations a unit's inputs are: the reference model's (shared by every port of the same
# dtype, so the unit is judged once for all of them), or the port's own (an activations file's).
REFERENCE = "reference"


@dataclass(frozen=True)
class Feed:
    """The inputs a unit is judged on: torch tensors in the port's dtype, and whose they are."""

    tensors: list
    source: str = REFERENCE


@dataclass
class EndToEnd:
    """A port's run on the model input: each unit's output by layer key, the inputs each layer
    received where the port shows them (lists; may be absent), and the model's output."""

    outputs: dict[str, np.ndarray]
    output: np.ndarray
    received: dict[str, list] = field(default_factory=dict)
    noise: dict | None = None  # a quantized port's predicted noise at its output (workflows.model.quantization)


class Port:
    name: str
    description: str  # what runs, in words: the report says it next to the port's name
    fmt: FloatFormat = FLOAT32
    products: FloatFormat | None = None  # the format its matmuls and convolutions round their inputs to (TF32)
    # the library whose kernels compute its units: its declared limits (catalog/runtime_limits.py)
    # can explain a unit's excess as the runtime's, not the port's
    runtime: str = "torch"
    brought = False  # the user brought it (a file, a Keras factory): its problems are bad input
    built_seconds = 0.0  # the time its build ran the port (a child process), counted in the port's time

    def units(self, calls: list[LayerCall]) -> list[Unit]:
        return leaf_units(calls)

    def inputs_for(self, unit: Unit) -> Feed | str:
        """What `unit` is judged on, or why the port has nothing to judge it on."""
        return Feed(port_inputs(unit.calls[0].inputs, self.fmt))

    def isolated(self, unit: Unit, inputs: list) -> np.ndarray:
        """The port's output of `unit` on the reference's inputs (at their own precision)."""
        raise NotImplementedError

    def end_to_end(self, inputs: dict[str, np.ndarray], units: list[Unit]) -> EndToEnd:
        raise NotImplementedError
