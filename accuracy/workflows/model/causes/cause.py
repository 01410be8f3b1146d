"""A catalogue entry: a known port bug as data, and the small builders entries share."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from accuracy.workflows.model.kinds import kind_name

# the positional shapes of a port's error a bug gives (causes/positional.py): rotary frequencies
# and their scaling leave position 0 exact and grow with it; a window changes nothing before it
GROWS, WINDOW = "grows with position", "starts at the window"


@dataclass(frozen=True)
class Context:
    """What a cause may read beyond the unit's module: the model's modules by path (another
    layer's weight), the reference run's calls (the shape a flatten took) and the unit's call."""

    modules: dict[str, Any] = field(default_factory=dict)
    calls: list = field(default_factory=list)  # LayerCall, in the order the reference ran them
    call: Any = None  # the unit's LayerCall
    positions: Any = None  # the shape of the port's error along the sequence (positional.Shape), where seen

    @property
    def length(self) -> int | None:
        """The model's token sequences' length: the one length of the integer [batch, length]
        tensors its layers were called with (input ids, position ids); None for any other model."""
        lengths = {
            int(t.shape[1])
            for c in self.calls
            for t in c.inputs
            if getattr(t, "ndim", 0) == 2 and not t.is_floating_point() and not t.is_complex() and t.shape[1] > 1
        }
        return lengths.pop() if len(lengths) == 1 else None

    def producer(self, index: int = 0) -> Any:
        """The leaf call whose output is the unit's input `index`, or None."""
        key = self.call.producers[index] if self.call is not None and index < len(self.call.producers) else None
        return next((c for c in self.calls if c.key == key), None) if key else None


@dataclass(frozen=True)
class Cause:
    """A known port bug: the module kinds it applies to, `change(module, value)` the reference
    module with it (a copy), `values(module)` the candidate values of its parameter (None: no
    parameter; a range: fitted), `words(module, value)` what the answer says, and `example` the value
    the model self-test injects to check that the entry is named (a parameter's wrong value).
    `choices(module, context)`: a discrete parameter's candidates instead (another layer's path, an
    axis), the nearest tried; `contextual`: `change(module, value, context)` reads the model too.
    `fit(module, inputs, output)`, where given, finds the parameter in closed form instead of the
    1-D search (a mean and std per channel: more numbers than a 1-D search fits).
    `kinds` are matched by what a module computes (`kinds.kind_name`: torch's own modules by class,
    any other by a probe of its forward and what it holds), `accepts`: a test of the module itself,
    for a kind no class name tells (an attention).
    `positions`: the shape along the token sequence of the error the bug gives (GROWS, WINDOW):
    the cause search tries first the entries whose shape the port's error has."""

    name: str
    kinds: tuple[str, ...]
    change: Callable[..., Any]
    words: Callable[[Any, Any], str]
    values: Callable[[Any], tuple] | None = None
    parameter: str | None = None
    example: Any = None
    choices: Callable[[Any, Context], Sequence[Any]] | None = None
    contextual: bool = False
    fit: Callable[[Any, list, Any], Any] | None = None
    accepts: Callable[[Any], bool] | None = None
    positions: str | None = None

    def applies(self, module: Any) -> bool:
        return kind_name(module) in self.kinds or (self.accepts is not None and self.accepts(module))

    def changed(self, module: Any, value: Any, context: Context) -> Any:
        return self.change(module, value, context) if self.contextual else self.change(module, value)


def with_attribute(attribute: str | Callable[[Any], str]):
    """The change that sets one attribute (or the one `attribute(module)` names) on a copy."""

    def change(module: Any, value: Any) -> Any:
        changed = copy.deepcopy(module)
        setattr(changed, attribute(module) if callable(attribute) else attribute, value)
        return changed

    return change


def named(value: float, defaults: dict[float, str]) -> str:
    """A fitted value, with whose default it is where it is one (within 10%)."""
    known = next((words for v, words in defaults.items() if abs(value - v) <= 0.1 * v), None)
    return f"{value:.2g}" + (f" ({known})" if known else "")
