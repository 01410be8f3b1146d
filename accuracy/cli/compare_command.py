"""`opbench compare BASE NEW`: is the upgrade from BASE to NEW safe? Exit 0 safe, 1 not safe, 3 inconclusive."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from accuracy.cli.arguments import add_command, add_json, add_results
from accuracy.cli.text.compare import render
from accuracy.core.errors import OpbenchError, warn
from accuracy.core.files import not_a_file, os_error_line, write_atomic
from accuracy.core.formatting import printable
from accuracy.core.json_output import dumps
from accuracy.report.changes import DEFAULT_THRESHOLD as DEFAULT_TIME_THRESHOLD
from accuracy.run.profiles import DEFAULT, PROFILES
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
        "threshold), against the drift of the implementations whose libraries did not change (the "
        "controls: at one commit on one machine, a control's slowdown is never NOT SAFE), accuracy by "
        "verdict tier, bits by output digest. Exit status: 0 SAFE; 1 NOT SAFE "
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
    p.add_argument(
        "--confirm",
        action="store_true",
        help="rerun the classes whose speed is in doubt (slower or inconclusive) in BASE's and NEW's "
        "asv-built environments, adding their samples beside the first ones in --results, then decide "
        "once on all of them; the report and the HTML pages are left as they are",
    )
    p.add_argument(
        "--config",
        type=Path,
        default=Path("asv.conf.json"),
        help="with --confirm: the asv configuration the sets were run with (default: asv.conf.json)",
    )
    p.add_argument(
        "--profile",
        choices=tuple(PROFILES),
        default=None,
        help=f"with --confirm: the profile the sets were run with (default: {DEFAULT.name})",
    )


def run(args: argparse.Namespace) -> int:
    from accuracy.report.compare import compare_results  # pandas: only when it runs

    if args.csv is not None:
        check_output_file("--csv", args.csv, args.results)
        existed = args.csv.exists()  # a file that was not there now is never replaced at the end
        if existed:
            _refuse_foreign_csv(args.csv)
    comparison = compare_results(args.results, args.base, args.new, args.time_threshold)
    if args.confirm and comparison.doubtful_classes():
        confirm(args, comparison)
        comparison = compare_results(args.results, args.base, args.new, args.time_threshold)
        comparison.confirmed = True
    if args.csv is not None:
        write_csv(comparison, args.csv, replace=existed)
    for line in comparison.warnings:
        warn(line)
    if args.json:
        print(dumps(comparison.to_json()))
    else:
        print("\n".join(map(printable, render(comparison))))  # set names come from directory names
    return comparison.exit_code


def confirm(args: argparse.Namespace, comparison: Comparison) -> None:
    """Rerun the doubtful classes at BASE's and NEW's commits in their asv-built environments, with
    asv's --append-samples, into the same results: one decision on all samples, where a second
    results directory (the old advice) gave a second decision and, through `opbench run`,
    replaced the main report and pages with its own."""
    from accuracy.core.fingerprints import label_of

    sets = (comparison.base, comparison.new)
    machines = sorted({m for s in sets for m in s.frame["machine"].unique()})
    if len(machines) > 1:
        raise OpbenchError(f"--confirm reruns on one machine; BASE and NEW were measured on {', '.join(machines)}")
    for s in sets:
        here = sorted({label for env in s.frame["env_name"].unique() if (label := label_of(env))})
        if here:
            raise OpbenchError(
                f"--confirm reruns asv-built environments (`opbench run --commits` results); {s.role} "
                f"{s.spec!r} was measured in this environment ({', '.join(here)}): rerun its classes with "
                "`opbench run --bench` on that stack instead"
            )
    classes = comparison.doubtful_classes()
    pattern = "^(" + "|".join(c.replace(".", r"\.") for c in classes) + r")\."
    commits = sorted({s.commit_hash for s in sets})
    # the run's progress goes where the tables go, but never into --json's output
    progress = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with progress:
        print(
            f"opbench: confirming {len(classes)} classes ({', '.join(classes)}) at "
            f"{', '.join(c[:8] for c in commits)}: their new samples go beside the first ones in {args.results}",
            flush=True,
        )
        for commit in commits:
            _rerun(args, machines[0], pattern, commit)


def _rerun(args: argparse.Namespace, machine: str, pattern: str, commit: str) -> None:
    from accuracy.run.driver import run_suite  # asv: only when it runs

    run_suite(
        config=args.config,
        results=args.results,
        html=args.results.resolve().parent / "html",  # not published: publish=False
        machine=machine,
        quick=False,
        bench=pattern,
        commits=f"{commit}^!",
        profile=args.profile,
        knobs={},
        verbose=False,
        append_samples=True,
        publish=False,
    )


CSV_HEAD = b"op,benchmark_class,"  # how every comparison opbench writes begins


def _refuse_foreign_csv(path: Path) -> None:
    """An existing --csv is replaced only where it is a comparison opbench wrote (its header): a
    user's other file, named by mistake, is kept (it was replaced without a word)."""
    if not path.is_file():
        raise OpbenchError(f"--csv {path}: {not_a_file(path)}")
    try:
        with path.open("rb") as handle:
            head = handle.read(len(CSV_HEAD))
    except OSError as exc:
        raise OpbenchError(os_error_line("read", path, exc)) from None
    if head != CSV_HEAD:
        raise OpbenchError(
            f"--csv {path} exists and is not a comparison opbench wrote; it is kept: choose another name or remove it"
        )


def write_csv(comparison: Comparison, path: Path, replace: bool = True) -> None:
    import pandas as pd

    frame = pd.DataFrame(comparison.rows)
    for column in ("verdicts", "newly_failing"):
        frame[column] = frame[column].map(";".join)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file where a directory of the path should be: mkdir says "File exists"
        raise OpbenchError(f"cannot write {path}: {path.parent} is not a directory") from None
    except OSError as exc:
        raise OpbenchError(os_error_line("write", path, exc)) from None
    write_atomic(path, frame.to_csv(index=False), replace=replace)
