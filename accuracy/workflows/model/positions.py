"""Error by position: for a model fed token sequences, each flagged unit's error at each position
of the sequence, so that a bug that depends on position (rope scaling ignored: exact at position 0,
far off at 8,192; a sliding window off by one: right until the window) shows where it starts.

The position axis of a unit's output is its first axis after the batch whose length is the
sequence's; the error there is normwise relative over the other axes, against the unit's float64
evaluation on the inputs it was judged on (its `introduced` error, position by position).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from accuracy.core.dtypes import FloatFormat
from accuracy.workflows.model.answer import is_flagged
from accuracy.workflows.model.rows import UnitRow
from accuracy.workflows.model.unit import IsolatedOutput, Unit
from accuracy.workflows.model.units import float64_reference


def sequence_length(given: dict[str, np.ndarray]) -> int | None:
    """The length of the model's token sequences: its integer inputs of shape [batch, length]."""
    lengths = {int(v.shape[1]) for v in given.values() if v.ndim == 2 and v.dtype.kind in "iu" and v.shape[1] > 1}
    return lengths.pop() if len(lengths) == 1 else None


def error_by_position(output: np.ndarray, reference: np.ndarray, length: int) -> list[float] | None:
    """The normwise relative error of `output` at each position (None: no axis of that length)."""
    out, ref = np.asarray(output, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if out.shape != ref.shape:
        return None
    axis = next((a for a in range(1, ref.ndim) if ref.shape[a] == length), None)
    if axis is None:
        return None
    diff, ref = np.moveaxis(out - ref, axis, 0).reshape(length, -1), np.moveaxis(ref, axis, 0).reshape(length, -1)
    finite = np.isfinite(diff) & np.isfinite(ref)
    diff, ref = np.where(finite, diff, 0.0), np.where(finite, ref, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        errors = np.linalg.norm(diff, axis=1) / np.linalg.norm(ref, axis=1)
    return [float(e) if np.isfinite(e) else float(np.linalg.norm(d)) for e, d in zip(errors, diff, strict=True)]


def with_positions(
    rows: list[UnitRow], units: list[Unit], outputs: Sequence[IsolatedOutput], fmt: FloatFormat, length: int
) -> list[UnitRow]:
    """The rows, each flagged one with its `error_by_position`, from the port's isolated output of its unit."""
    flagged = {r.path for r in rows if is_flagged(r.verdict)}
    found: dict[str, list[float]] = {}
    for isolated in outputs:
        unit = units[isolated.index]
        if unit.key not in flagged:
            continue
        try:
            reference = float64_reference(unit, isolated.tensors, fmt)
        except Exception:  # a unit the float64 evaluation cannot take again: no positions, as before
            continue
        errors = error_by_position(isolated.output, reference, length)
        if errors is not None:
            found[unit.key] = errors
    return [replace(r, error_by_position=found[r.path]) if r.path in found else r for r in rows]
