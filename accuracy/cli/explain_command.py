"""`opbench explain OP`: one op, every implementation, one table and the verdicts."""

from __future__ import annotations

from accuracy.cli.arguments import add_case, add_command, add_json
from accuracy.cli.text.explain import render
from accuracy.core.json_output import dumps
from accuracy.core.limits import check_threads


def register(sub) -> None:
    p = add_command(sub, "explain", run, help="compare every implementation of one op on the same inputs")
    add_case(p, threads_help="threads for the main run (default: all cores)")
    add_json(p)
    p.add_argument(
        "-v", "--verbose", action="store_true", help="every pair, every implementation's reason, every thread count"
    )


def run(args) -> int:
    from accuracy.workflows.explain import explain  # the judge and scipy: only when it runs

    check_threads(args.threads)
    report = explain(args.op, args.dtype, args.size, args.threads, args.condition, load_in_background=True)
    print(dumps(report) if args.json else render(report, args.verbose))
    return 0
