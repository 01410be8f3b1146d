"""Assertions for a user's test suite: within rounding, instead of a guessed rtol and atol."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from accuracy.workflows.check import check


def assert_within_rounding(actual, *, op: str | None = None, fn: Callable | str | None = None, inputs: Mapping) -> None:
    """Fail unless `actual`, computed from `inputs` (name -> array), is within rounding of the op's
    exact result (or of `fn` evaluated in float64), by the verdicts `opbench check` gives."""
    report = check(op=op, fn=fn, inputs=inputs, outputs={"actual": actual})
    if not report.within_rounding:
        raise AssertionError(report.explanation())
