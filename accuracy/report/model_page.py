"""`opbench model --html`: one self-contained page per model run, the answer first.

Per port: the first layer not within rounding, a figure of each unit's introduced error and the
port's propagated difference through depth (log scale; flagged units marked), then the
per-layer table, each unit indented under the unit it runs inside (a block's attention and MLP
under the block, their layers under them). The figure shows at a glance whether a large final difference comes from one
bad layer (one jump in introduced error) or from correct layers amplified along the way.
"""

from __future__ import annotations

import html
from pathlib import Path

from matplotlib.figure import Figure

from accuracy.core.errors import OpbenchError
from accuracy.core.files import refuse_symlink, write_atomic
from accuracy.core.formatting import printable
from accuracy.core.json_output import REASON_SUFFIX
from accuracy.report.plots import WIDTH, to_png_base64
from accuracy.workflows.check import cause_text
from accuracy.workflows.model.report import cause_cell

COLUMNS = ("introduced", "inherited", "propagated", "max_ulp", "typical_ratio")
TINY = 1e-12  # an exact (0) error is drawn here on the log scale
INDENT_EM = 1.5  # a nested unit's layer cell, per level


def layer_figure(port: dict) -> str | None:
    """Introduced and propagated error per unit, in execution order (base64 PNG); None if nothing to draw."""
    layers = port["layers"]
    if not layers:
        return None
    x = list(range(len(layers)))
    fig = Figure(figsize=(WIDTH, 3.6))
    ax = fig.add_subplot()
    for key, style in (("introduced", "o-"), ("propagated", "s--")):
        values = [r.get(key) for r in layers]
        points = [(i, max(v, TINY)) for i, v in zip(x, values, strict=True) if v is not None and v == v]
        if points:
            ax.plot(*zip(*points, strict=True), style, label=key, markersize=4)
    flagged = [i for i, r in enumerate(layers) if r["verdict"] not in ("within rounding", "not compared")]
    for i in flagged:
        ax.axvline(i, color="tab:red", alpha=0.4)
    ax.set_yscale("log")
    # escaped: a control character in a module's name or a label has no glyph, and matplotlib's
    # warning about it printed the raw byte (an ESC) on stderr
    ax.set_xticks(x, [printable(r["path"]) for r in layers], rotation=90, fontsize=7)
    ax.set_ylabel("normwise relative error")
    ax.set_title(f"{printable(port['port'])} [{port['dtype']}]: red lines mark layers not within rounding")
    ax.legend()
    fig.tight_layout()
    return to_png_base64(fig)


def _cell(value, reason: str | None = None) -> str:
    """A number to 3 digits; "inf" where the report's strict JSON has null for an infinite error,
    "-" where a value is missing or does not apply (NaN)."""
    if isinstance(value, float):
        return f"{value:.3g}"
    if reason in ("inf", "-inf"):
        return reason
    return html.escape("-" if value is None else str(value))


def _indent(row: dict) -> str:
    """The layer cell's indent: its depth among nested units (none at the top)."""
    depth = row.get("depth") or 0
    return f" style='padding-left:{INDENT_EM * depth:g}em'" if depth else ""


def model_page(report: dict, answers: list[str]) -> str:
    parts = [
        "<!doctype html><meta charset='utf-8'><title>opbench model</title>",
        f"<h1>{html.escape(report['model'])}</h1><p>{html.escape(report['mode'])} mode</p>",
        "<h2>Answer</h2><ul>" + "".join(f"<li>{html.escape(a)}</li>" for a in answers) + "</ul>",
    ]
    for port in report["ports"]:
        parts.append(f"<h2>{html.escape(port['port'])} [{port['dtype']}]</h2>")
        figure = layer_figure(port)
        if figure:
            parts.append(f"<img alt='errors through depth' src='data:image/png;base64,{figure}'>")
        head = "".join(f"<th>{c}</th>" for c in ("layer", "op", "verdict", *COLUMNS, "cause", "reason"))
        rows = "".join(
            f"<tr><td{_indent(r)}>{_cell(' + '.join(r['covers']))}</td>"
            + "".join(
                f"<td>{cell}</td>"
                for cell in (
                    *map(_cell, (r["op"], r["verdict"])),
                    *(_cell(r.get(c), r.get(c + REASON_SUFFIX)) for c in COLUMNS),
                    _cell(cause_cell(r.get("cause"))),
                    _cell(cause_text(r.get("cause")) + r["reason"]),
                )
            )
            + "</tr>"
            for r in port["layers"]
        )
        parts.append(f"<table><tr>{head}</tr>{rows}</table>")
    return "\n".join(parts)


def write_model_page(path: Path | str, report: dict, answers: list[str]) -> Path:
    """Atomically, never over an existing file or through a link (a dangling one included)."""
    path = Path(path)
    refuse_symlink(path)
    if path.exists():
        raise OpbenchError(f"--html {path}: a file appeared there during the run; it is kept, not overwritten")
    return write_atomic(path, model_page(report, answers), replace=False)
