"""`opbench run`: the asv suite on this machine (or across commits), then HTML and the report."""

from __future__ import annotations

from pathlib import Path

from accuracy.asvrun import default_machine_name, run_suite
from accuracy.errors import OpbenchError


def register(sub) -> None:
    p = sub.add_parser("run", help="run the asv suite, publish HTML history and write the report")
    p.add_argument("--quick", action="store_true", help="one sample per benchmark and the quick grid (<= 3 min)")
    p.add_argument("--bench", help="only benchmarks matching this regex (asv --bench)")
    p.add_argument("--machine", default=None, help="asv machine name (default: this host's name)")
    p.add_argument("--results", type=Path, default=Path("results"), help="asv results directory")
    p.add_argument("--html", type=Path, default=None, help="asv HTML directory (default: html beside results)")
    p.add_argument("--commits", help="a commit range (e.g. HEAD~3..HEAD) run in asv-built virtualenvs")
    p.add_argument("--config", type=Path, default=Path("asv.conf.json"))
    p.add_argument("--profile", choices=("quick", "default", "full"), default=None,
                   help="parameter grid (default: quick with --quick, else default)")
    p.add_argument("--report", type=Path, default=Path("reports"), help="where the trend report goes")
    p.add_argument("--no-report", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    html = args.html or args.results.resolve().parent / "html"
    status, written = run_suite(
        config=args.config, results=args.results, html=html, machine=args.machine or default_machine_name(),
        quick=args.quick, bench=args.bench, commits=args.commits, profile=args.profile,
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
