"""`opbench compare BASE NEW`: is the upgrade from BASE to NEW safe? Exit 0 safe, 1 not safe, 3 inconclusive."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from accuracy.cli.arguments import add_command, add_json, add_results
from accuracy.core.errors import OpbenchError, warn
from accuracy.core.files import os_error_line, write_atomic
from accuracy.core.formatting import format_number, format_table, printable
from accuracy.judge.metric_table import ACCURACY, BY_NAME, compared
from accuracy.report.changes import DEFAULT_THRESHOLD as DEFAULT_TIME_THRESHOLD
from accuracy.run.results_store import check_output_file

if TYPE_CHECKING:
    from accuracy.report.compare import Comparison


def register(sub) -> None:
    p = add_command(
        sub,
        "compare",
        run,
        help="compare two asv result sets (machines, environments, commits or package versions): is the upgrade safe?",
        description="BASE and NEW each name a result set: a machine or asv environment name (or a unique "
        "prefix of one), a commit hash prefix, or package versions such as numpy==2.4.6 (several joined "
        "by commas; matched against the fingerprints and asv matrix environment names). A set with "
        "several commits means its latest. Prints the stack difference, every case present in both, "
        "worst first, then the verdict. Time is decided by time_op's samples (asv's test and the ratio "
        "threshold), accuracy by verdict tier, bits by output digest. Exit status: 0 SAFE; 1 NOT SAFE "
        "(a case left within rounding, a significant slowdown, a benchmark newly failing); 2 bad input; "
        "3 INCONCLUSIVE (nothing got worse, but the speed of some cases could not be decided: fewer "
        "than 2 samples, or a change asv's test does not confirm).",
    )
    p.add_argument("base", metavar="BASE", help="the result set before the change")
    p.add_argument("new", metavar="NEW", help="the result set after the change")
    add_results(p)
    p.add_argument(
        "--time-threshold",
        type=float,
        default=DEFAULT_TIME_THRESHOLD,
        help="smallest ratio of median times that counts as a change, when asv's test also finds "
        f"the samples different (default: {DEFAULT_TIME_THRESHOLD})",
    )
    add_json(p)
    p.add_argument("--csv", type=Path, metavar="PATH", help="also write one CSV row per case")


def run(args: argparse.Namespace) -> int:
    from accuracy.report.compare import compare_results  # pandas: only when it runs

    if args.csv is not None:
        check_output_file("--csv", args.csv, args.results)
    comparison = compare_results(args.results, args.base, args.new, args.time_threshold)
    if args.csv is not None:
        write_csv(comparison, args.csv)
    for line in comparison.warnings:
        warn(line)
    if args.json:
        print(json.dumps(comparison.to_json(), indent=2))
    else:
        print("\n".join(map(printable, render(comparison))))  # set names come from directory names
    return comparison.exit_code


def write_csv(comparison: Comparison, path: Path) -> None:
    import pandas as pd

    frame = pd.DataFrame(comparison.rows)
    for column in ("verdicts", "newly_failing"):
        frame[column] = frame[column].map(";".join)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OpbenchError(os_error_line("write", path, exc)) from None
    write_atomic(path, frame.to_csv(index=False))


def render(comparison: Comparison) -> list[str]:
    base, new = comparison.base.describe(), comparison.new.describe()
    lines = [f"BASE {_set_line(base)}", f"NEW  {_set_line(new)}", *_stack_lines(comparison), ""]
    key_dims = comparison.key_dims
    has_condition = any(r["condition"] is not None for r in comparison.rows)
    accuracy = [m for m in compared(ACCURACY) if m.asv_track and m.column]
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
                r["verdict"],
            ]
        )
    lines += format_table(header, rows)
    notes = ["ratio marks: ! significantly slower, + significantly faster, ? inconclusive"]
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
