"""`opbench run`: the asv suite on this machine (or across commits), then HTML and the report."""

from __future__ import annotations

from pathlib import Path

from accuracy.asvrun import default_machine_name, run_suite
from accuracy.commands.common import add_command, add_results
from accuracy.errors import OpbenchError


def register(sub) -> None:
    p = add_command(sub, "run", run, help="run the asv suite, publish HTML history and write the report")
    p.add_argument("--quick", action="store_true", help="one sample per benchmark and the quick grid (<= 3 min)")
    p.add_argument("--bench", help="only benchmarks matching this regex (asv --bench)")
    p.add_argument("--machine", default=None, help="asv machine name (default: this host's name)")
    add_results(p)
    p.add_argument("--html", type=Path, default=None, help="asv HTML directory (default: html beside results)")
    p.add_argument("--commits", help="a commit range (e.g. HEAD~3..HEAD) run in asv-built virtualenvs")
    p.add_argument("--config", type=Path, default=Path("asv.conf.json"), help="asv configuration (default: asv.conf.json)")
    p.add_argument("--profile", choices=("quick", "default", "full"), default=None,
                   help="parameter grid (default: quick with --quick, else default)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="a process-start knob (e.g. OPENBLAS_CORETYPE=SkylakeX); results go to a machine "
                        "named after it, so `opbench compare` can set runs with and without it side by side")
    p.add_argument("--report", type=Path, default=Path("reports"), help="where the trend report goes")
    p.add_argument("--no-report", action="store_true", help="skip the trend report")


def parse_knobs(pairs: list[str]) -> dict[str, str]:
    knobs = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isupper():
            raise OpbenchError(f"--env wants KEY=VALUE with an upper-case KEY, got {pair!r}")
        knobs[key] = value
    return knobs


def run(args) -> int:
    html = args.html or args.results.resolve().parent / "html"
    knobs = parse_knobs(args.env)
    machine = args.machine or default_machine_name()
    machine += "".join(f"-{k}={v}" for k, v in sorted(knobs.items())).replace(" ", "_")
    status, written = run_suite(
        config=args.config, results=args.results, html=html, machine=machine, quick=args.quick,
        bench=args.bench, commits=args.commits, profile=args.profile, knobs=knobs,
    )
    if not written:
        raise OpbenchError("asv wrote no results (no benchmark matched, or the run failed before saving)")
    print(f"opbench: results in {args.results}, HTML in {html}")
    if status != 0:
        print("opbench: some benchmarks failed; they are recorded as failed in the results")
    if not args.no_report:
        from accuracy.report import write_report

        path = write_report(args.results, args.report, "latest")
        print(f"opbench: report in {path}")
    return 0
