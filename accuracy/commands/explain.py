"""`opbench explain OP`: one op, every implementation, one table and the verdicts."""

from __future__ import annotations

import json

from accuracy.commands.common import add_case, add_command, add_json
from accuracy.errors import OpbenchError
from accuracy.explain import explain
from accuracy.tables import format_table


def register(sub) -> None:
    p = add_command(sub, "explain", run, help="compare every implementation of one op on the same inputs")
    add_case(p, threads_help="threads for the main run (default: all cores)")
    add_json(p)


def _num(v) -> str:
    return "-" if v is None else f"{v:.3g}"


def render(report: dict) -> str:
    lines = [
        f"{report['op']} [{report['dtype']}, size {report['size']}, {report['condition']} inputs, "
        f"{report['threads']} thread(s)]: {report['doc']}",
        f"bound: {report['bound']}",
        "",
    ]
    rows = [
        [r["impl"], _num(r.get("max_ulp")), _num(r.get("mean_ulp")), _num(r.get("max_rel_fp64")),
         _num(r.get("max_rel_exact")), _num(r.get("bound_ratio")), str(r.get("nonfinite", "-")),
         r["verdict"] if r["verdict"] != "error" else f"error: {r['error']}"]
        for r in report["implementations"]
    ]
    lines += format_table(
        ["implementation", "max ulp", "mean ulp", "max rel vs fp64", "max rel vs exact", "bound ratio",
         "non-finite", "verdict"], rows)
    notes = [f"  {r['impl']}: {r['note']}" for r in report["implementations"] if r.get("note")]
    if notes:
        lines += ["", "notes:"] + notes
    lines += ["", "pairwise discrepancy:"]
    lines += format_table(
        ["a", "b", "max ulp apart", "elements differing", "class"],
        [[p["a"], p["b"], _num(p["max_ulp_apart"]), str(p["differing_elements"]), p["class"]]
         for p in report["pairs"]])
    lines += ["", f"bitwise reproducibility (1 vs {report['all_cores']} threads):"]
    lines += format_table(
        ["implementation", "run to run", "1 vs all threads"],
        [[r["impl"], "yes" if r["run_to_run"] else "NO", "yes" if r["one_vs_all_threads"] else "NO"]
         for r in report["reproducibility"]])
    return "\n".join(lines)


def run(args) -> int:
    if args.threads is not None and args.threads < 1:
        raise OpbenchError(f"--threads must be at least 1, got {args.threads}")
    report = explain(args.op, args.dtype, args.size, args.threads, args.condition)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0
