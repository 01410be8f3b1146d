"""`opbench selftest [OP ...]`: how sharp and how safe the verdicts are, measured on the catalog."""

from __future__ import annotations

from accuracy.catalog.registry import get_op
from accuracy.cli.arguments import add_command, add_dask, add_json, item_progress, stopped_early
from accuracy.core.dtypes import ALL_DTYPES, get_format
from accuracy.core.formatting import format_table
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
        "Exit status 1 if a target is missed (0 false alarms, >= 95% caught).",
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
    add_dask(p)
    add_json(p)


def _smallest(d: dict) -> str:
    s = d["smallest_caught"]
    return "-" if s is None else f"{s['error_ulp']:.3g} ulp ({s['mutant']})"


def render(reports: list[dict], total: dict) -> str:
    rows = [
        [
            d["op"],
            d["dtype"],
            d["condition"],
            str(d["size"]),
            str(d["correct_impls"]),
            str(len(d["false_alarms"])),
            str(len(d["alarms"]) - len(d["false_alarms"])),
            f"{d['least_accurate_correct_ulp']:.3g}",
            f"{d['caught']}/{d['must_catch']}",
            _smallest(d),
        ]
        for d in reports
    ]
    lines = format_table(
        [
            "op",
            "dtype",
            "condition",
            "size",
            "correct",
            "false alarms",
            "confirmed alarms",
            "least accurate correct (ulp)",
            "caught (>= 16x)",
            "smallest caught",
        ],
        rows,
    )
    alarms = [
        f"  {d['op']} {d['dtype']} {d['condition']}: {'FALSE ' if a in d['false_alarms'] else ''}{a}"
        for d in reports
        for a in d["alarms"]
    ]
    if alarms:
        lines += ["", "alarms on correct implementations:", *alarms]
    missed = [f"  {d['op']} {d['dtype']} {d['condition']}: {m}" for d in reports for m in d["missed"]]
    if missed:
        lines += ["", "missed mutants:", *missed]
    lines += [
        "",
        f"{total['cases']} cases, {total['correct_judgements']} judgements of correct implementations: "
        f"{total['false_alarms']} false alarms, {total['confirmed_alarms']} confirmed alarms, "
        f"{total['undetermined']} undetermined; mutants caught: {total['caught']}/{total['must_catch']} "
        f"({100 * total['catch_rate']:.1f}%)",
    ]
    return "\n".join(lines)


def markdown(reports: list[dict], total: dict) -> str:
    """Per op and dtype: false alarms, caught/must-catch, over all its conditions; and the
    smallest caught error in float32."""
    dtypes = [d for d in ALL_DTYPES if any(r["dtype"] == d for r in reports)]
    lines = ["| op | " + " | ".join(dtypes) + " | smallest caught, float32 |", "|---" * (len(dtypes) + 2) + "|"]
    for op in dict.fromkeys(r["op"] for r in reports):
        cells = []
        for dtype in dtypes:
            rs = [r for r in reports if r["op"] == op and r["dtype"] == dtype]
            cells.append(
                "-"
                if not rs
                else f"{sum(len(r['false_alarms']) for r in rs)} / "
                f"{sum(r['caught'] for r in rs)}/{sum(r['must_catch'] for r in rs)}"
            )
        f32 = [r for r in reports if r["op"] == op and r["dtype"] == "float32" and r["smallest_caught"]]
        small = min(f32, key=lambda r: r["smallest_caught"]["error_ulp"], default=None)
        cells.append("-" if small is None else _smallest(small))
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    lines.append(
        f"| **all** | {total['false_alarms']} false alarms in {total['correct_judgements']} judgements"
        f" | caught {total['caught']}/{total['must_catch']} ({100 * total['catch_rate']:.1f}%) |"
        + " |"
        * (len(dtypes) - 1)
    )
    return "\n".join(lines)


def run(args) -> int:
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
    reports, total = [r.as_dict() for r in cases], summary(cases)
    if args.json:
        print(dumps({"cases": reports, "summary": total, "complete": lost is None}))
    else:
        print(markdown(reports, total) if args.markdown else render(reports, total))
    if lost is not None:
        return stopped_early(str(lost), "the table covers the cases finished so far")
    return 0 if total["false_alarms"] == 0 and total["catch_rate"] >= CATCH_TARGET else 1
