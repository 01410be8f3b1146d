"""`opbench model`'s text: the answers, then each port's units, nested, and why each flagged one is."""

from __future__ import annotations

from accuracy.core.formatting import format_table, printable
from accuracy.judge.verdicts import WITHIN
from accuracy.workflows.model.report import ModelReport, number


def render(report: ModelReport) -> str:
    """The text `opbench model` prints without --json."""
    shapes = ", ".join(f"{k} {tuple(v)}" for k, v in report.inputs.items())
    lines = [f"{report.model} in {report.mode} mode on {shapes}", ""]
    lines += report.answers()
    lines += [f"{printable(a['port'])}: absent ({printable(a['reason'])})" for a in report.absent]
    for p in report.ports:
        port = printable(p["port"])
        lines += ["", f"{port} [{p['dtype']}]: {printable(p['description'])}; layer by layer on identical inputs:"]
        lines += format_table(
            ["layer", "op", "verdict", "max ulp", "typical ratio", "introduced", "inherited", "propagated"],
            [
                [
                    "  " * r.get("depth", 0) + " + ".join(r["covers"]),
                    r["op"],
                    r["verdict"],
                    number(r.get("max_ulp")),
                    number(r.get("typical_ratio")),
                    number(r.get("introduced")),
                    number(r.get("inherited")),
                    number(r.get("propagated")),
                ]
                for r in p["layers"]
            ],
        )
        reasons = [f"  {printable(r['path'])}: {printable(r['reason'])}" for r in p["layers"] if r["verdict"] != WITHIN]
        if reasons:
            lines += ["why:", *reasons]
    lines += [
        "",
        "introduced: the unit's normwise relative error on the reference's own inputs; inherited / propagated: "
        "the port's end-to-end difference from the float64 model at the unit's input / output",
    ]
    return "\n".join(lines)
