"""`opbench compare BASE NEW`: is the upgrade from BASE to NEW safe? Exit 0 safe, 1 not safe, 3 inconclusive."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from accuracy.cli.arguments import add_command, add_json, add_results
from accuracy.cli.text.compare import render
from accuracy.core.errors import OpbenchError, warn
from accuracy.core.formatting import printable
from accuracy.core.json_output import dumps
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
        print(dumps(comparison.to_json()))
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
        frame.to_csv(path, index=False)
    except OSError as exc:
        raise OpbenchError(f"cannot write {path}: {exc.strerror or exc}") from exc
