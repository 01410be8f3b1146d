"""`opbench report`: the trend report (HTML, Markdown, CSV, Parquet) from asv results."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from accuracy.cli.arguments import add_command, add_results
from accuracy.core.errors import OpbenchError, warn
from accuracy.core.files import check_owned_directory
from accuracy.report.changes import DEFAULT_MAX_PLOTS, DEFAULT_THRESHOLD
from accuracy.run.results_store import check_name, check_output_dir


def register(subparsers) -> None:
    parser = add_command(
        subparsers,
        "report",
        run,
        help="write an HTML/Markdown trend report from asv results",
        description="Load every asv result, flag regressions between commits, compare "
        "environments, and write <out>/<name>/index.html, report.md and CSV/Parquet data.",
    )
    add_results(parser)
    parser.add_argument("--out", type=Path, default=Path("reports"), help="where reports go (default: reports)")
    parser.add_argument("--name", default="latest", help="report subdirectory name (default: latest)")
    parser.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help=f"smallest timing ratio reported as a step (default: {DEFAULT_THRESHOLD})",
    )
    parser.add_argument(
        "--nondeterministic",
        action="append",
        metavar="PATTERN",
        help="glob of track benchmarks whose values are noisy, judged like timings "
        "(repeatable; timings and GFLOP/s always are)",
    )
    parser.add_argument(
        "--max-plots",
        type=int,
        default=DEFAULT_MAX_PLOTS,
        help="history figures of the largest steps (default: %(default)s); every op run always gets its own section",
    )


def run(args: argparse.Namespace) -> int:
    from accuracy.report.render import write_report  # pandas and matplotlib: only when it runs
    from accuracy.report.trends import DEFAULT_NONDETERMINISTIC

    check_name("--name", args.name)
    if not (math.isfinite(args.threshold) and args.threshold > 1):  # NaN compares false: no step would pass it
        raise OpbenchError(f"--threshold {args.threshold} must be a finite number greater than 1 (e.g. 1.10 for 10%)")
    if args.max_plots < 0:  # a slice's negative end: it drew all figures but the last 5
        raise OpbenchError(f"--max-plots {args.max_plots} must be 0 or more (0: no history figures)")
    check_output_dir("--out", args.out / args.name, args.results)
    check_owned_directory("--out/--name", args.out / args.name)
    index = write_report(
        args.results,
        args.out,
        args.name,
        threshold=args.threshold,
        nondeterministic=args.nondeterministic or DEFAULT_NONDETERMINISTIC,
        max_plots=args.max_plots,
        on_warning=warn,
    )
    print(index)
    return 0
