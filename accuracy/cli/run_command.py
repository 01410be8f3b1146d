"""`opbench run`: the asv suite on this machine (or across commits), then HTML and the report."""

from __future__ import annotations

import json
import math
from pathlib import Path

from accuracy.cli.arguments import add_command, add_results
from accuracy.core.errors import OpbenchError, warn
from accuracy.core.files import check_owned_directory
from accuracy.run.profiles import DEFAULT, PROFILES, QUICK
from accuracy.run.results_store import ASV_HTML_MARKERS, check_name, check_output_dir, check_results_dir


def register(sub) -> None:
    p = add_command(sub, "run", run, help="run the asv suite, publish HTML history and write the report")
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"few samples per benchmark and the {QUICK.name} profile (docs/asv-suite.md)",
    )
    p.add_argument("--bench", help="only benchmarks matching this regex (asv --bench)")
    p.add_argument(
        "--machine",
        default=None,
        help="asv machine name (default: this host's name); runs in this environment add "
        "the environment digest to it, e.g. ci-3f2a9c1b",
    )
    add_results(p)
    p.add_argument(
        "--html",
        type=Path,
        default=None,
        help="asv HTML directory, emptied by every publish (default: html beside results)",
    )
    p.add_argument("--commits", help="a commit range (e.g. HEAD~3..HEAD) run in asv-built virtualenvs")
    p.add_argument(
        "--config", type=Path, default=Path("asv.conf.json"), help="asv configuration (default: asv.conf.json)"
    )
    p.add_argument(
        "--profile",
        choices=tuple(PROFILES),
        default=None,
        help=f"the suite's grid and tracks (default: {QUICK.name} with --quick, else {DEFAULT.name})",
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a process-start knob (e.g. OPENBLAS_CORETYPE=SkylakeX); it is part of the "
        "environment digest, so results with and without it are kept side by side",
    )
    p.add_argument("--report", type=Path, default=Path("reports"), help="where the trend report goes")
    p.add_argument("--no-report", action="store_true", help="skip the trend report")
    p.add_argument("-v", "--verbose", action="store_true", help="show asv's own output (it always goes to the log)")


def parse_knobs(pairs: list[str]) -> dict[str, str]:
    knobs = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isupper() or not key.replace("_", "").isalnum():
            raise OpbenchError(f"--env wants KEY=VALUE with an upper-case KEY, got {pair!r}")
        knobs[key] = value
    return knobs


def check_bench_regex(pattern: str | None) -> None:
    import re

    if pattern is None:
        return
    try:
        re.compile(pattern)
    except re.error as exc:
        raise OpbenchError(f"--bench {pattern!r} is not a valid regular expression: {exc}") from None


def run(args) -> int:
    from accuracy.run.driver import default_machine_name, run_suite  # asv: only when it runs
    from accuracy.run.offline_pages import serve_line

    results = check_results_dir(args.results)
    html = check_output_dir(
        "--html", args.html or results.resolve().parent / "html", results, owned_marker=ASV_HTML_MARKERS
    )
    if not args.no_report:
        check_output_dir("--report", args.report / "latest", results)
        check_owned_directory("--report", args.report / "latest")
    knobs = parse_knobs(args.env)
    machine = check_name("--machine", default_machine_name() if args.machine is None else args.machine)
    check_bench_regex(args.bench)
    bench = op_bench_regex(args.bench)
    if bench != args.bench:
        print(
            f"opbench: --bench {args.bench}: the {args.bench.strip().lower()} op's benchmarks (asv --bench '{bench}')"
        )
    outcome = run_suite(
        config=args.config,
        results=results,
        html=html,
        machine=machine,
        quick=args.quick,
        bench=bench,
        commits=args.commits,
        profile=args.profile,
        knobs=knobs,
        verbose=args.verbose,
    )
    if not outcome.written:
        raise OpbenchError(
            f"asv wrote no results (no benchmark matched, or the run failed before saving); see {outcome.log}"
        )
    where = str(results / outcome.machine)
    if outcome.label:
        where += f", environment {outcome.label} (compare it by that name)"
    print(f"opbench: results in {where}, HTML in {html}, asv's log in {outcome.log}")
    for line in outcome.warnings:
        warn(line)
    for line in summarize(outcome.written, bench, verbose=args.verbose):
        print(f"opbench: {line}")
    if not args.no_report:
        from accuracy.report import write_report

        path = write_report(results, args.report, "latest")
        print(f"opbench: report in {path}")
    print(f"opbench: asv's pages need a server (opened from disk, a browser refuses their data): {serve_line(html)}")
    return 0


def op_bench_regex(pattern: str | None) -> str | None:
    """`--bench softmax`, an op's name as users type it, selects that op's benchmark class whole.

    asv matches --bench against `name(param, ...)` too, so the plain word also picked single
    parameter combinations of other classes (`torch.softmax` in an implementation's name) and
    left the rest of them n/a. Any other pattern goes to asv as given."""
    from accuracy.catalog.registry import all_ops
    from accuracy.judge.metric_table import benchmark_class_name

    if pattern is None:
        return None
    names = {op.name for op in all_ops()}
    word = pattern.strip().lower()
    return rf"\.{benchmark_class_name(word)}\." if word in names else pattern


def summarize(paths: list[Path], bench: str | None = None, *, verbose: bool = False) -> list[str]:
    """Failed benchmarks by name, the parameter combinations not run (n/a) counted by why (one
    line; the benchmarks with `verbose`), and the accuracy cases counted by verdict."""
    import re

    from accuracy.judge.metric_table import BY_NAME
    from accuracy.judge.verdicts import OP_VERDICTS

    tier_track = BY_NAME["verdict_tier"].track
    failed, not_run, tiers = [], {}, []
    skipped, unselected = 0, 0  # n/a combinations: ones that do not apply; ones --bench left out
    for path in paths:
        data = json.loads(path.read_text())
        columns = data["result_columns"]
        for name, row in data["results"].items():
            values = dict(zip(columns, row, strict=False))["result"]
            if values is None or all(v is None for v in values):
                failed.append(name)
                continue
            # asv's n/a: a parameter combination --bench did not select, or one that was skipped
            missing = sum(isinstance(v, float) and math.isnan(v) for v in values)
            if missing:
                not_run[name] = f"{name} ({missing} of {len(values)})"
                # asv matches --bench against the name and each `name(params)`: a class it names is run whole
                if bench is None or re.search(bench, name):
                    skipped += missing
                else:
                    unselected += missing
            if name.endswith(f".{tier_track}"):
                tiers += [int(v) for v in values if v is not None and not math.isnan(v)]
    counts = ", ".join(f"{tiers.count(tier)} {verdict}" for tier, verdict in enumerate(OP_VERDICTS))
    lines = [f"accuracy cases by verdict: {counts}"]
    if not_run:
        why = [
            *([f"{skipped} skipped (they do not apply, e.g. a dtype an implementation lacks)"] if skipped else []),
            *([f"{unselected} not selected by --bench"] if unselected else []),
        ]
        lines.append(
            f"{len(not_run)} benchmarks ran only some parameter combinations; n/a: {', '.join(why)}"
            + ("" if verbose else " (-v lists them)")
        )
        if verbose:
            lines.append(f"n/a by benchmark: {', '.join(not_run[k] for k in sorted(not_run))}")
    if failed:
        lines.append(f"{len(failed)} benchmarks failed (recorded as failed): {', '.join(sorted(failed))}")
    return lines
