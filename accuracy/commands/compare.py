"""`opbench compare BASE NEW`: is the upgrade from BASE to NEW safe? Exit 1 if anything got worse."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from asv.util import human_value

from accuracy.commands.common import add_command, add_json, add_results
from accuracy.errors import OpbenchError
from accuracy.metric_table import ACCURACY, BY_NAME, compared
from accuracy.resultstore import check_output_file
from accuracy.tables import format_table
from accuracy.report.compare import DEFAULT_TIME_THRESHOLD, Comparison, compare_results


def register(sub) -> None:
    p = add_command(
        sub, "compare", run,
        help="compare two asv result sets (machines, environments or commits): is the upgrade safe?",
        description="BASE and NEW each name a result set: a machine, an asv environment name or a "
        "commit hash prefix (a set with several commits means its latest). Prints every op and "
        "parameter combination present in both, worst first, then one verdict. Exit status: 0 safe, "
        "1 something got worse (significant slowdown, result newly beyond rounding or non-finite, "
        "benchmark newly failing), 2 bad input.",
    )
    p.add_argument("base", metavar="BASE", help="the result set before the change")
    p.add_argument("new", metavar="NEW", help="the result set after the change")
    add_results(p)
    p.add_argument("--time-threshold", type=float, default=DEFAULT_TIME_THRESHOLD,
                   help="smallest timing ratio that counts as a change, when asv's 99%% confidence "
                   f"intervals also separate (default: {DEFAULT_TIME_THRESHOLD})")
    add_json(p)
    p.add_argument("--csv", type=Path, metavar="PATH", help="also write one CSV row per comparison row")


def run(args: argparse.Namespace) -> int:
    if args.csv is not None:
        check_output_file("--csv", args.csv, args.results)
    comparison = compare_results(args.results, args.base, args.new, args.time_threshold)
    for line in comparison.warnings:
        print(f"opbench: warning: {line}", file=sys.stderr)
    if args.csv is not None:
        write_csv(comparison, args.csv)
    if args.json:
        print(json.dumps(comparison.to_json(), indent=2))
    else:
        print("\n".join(render(comparison)))
    return comparison.exit_code


def write_csv(comparison: Comparison, path: Path) -> None:
    import pandas as pd

    frame = pd.DataFrame(comparison.rows)
    for column in ("verdicts", "newly_failing", "accuracy_worse", "accuracy_better"):
        frame[column] = frame[column].map(";".join)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(path, index=False)
    except OSError as exc:
        raise OpbenchError(f"cannot write {path}: {exc.strerror or exc}") from exc


def render(comparison: Comparison) -> list[str]:
    base, new = comparison.base.describe(), comparison.new.describe()
    lines = [f"BASE {_set_line(base)}", f"NEW  {_set_line(new)}", ""]
    key_dims = comparison.key_dims
    accuracy = [m for m in compared(ACCURACY) if m.asv_track]
    header = ["op", "impl", "dtype", "size", "threads", *(_DIM_HEADERS[d] for d in key_dims),
              "time base", "time new", "ratio", BY_NAME["gflops"].label, *(m.label for m in accuracy), "verdict"]
    rows = []
    for r in comparison.rows:
        rows.append([
            r["op"], _text(r["impl"]), _text(r["dtype"]), _text(r["size"]), _text(r["threads"]),
            *(str(r[d]) for d in key_dims),
            _time(r["time_base"]), _time(r["time_new"]),
            _ratio(r["time_ratio"], r["time_change"]),
            _pair(r, "gflops"), *(_pair(r, m.name) for m in accuracy),
            r["verdict"],
        ])
    lines += format_table(header, rows)
    notes = []
    if comparison.only_in_base or comparison.only_in_new:
        notes.append(f"not compared: {comparison.only_in_base} rows only in BASE, {comparison.only_in_new} only in NEW")
    return lines + [""] + notes + [comparison.summary()]


_DIM_HEADERS = {"machine": "machine", "env_name": "env"}


def _set_line(info: dict) -> str:
    return (f"{info['spec']!r} ({info['matched_on'].replace('env_name', 'environment')}): "
            f"commit {info['commit_hash'][:8]}, machine {', '.join(info['machines'])}, "
            f"env {', '.join(info['env_names'])}")


def _text(value) -> str:
    """A parameter as it was given: 128, not 128.0."""
    if value is None:
        return "-"
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _time(value) -> str:
    return "-" if value is None else human_value(value, "seconds")


def _ratio(value, change) -> str:
    if value is None:
        return "-"
    mark = {"slower": " !", "faster": " +", "inconclusive": " ?"}.get(change, "")
    return f"{value:.2f}x{mark}"


def _num(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def _pair(row: dict, slot: str) -> str:
    before, after = row[f"{slot}_base"], row[f"{slot}_new"]
    if before is None and after is None:
        return "-"
    if before == after:
        return _num(before)
    return f"{_num(before)} -> {_num(after)}"
