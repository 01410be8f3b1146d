"""`opbench compare`'s text: both result sets, the stack difference, every case, the verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

from accuracy.core.formatting import format_number, format_table
from accuracy.judge.metric_table import ACCURACY, BY_NAME, OPS, compared

if TYPE_CHECKING:
    from accuracy.report.compare import Comparison


def render(comparison: Comparison) -> list[str]:
    base, new = comparison.base.describe(), comparison.new.describe()
    lines = [f"BASE {_set_line(base)}", f"NEW  {_set_line(new)}", *_stack_lines(comparison), ""]
    key_dims = comparison.key_dims
    has_condition = any(r["condition"] is not None for r in comparison.rows)
    # a model port's columns where the sets hold model tracks
    accuracy = [
        m
        for m in compared(ACCURACY)
        if m.asv_track
        and m.column
        and (
            m.suite == OPS
            or any(r[f"{m.name}_{side}"] is not None for r in comparison.rows for side in ("base", "new"))
        )
    ]
    header = [
        "op",
        "impl",
        "dtype",
        "size",
        *(["condition"] if has_condition else []),
        "threads",
        *(_DIM_HEADERS[d] for d in key_dims),
        "time BASE",
        "time NEW",
        "ratio",
        BY_NAME["gflops"].column,
        "verdict BASE -> NEW",
        *(m.column for m in accuracy),
        "bits",
        "change",
    ]
    rows = []
    for r in comparison.rows:
        rows.append(
            [
                r["op"],
                _text(r["impl"]),
                _text(r["dtype"]),
                _text(r["size"]),
                *([_text(r["condition"])] if has_condition else []),
                _text(r["threads"]),
                *(str(r[d]) for d in key_dims),
                _time(r["time_base"]),
                _time(r["time_new"]),
                _ratio(r["time_ratio"], r["time_change"]),
                _pair(r["gflops_base"], r["gflops_new"]),
                _pair(r["verdict_base"], r["verdict_new"], text=True),
                *(_pair(r[f"{m.name}_base"], r[f"{m.name}_new"]) for m in accuracy),
                r["bits"],
                r["verdict"] + (" (control)" if r["control"] else ""),
            ]
        )
    lines += format_table(header, rows)
    notes = ["ratio marks: ! significantly slower, + significantly faster, ? inconclusive"]
    if comparison.controls is not None:
        notes.append("(control): an implementation whose libraries did not change; the others are judged against them")
    if comparison.only_in_base or comparison.only_in_new:
        notes.append(
            f"not compared: {comparison.only_in_base} cases only in BASE, {comparison.only_in_new} only in NEW"
        )
    return [*lines, "", *notes, *comparison.summary()]


_DIM_HEADERS = {"machine": "machine", "env_name": "env"}


def _set_line(info: dict) -> str:
    return (
        f"{info['spec']!r} ({info['matched_on']}): commit {info['commit_hash'][:8]}, "
        f"machine {', '.join(info['machines'])}, env {', '.join(info['env_names'])}"
    )


def _stack_lines(comparison: Comparison) -> list[str]:
    """What changed in the stack between BASE and NEW, from the fingerprints."""
    missing = [role for role, s in (("BASE", comparison.base), ("NEW", comparison.new)) if s.stack is None]
    if missing:
        return [f"stack: no fingerprint for {' and '.join(missing)}"]
    difference = comparison.stack_difference
    if not difference:
        return ["stack: identical fingerprints"]
    table = format_table(["stack", "BASE", "NEW"], [list(row) for row in difference])
    return ["", *table]


def _text(value) -> str:
    return "-" if value is None else str(value)


def _time(value) -> str:
    from asv.util import human_value

    return "-" if value is None else human_value(value, "seconds")


def _ratio(value, change) -> str:
    if value is None:
        return "-"
    mark = {"slower": " !", "faster": " +", "inconclusive": " ?"}.get(change, "")
    return f"{value:.2f}x{mark}"


def _pair(before, after, text: bool = False) -> str:
    show = _text if text else format_number
    if before is None and after is None:
        return "-"
    if before == after:
        return show(before)
    return f"{show(before)} -> {show(after)}"
