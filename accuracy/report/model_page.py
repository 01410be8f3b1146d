"""`opbench model --html`: one self-contained page per model run, the answer first.

The answer block (three lines per port, accuracy.workflows.model.answer) fits the first screen;
the unit it names links to its row. How each verdict is derived is a collapsed part under it.
Per port, a figure of each unit's introduced error (dots, coloured by verdict) and the port's
propagated difference (a line) through the model's depth, the flagged units labelled, then the
table: one row per unit, indented under the unit it runs inside, its verdict coloured, one short
reason, and the full reason behind a `<details>`. The figure shows at a glance whether a large
final difference comes from one bad unit (one jump in introduced error) or from correct units
amplified along the way.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from urllib.parse import quote

from matplotlib.figure import Figure

from accuracy.core.errors import OpbenchError
from accuracy.core.files import refuse_symlink, write_atomic
from accuracy.core.formatting import printable
from accuracy.judge.verdicts import NOT_COMPARED
from accuracy.report.plots import WIDTH, to_png_base64
from accuracy.workflows.model.answer import STYLES, PortAnswer, explanation, is_flagged, port_answer, short_reason
from accuracy.workflows.model.quantization import NOISE_HEADER, noise_rows
from accuracy.workflows.model.report import ModelReport, cause_cell
from accuracy.workflows.model.rows import PortResult, UnitRow

COLUMNS = ("max_ulp", "introduced", "inherited", "propagated")
TINY = 1e-12  # an exact (0) error is drawn here on the log scale
INDENT_EM = 1.5  # a nested unit's layer cell, per level
LABELLED = 8  # flagged units named on the figure, at most
TICKS = 16  # top-level units named under the figure, at most
COLOURS = {
    "green": "#1a7f37",
    "yellow": "#9a6700",
    "red": "#cf222e",
    "magenta": "#8250df",
    "grey": "#6e7781",
    "blue": "#0969da",
    "cyan": "#1b7c83",
}
PLOT = {
    "green": "tab:green",
    "yellow": "tab:orange",
    "red": "tab:red",
    "magenta": "tab:purple",
    "grey": "tab:gray",
    "blue": "tab:blue",
    "cyan": "tab:cyan",
}
STYLE = (
    "body{font:14px/1.45 system-ui,sans-serif;margin:1em 2em;color:#1f2328}"
    "h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;margin:1.2em 0 .4em}"
    ".answer{border-left:5px solid;padding:.2em .8em;margin:.5em 0;max-width:75em}.answer p{margin:.1em 0}"
    "table{border-collapse:collapse;font-size:13px}th,td{padding:1px 8px;text-align:left;vertical-align:top;"
    "white-space:nowrap}td:last-child{white-space:normal;min-width:10em}"
    "th{position:sticky;top:0;background:#f6f8fa}tr:nth-child(even){background:#f6f8fa}"
    "td.why{white-space:normal;min-width:12em;max-width:30em}td summary{cursor:pointer}"
    "tr{scroll-margin-top:4em}tr:target{outline:3px solid #cf222e;background:#fff8c5}.flagged td{font-weight:600}"
    "img{max-width:100%;height:auto}code{background:#f6f8fa;padding:0 .3em}"
    + "".join(f".{name}{{color:{hex_}}}.answer.{name}{{border-color:{hex_}}}" for name, hex_ in COLOURS.items())
)


def row_id(index: int, path: str) -> str:
    """The id of a unit's row in the index-th port's table (a unit path may hold '#': relu#2)."""
    return f"p{index}-{path}"


def _apart(points: list[tuple[int, str]], units: int, most: int) -> list[tuple[int, str]]:
    """At most `most` of the points, in order, each units / most from the last kept: no two names overlap."""
    kept: list[tuple[int, str]] = []
    for i, path in points:
        if not kept or i - kept[-1][0] >= units / most:
            kept.append((i, path))
    return kept[:most]


def _ticks(layers: list[UnitRow]) -> tuple[list[int], list[str]]:
    """The outermost units, at most TICKS and spread apart, where each sits in the model's depth:
    those of the top level, or down to the first level with 4 or more (a CausalLM's `model`, `lm_head`)."""
    depths = sorted(r.depth for r in layers)
    level = depths[min(3, len(depths) - 1)]
    outer = [(i, r.path) for i, r in enumerate(layers) if (r.depth) <= level]
    chosen = _apart(outer, len(layers), TICKS)
    return [i for i, _ in chosen], [_short(p, 18) for _, p in chosen]


def layer_figure(port: PortResult) -> str | None:
    """Introduced error per unit (dots coloured by verdict, diamonds where flagged) and the
    propagated difference after each innermost unit (a line), through the model's depth in
    execution order, the flagged units named on top (base64 PNG); None if nothing to draw."""
    layers = port.layers
    if not layers:
        return None
    fig = Figure(figsize=(WIDTH, 3.8))
    ax = fig.add_subplot()
    parents = {r.parent for r in layers}
    propagated = [
        (i, max(value, TINY))
        for i, r in enumerate(layers)
        if r.path not in parents and (value := r.propagated) is not None and _finite(value)
    ]
    if propagated:
        ax.plot(
            *zip(*propagated, strict=True), "-", color="tab:blue", lw=1.6, label="propagated (the port's difference)"
        )
    for verdict in dict.fromkeys(r.verdict for r in layers):
        style = STYLES[verdict]
        points = [
            (i, max(value, TINY))
            for i, r in enumerate(layers)
            if r.verdict == verdict and (value := r.introduced) is not None and _finite(value)
        ]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.scatter(
                xs,
                ys,
                s=46 if style.flagged else 10,
                marker="D" if style.flagged else "o",
                color=PLOT[style.colour],
                zorder=3,
                label=f"introduced: {verdict}",
            )
    flagged = [(i, r.path) for i, r in enumerate(layers) if is_flagged(r.verdict)]
    for i, _ in flagged:
        ax.axvline(i, color="tab:red", lw=0.8, ls=":", alpha=0.7)
    ax.set_yscale("log")
    ax.set_xticks(*_ticks(layers), fontsize=7, rotation=20, ha="right")
    ax.set_xlim(-0.5, len(layers) - 0.5)
    ax.set_xlabel(f"depth: the {len(layers)} units in execution order (ticks: the outermost modules)", fontsize=8)
    ax.set_ylabel("normwise relative error", fontsize=8)
    named = _spread(flagged, layers)
    top = ax.secondary_xaxis("top")
    top.set_xticks(
        [i for i, _ in named], [_short(p) for _, p in named], fontsize=7, color="tab:red", rotation=20, ha="left"
    )
    title = f"{len(flagged)} flagged (dotted red lines), {len(named)} named" if flagged else "no unit flagged"
    ax.set_title(title, fontsize=8, loc="right", color="tab:red" if flagged else "black")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0)
    fig.tight_layout()
    return to_png_base64(fig)


def position_figure(port: PortResult) -> str | None:
    """Each flagged unit's error against position in the sequence (base64 PNG): a bug that grows
    with position (rotary frequencies, their scaling) or starts at a window shows where; None
    where no flagged unit has positions (the model takes no token sequences)."""
    rows = [r for r in port.layers if r.error_by_position]
    if not rows:
        return None
    fig = Figure(figsize=(WIDTH, 3.0))
    ax = fig.add_subplot()
    for row in rows[:8]:
        errors = [max(e, TINY) for e in row.error_by_position or []]
        ax.plot(range(len(errors)), errors, ".-", lw=1.2, label=_short(row.path))
    ax.set_yscale("log")
    ax.set_xlabel("position in the sequence", fontsize=8)
    ax.set_ylabel("normwise relative error", fontsize=8)
    ax.set_title(f"error by position, {min(len(rows), 8)} flagged units", fontsize=8, loc="right")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0)
    fig.tight_layout()
    return to_png_base64(fig)


def _spread(flagged: list[tuple[int, str]], layers: list[UnitRow]) -> list[tuple[int, str]]:
    """The flagged units to name on the figure: the innermost ones (no flagged unit inside), at
    most LABELLED, spread apart."""
    parent = {r.path: r.parent for r in layers}
    outer = set()
    for _, path in flagged:
        up = parent.get(path)
        while up is not None and up not in outer:
            outer.add(up)
            up = parent.get(up)
    return _apart([(i, p) for i, p in flagged if p not in outer], len(layers), LABELLED)


def _short(path: str, width: int = 28) -> str:
    """A unit's name on the figure: escaped (a control character has no glyph, and matplotlib's
    warning about it would print the raw byte), its end kept where it is long."""
    path = printable(path)
    return path if len(path) <= width else "…" + path[-(width - 1) :]


def _finite(value) -> bool:
    return isinstance(value, float | int) and math.isfinite(value)


def _cell(value) -> str:
    """A number to 3 digits, "inf" for an infinite error; "-" where a value is missing or does
    not apply (NaN)."""
    if isinstance(value, float) and value == value:
        return f"{value:.3g}"
    return html.escape("-" if value is None or isinstance(value, float) else str(value))


def _indent(row: UnitRow) -> str:
    """The layer cell's indent: its depth among nested units (none at the top)."""
    depth = row.depth
    return f" style='padding-left:{INDENT_EM * depth:g}em'" if depth else ""


def _answer_colour(port: PortResult) -> str:
    """The first flagged unit's verdict's colour, else the end-to-end verdict's; grey where nothing was compared."""
    rows = {r.path: r for r in port.layers}
    first = rows.get(port.first_not_within or "")
    if port.compared == 0:
        return STYLES[NOT_COMPARED].colour
    return STYLES[first.verdict if first else port.end_to_end.verdict].colour


def _answer(index: int, port: PortResult, answer: PortAnswer) -> str:
    """A port's three lines; the unit the second names links to its row."""
    where = html.escape(answer.where)
    paths = {r.path for r in port.layers}
    if answer.unit is not None and answer.unit in paths:
        name = html.escape(answer.unit)
        link = f"<a href='#{html.escape(quote(row_id(index, answer.unit)))}'>{name}</a>"
        where = where.replace(name, link, 1)
    why = html.escape(answer.why)
    command = answer.why.partition("look closer: ")[2]
    if command.startswith("opbench "):
        why = why.replace(html.escape(command), f"<code>{html.escape(command)}</code>", 1)
    verdict = html.escape(answer.verdict)
    return f"<div class='answer {_answer_colour(port)}'><p><b>{verdict}</b></p><p>{where}</p><p>{why}</p></div>"


def _row(index: int, row: UnitRow) -> str:
    style = STYLES[row.verdict]
    cells = [
        f"<td{_indent(row)}>{_cell(' + '.join(row.covers))}</td>",
        f"<td>{_cell(row.op)}</td>",
        f"<td class='{style.colour}'>{_cell(row.verdict)}</td>",
        f"<td class='why'><details><summary>{html.escape(short_reason(row))}</summary>"
        f"{html.escape(explanation(row.cause, row.reason))}</details></td>",
        *(f"<td>{_cell(getattr(row, c))}</td>" for c in COLUMNS),
        f"<td>{_cell(cause_cell(row.cause))}</td>",
    ]
    flagged = " class='flagged'" if style.flagged else ""
    return f"<tr id='{html.escape(row_id(index, row.path))}'{flagged}>{''.join(cells)}</tr>"


def model_page(report: ModelReport) -> str:
    """The page of one model report: its answer (`notes`, each port's three lines), how each
    verdict is derived, then per port its figures and table, drawn from the report's rows."""
    notes, derivations = report.notes(), report.derivations()
    shapes = ", ".join(f"{k} {tuple(v)}" for k, v in report.inputs.items())
    parts = [
        f"<!doctype html><html lang='en'><meta charset='utf-8'><title>opbench model: {html.escape(report.model)}"
        f"</title><style>{STYLE}</style>",
        f"<h1>{html.escape(report.model)}</h1><p>{html.escape(report.mode)} mode on {html.escape(shapes)}</p>",
        "<section id='answer'>",
        *(f"<p>{html.escape(n)}</p>" for n in notes),
        *(_answer(i, p, port_answer(p)) for i, p in enumerate(report.ports)),
        "<details><summary>How each verdict is derived</summary><ul>"
        + "".join(f"<li>{html.escape(d)}</li>" for d in derivations)
        + "</ul><p>introduced: the unit's normwise relative error on the reference's own inputs; inherited / "
        "propagated: the port's end-to-end difference from the float64 model at the unit's input / output; "
        "reason: the unit's ratio to its threshold, or why it is flagged or not compared (click it for how its "
        "threshold is derived)</p></details></section>",
    ]
    for i, port in enumerate(report.ports):
        parts.append(f"<h2>{html.escape(port.port)} [{port.dtype}]: {html.escape(port.description)}</h2>")
        figure = layer_figure(port)
        if figure:
            parts.append(f"<img alt='errors through depth' src='data:image/png;base64,{figure}'>")
        by_position = position_figure(port)
        if by_position:
            parts.append(f"<img alt='error by position' src='data:image/png;base64,{by_position}'>")
        head = "".join(f"<th>{c}</th>" for c in ("layer", "op", "verdict", "reason", *COLUMNS, "cause"))
        parts.append(f"<table><tr>{head}</tr>{''.join(_row(i, r) for r in port.layers)}</table>")
        noise = noise_rows(port.layers, _cell)
        if noise:
            head = "".join(f"<th>{html.escape(c)}</th>" for c in NOISE_HEADER)
            body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in noise)
            parts.append(f"<h3>Each unit against its quantization noise</h3><table><tr>{head}</tr>{body}</table>")
    return "\n".join(parts)


def write_model_page(path: Path | str, report: ModelReport) -> Path:
    """Atomically, never over an existing file or through a link (a dangling one included)."""
    path = Path(path)
    refuse_symlink(path)
    if path.exists():
        raise OpbenchError(f"--html {path}: a file appeared there during the run; it is kept, not overwritten")
    return write_atomic(path, model_page(report), replace=False)
