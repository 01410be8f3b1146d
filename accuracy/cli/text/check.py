"""`opbench check`'s text: one row per output, why, then the pairs between them."""

from __future__ import annotations

from accuracy.core.formatting import format_number, format_table, printable
from accuracy.judge.metric_table import BY_NAME
from accuracy.workflows.check import CHECK_COLUMNS, CheckReport
from accuracy.workflows.explain import pairs_section
from accuracy.workflows.model.answer import explanation, worst_text


def render(report: CheckReport) -> str:
    """The text `opbench check` prints without --json."""
    shapes = ", ".join(f"{k} {tuple(v)}" for k, v in report.inputs.items())
    lines = [f"{report.op} [{report.dtype}] on {shapes}", ""]
    columns = [BY_NAME[name] for name in CHECK_COLUMNS]
    lines += format_table(
        ["output", "verdict", *(m.label for m in columns), "worst element"],
        [
            [o["label"], o["verdict"], *(format_number(o[m.field]) for m in columns), worst_text(o["worst"])]
            for o in report.outputs
        ],
    )
    lines += ["", "why:"] + [
        f"  {printable(o['label'])}: {explanation(o.get('cause'), o['reason'])}" for o in report.outputs
    ]
    lines += pairs_section(report.pairs)
    return "\n".join(lines)
