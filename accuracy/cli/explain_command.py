"""`opbench explain OP`: one op, every implementation, one table and the verdicts."""

from __future__ import annotations

import json

from accuracy.cli.arguments import add_case, add_command, add_json
from accuracy.core.formatting import format_table
from accuracy.core.limits import check_threads
from accuracy.judge.metric_table import cli_columns


def register(sub) -> None:
    p = add_command(sub, "explain", run, help="compare every implementation of one op on the same inputs")
    add_case(p, threads_help="threads for the main run (default: all cores)")
    add_json(p)


def _num(v) -> str:
    return "-" if v is None or (isinstance(v, float) and v != v) else f"{v:.3g}"


def _why(r: dict) -> list[str]:
    """The reason, and the element that decided it: the largest error over its limit (not always
    the largest error in ulps, where the limit varies by element)."""
    lines = [f"  {r['impl']}: {r['label']}: {r['reason']}"]
    w = r.get("worst") or {}
    if w:
        at = ", ".join(f"{k}={v:.9g}" for k, v in w.get("inputs", {}).items())
        where = f"[{', '.join(map(str, w['index']))}]" if w["index"] else "(the single output)"
        lines.append(
            f"      element nearest its limit {where}{' (' + at + ')' if at else ''}: "
            f"result {w['result']:.9g}, exact {w['exact']:.9g}, error {_num(w['error_ulp'])} ulp, "
            f"allowed there {_num(w['allowed_ulp'])} ulp"
        )
    return lines


def render(report: dict) -> str:
    lines = [
        f"{report['op']} [{report['dtype']}, size {report['size']}, {report['condition']} inputs, "
        f"{report['threads']} thread(s)]: {report['doc']}",
        f"bound: {report['bound']}",
        "",
    ]
    columns = cli_columns()
    rows = [
        [
            r["impl"],
            r.get("compute", "-"),
            *(_num(r.get(m.field)) for m in columns),
            r["label"] if r["verdict"] != "error" else f"error: {r['error']}",
        ]
        for r in report["implementations"]
    ]
    lines += format_table(["implementation", "computes in", *(m.label for m in columns), "verdict"], rows)
    lines += ["", "why:"] + [line for r in report["implementations"] if r["verdict"] != "error" for line in _why(r)]
    notes = [f"  {r['impl']}: {r['note']}" for r in report["implementations"] if r.get("note")]
    if notes:
        lines += ["", "notes:", *notes]
    lines += ["", "pairwise discrepancy (ulps at the larger magnitude):"]
    lines += format_table(
        ["a", "b", "max ulp apart", "elements differing", "class", "failing side"],
        [
            [
                p["a"],
                p["b"],
                _num(p["max_ulp_apart"]),
                str(p["differing_elements"]),
                p["class"],
                ", ".join(p["failing"]) or "-",
            ]
            for p in report["pairs"]
        ],
    )
    cores = report["all_cores"]
    lines += [
        "",
        f"bitwise reproducibility (run to run at {report['threads']} thread(s); 1 vs {cores} threads, each judged):",
    ]
    lines += format_table(
        ["implementation", "run to run", f"1 vs {cores} threads", "verdict at 1 thread", f"verdict at {cores} threads"],
        [
            [
                r["impl"],
                "yes" if r["run_to_run"] else "NO",
                "yes" if r["one_vs_all_threads"] else "NO",
                r["verdict_1_thread"],
                r[f"verdict_{cores}_threads"],
            ]
            for r in report["reproducibility"]
        ],
    )
    by_note: dict[str, list[str]] = {}
    for r in report["reproducibility"]:
        if r.get("threads_note"):
            by_note.setdefault(r["threads_note"], []).append(r["impl"].split(":")[0])
    lines += [f"  {', '.join(dict.fromkeys(backends))}: {note}" for note, backends in by_note.items()]
    return "\n".join(lines)


def run(args) -> int:
    from accuracy.workflows.explain import explain  # the judge and scipy: only when it runs

    check_threads(args.threads)
    report = explain(args.op, args.dtype, args.size, args.threads, args.condition)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0
