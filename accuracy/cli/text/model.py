"""`opbench model`'s text: the answers, then each port's units, nested, and why each flagged one is.

A model with blocks (a 30-layer decoder has hundreds of units) shows, without -v, each top-level
unit on one line with a summary of the units inside it, and the path down to the first unit not
within rounding; `-v`, `--json` and `--html` carry every unit."""

from __future__ import annotations

from accuracy.core.formatting import format_table, printable
from accuracy.judge.verdicts import NOT_COMPARED, RUNTIME_LIMIT, WITHIN
from accuracy.workflows.check import cause_text
from accuracy.workflows.model.report import ModelReport, PortResult, UnitRow, cause_cell, number

HEADER = [
    "layer",
    "op",
    "verdict",
    "max ulp",
    "typical ratio",
    "introduced",
    "inherited",
    "propagated",
    "cause",
    "inside",
]


def _inside(row: UnitRow, layers: list[UnitRow]) -> str:
    """How many units run inside `row`, and how many of those are flagged or not compared."""
    below = {row["path"]}
    inside = []
    for r in layers:
        if r["parent"] in below:
            below.add(r["path"])
            inside.append(r)
    if not inside:
        return ""
    flagged = sum(r["verdict"] not in (WITHIN, RUNTIME_LIMIT, NOT_COMPARED) for r in inside)
    skipped = sum(r["verdict"] == NOT_COMPARED for r in inside)
    return (
        f"{len(inside)} units"
        + (f", {flagged} flagged" if flagged else "")
        + (f", {skipped} not compared" if skipped else "")
    )


def _shown(port: PortResult, verbose: bool) -> list[UnitRow]:
    """Every unit with -v or where the model is flat; else the top level and the path to the first flagged unit."""
    layers = port["layers"]
    if verbose or all(r["depth"] == 0 for r in layers):
        return layers
    by_path = {r["path"]: r for r in layers}
    path, key = set(), port["first_not_within"]
    while key is not None:
        path.add(key)
        key = by_path[key]["parent"] if key in by_path else None
    return [r for r in layers if r["depth"] == 0 or r["path"] in path or r["parent"] in path]


def render(report: ModelReport, verbose: bool = False) -> str:
    """The text `opbench model` prints without --json."""
    shapes = ", ".join(f"{k} {tuple(v)}" for k, v in report.inputs.items())
    lines = [f"{report.model} in {report.mode} mode on {shapes}", ""]
    lines += report.answers()
    lines += [f"{printable(a['port'])}: absent ({printable(a['reason'])})" for a in report.absent]
    folded = False
    for p in report.ports:
        port = printable(p["port"])
        lines += ["", f"{port} [{p['dtype']}]: {printable(p['description'])}; layer by layer on identical inputs:"]
        shown = _shown(p, verbose)
        folded |= len(shown) < len(p["layers"])
        nested = any(r.get("depth", 0) for r in p["layers"])
        lines += format_table(
            HEADER if nested else HEADER[:-1],
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
                    cause_cell(r.get("cause")),
                    *([_inside(r, p["layers"])] if nested else []),
                ]
                for r in shown
            ],
        )
        reasons = [
            f"  {printable(r['path'])}: {printable(cause_text(r.get('cause')) + r['reason'])}"
            for r in shown
            if r["verdict"] != WITHIN
        ]
        if reasons:
            lines += ["why:", *reasons]
    lines += [
        "",
        "introduced: the unit's normwise relative error on the reference's own inputs; inherited / propagated: "
        "the port's end-to-end difference from the float64 model at the unit's input / output",
    ]
    if folded:
        lines.append("units inside the blocks are summed up in 'inside'; -v, --json and --html show every unit")
    return "\n".join(lines)
