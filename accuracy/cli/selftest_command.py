"""`opbench selftest [OP ...]`: how sharp and how safe the verdicts are, measured on the catalog."""

from __future__ import annotations

import sys

from accuracy.catalog.registry import get_op
from accuracy.cli.arguments import add_command, add_dask, add_json, item_progress, stopped_early
from accuracy.cli.text.selftest import markdown, markdown_models, render, render_models
from accuracy.core.dtypes import ALL_DTYPES, get_format
from accuracy.core.errors import OpbenchError
from accuracy.core.json_output import dumps
from accuracy.workflows.cluster import ClusterLost
from accuracy.workflows.selftest import MUST_CATCH, selftest, summary

CATCH_TARGET = 0.95


def register(sub) -> None:
    p = add_command(
        sub,
        "selftest",
        run,
        help="judge every correct implementation and mutants of it: false alarms and catch rate",
        description="For each op and dtype: alarms on correct implementations (confirmed by a "
        "contract or by an error >= 16x the least accurate correct algorithm, else false), and "
        f"the share of mutants with an error >= {MUST_CATCH:g}x that algorithm's that are caught. "
        "Without OP, also each known port bug of the cause catalogue injected into a port of a small "
        "zoo model, correct ports beside it: the share named right, and causes named on correct ports. "
        "Exit status 1 if a target is missed (0 false alarms, >= 95% caught, >= 95% of causes named "
        "right, none named on a correct port).",
    )
    p.add_argument("ops", nargs="*", metavar="OP", help="ops to test (default: all)")
    p.add_argument(
        "--dtype",
        action="append",
        dest="dtypes",
        metavar="DTYPE",
        help="a dtype to test, repeatable (default: all four)",
    )
    p.add_argument("--small", action="store_true", help="each op at its small test size (seconds, not minutes)")
    p.add_argument("--all", action="store_true", dest="everything", help="include torch.compile (slow to compile)")
    p.add_argument("--markdown", action="store_true", help="one row per op, one column per dtype (docs/verdicts.md)")
    p.add_argument(
        "--census",
        action="store_true",
        help="instead: every torchvision classification model and tiny transformers family (random weights) "
        "through every default and deploy port, as opbench model judges them (one row per model and port); "
        "exit status 1 if a unit is flagged or a port is beyond rounding end to end",
    )
    p.add_argument("--models", metavar="REGEX", help="--census: only the models whose name this finds")
    p.add_argument(
        "--ports", metavar="NAME[,NAME...]", help="--census: only these ports (default: the default and deploy ports)"
    )
    p.add_argument("--limit", type=int, metavar="N", help="--census: only the first N models (after --models)")
    add_dask(p)
    add_json(p)


def run(args) -> int:
    if args.census:
        return _census(args)
    for option, given in (("--models", args.models), ("--ports", args.ports), ("--limit", args.limit)):
        if given is not None:
            raise OpbenchError(f"{option} selects models of the census: give it with --census")
    for name in args.ops:
        get_op(name)  # unknown names fail with one line before any work
    dtypes = tuple(get_format(d).name for d in args.dtypes) if args.dtypes else ALL_DTYPES
    cases, lost = [], None
    try:
        for case in selftest(
            args.ops or None,
            dtypes,
            small=args.small,
            everything=args.everything,
            progress=item_progress("selftest"),
            dask=args.dask,
        ):
            cases.append(case)
    except ClusterLost as exc:  # what finished is printed, as for a scan
        lost = exc
    models = _models(args) if lost is None and not args.ops else None
    reports, total = [r.as_dict() for r in cases], summary(cases)
    if args.json:
        print(
            dumps(
                {"cases": reports, "summary": total, "complete": lost is None}
                | ({"models": models} if models is not None else {})
            )
        )
    else:
        print(markdown(reports, total) if args.markdown else render(reports, total))
        if models is not None:
            show = markdown_models if args.markdown else render_models
            print("\n" + show(models["reports"], models["summary"]))
    if lost is not None:
        return stopped_early(str(lost), "the table covers the cases finished so far")
    ops_met = total["false_alarms"] == 0 and total["catch_rate"] >= CATCH_TARGET
    causes_met = models is None or (
        models["summary"]["named_on_correct"] == 0 and models["summary"]["named_right_rate"] >= CATCH_TARGET
    )
    return 0 if ops_met and causes_met else 1


def _census(args) -> int:
    """`--census`: the stock models through the ports; what finished is printed on Ctrl-C too."""
    for option, given in (
        ("OP", args.ops),
        ("--dtype", args.dtypes),
        ("--small", args.small),
        ("--all", args.everything),
    ):
        if given:
            raise OpbenchError(f"{option} does not apply to --census (it runs models, not ops)")
    if args.limit is not None and args.limit < 1:
        raise OpbenchError(f"--limit {args.limit}: expected N >= 1 models")
    from accuracy.cli.text import census as text
    from accuracy.workflows.model import census  # torch, transformers: only when it runs

    ports = census.ports_of(args.ports.split(",") if args.ports else None)
    rows, stopped = census.census(
        census.select(args.models, args.limit), ports, args.dask, progress=item_progress("census")
    )
    total = census.summary(rows)
    if args.json:
        print(dumps({"models": rows, "summary": total, "complete": stopped is None}))
    else:
        print((text.markdown if args.markdown else text.render)(rows, total))
    if stopped is not None:
        return stopped_early(stopped, "the table covers the models finished so far")
    return 1 if total["flagged"] or total["end_to_end_beyond"] else 0


def _models(args) -> dict:
    """The model part: the cause catalogue's entries injected into ports of the zoo models, then
    the quantization causes into their int8 graphs (here, never on a cluster: seconds in all)."""
    from accuracy.workflows.model.cause_selftest import model_selftest, model_summary
    from accuracy.workflows.model.quantization_selftest import quantization_selftest

    def each(model: str, seconds: float) -> None:
        print(f"selftest: causes on {model}, {seconds:.0f} s", file=sys.stderr)

    reports = list(model_selftest(each)) + list(quantization_selftest(each))
    return {"reports": reports, "summary": model_summary(reports)}
