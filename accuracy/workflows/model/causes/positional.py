"""The shape of a flagged unit's error along the token sequence, as the cause search reads it
(issue 59, item 3): an error that grows with position points to the rotary frequencies or their
scaling (a frequency leaves position 0 exact, cos 0 = 1, and its angle's error grows with the
position); one that starts at the sliding window points to the window (a port's window of w'
keys for w changes no query before position min(w, w')); one already there at position 0 is
neither.

The shape is of the port's output against the unit's float64 evaluation, position by position
(positions.error_by_position), before any cause is tried.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from accuracy.core.dtypes import FloatFormat
from accuracy.workflows.model.causes.cause import GROWS, WINDOW, Cause
from accuracy.workflows.model.causes.families import window_of
from accuracy.workflows.model.positions import error_by_position

FIRST = "there from position 0"
STARTS = "starts after position 0"
# below this fraction of its largest error, or this many unit roundoffs, a position is exact
FLOOR_FRACTION, FLOOR_ROUNDOFFS = 0.05, 8.0
# the rank correlation of the error with the position above which the error grows with it
GROWING = 0.7
# a window's error jumps at its onset (the first query that sees other keys); a frequency's grows
JUMP = 0.25
# an error at position 0 beyond any rounding: this normwise, and this many unit roundoffs
FAR, FAR_ROUNDOFFS = 0.01, 64.0
FEWEST_POSITIONS = 4


@dataclass(frozen=True)
class Shape:
    """The error's shape along the sequence: `kind` (GROWS, WINDOW, STARTS or FIRST), the first
    position beyond the floor (`onset`), the unit's own window (None: none), and why, in words."""

    kind: str
    onset: int
    window: int | None
    seen: str  # what the error does along the sequence
    points_to: str = ""  # what that points to, where it points anywhere
    far_at_start: bool = False  # position 0 far off, beyond any rounding: no window's error

    @property
    def words(self) -> str:
        return f"{self.seen}: {self.points_to}" if self.points_to else self.seen

    def as_dict(self, named: Cause | None = None) -> dict[str, Any]:
        """The shape for --json and the answer; where `named` (the cause that explains) gives
        another shape, what was seen without the pointer, which would contradict it."""
        said = self.seen if named is not None and self.points_to and not self.fits(named) else self.words
        return {"shape": self.kind, "onset": self.onset, "window": self.window, "words": said}

    def fits(self, cause: Cause) -> bool:
        """Whether the cause's bug gives an error of this shape."""
        return cause.positions is not None and cause.positions == self.kind

    def excludes(self, cause: Cause) -> str | None:
        """Why the cause cannot give this error, or None: a window changes no position before the
        narrower of its widths, so an error far off at position 0 is no window's. Only there: a
        barely flagged unit's rounding at position 0 can be near its largest error, and a long
        window's error can rise slowly past its onset."""
        if cause.positions != WINDOW or not self.far_at_start:
            return None
        return f"{self.seen}: no sliding window gives that"


def positional_shape(
    output: np.ndarray, reference: np.ndarray, length: int | None, fmt: FloatFormat, module: Any
) -> Shape | None:
    """The shape of the port's error along a sequence of `length` tokens; None where the unit has
    no such axis, the sequence is short, or the output matches the reference."""
    if length is None or length < FEWEST_POSITIONS:
        return None
    errors = error_by_position(output, reference, length)
    if errors is None or not np.all(np.isfinite(errors)) or max(errors) == 0:
        return None
    error = np.asarray(errors)
    floor = max(FLOOR_FRACTION * float(error.max()), FLOOR_ROUNDOFFS * fmt.u)
    beyond = np.flatnonzero(error > floor)
    if beyond.size == 0:
        return None
    onset, window = int(beyond[0]), window_of(module)
    worst = int(np.argmax(error))
    if onset == 0:
        far = bool(error[0] >= max(JUMP * error[worst], FAR, FAR_ROUNDOFFS * fmt.u))
        return Shape(FIRST, 0, window, f"its error is there from position 0 ({error[0]:.2g})", "", far)
    from scipy.stats import spearmanr  # here: importing scipy.stats takes 0.5 CPU-s, and most units have no sequence

    rho = float(spearmanr(np.arange(length), error).statistic)
    if window is not None and onset <= window and error[onset] >= JUMP * error[worst]:
        where = "the sliding window's width" if onset == window else f"inside the sliding window of {window} keys"
        return Shape(WINDOW, onset, window, f"its error starts at position {onset}, {where}", "the window")
    if rho >= GROWING:
        said = f"its error grows with position ({error[0]:.2g} at position 0, {error[worst]:.2g} at {worst})"
        return Shape(GROWS, onset, window, said, "the rotary frequencies or their scaling")
    return Shape(STARTS, onset, window, f"its error starts at position {onset}")
