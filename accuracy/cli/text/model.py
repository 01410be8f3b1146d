"""`opbench model`'s text: the three-line answer per port, then each port's units, nested, one
short reason each.

Up to FOLD units every unit is shown; above it (a 30-layer decoder has hundreds), and with
`--only-flagged`, the flagged units and the units they run inside, with how many are hidden.
`-v` shows every unit, `--explain-verdicts` how each threshold is derived; `--json` and `--html`
carry everything. The verdict is coloured where the terminal takes colour, else marked."""

from __future__ import annotations

from accuracy.core.formatting import format_table, printable
from accuracy.judge.verdicts import NOT_COMPARED, WITHIN
from accuracy.workflows.model.answer import FOLD, STYLES, explanation, is_flagged, number, short_reason
from accuracy.workflows.model.quantization import NOISE_HEADER, noise_rows
from accuracy.workflows.model.report import ModelReport, cause_cell
from accuracy.workflows.model.rows import PortResult, UnitRow

HEADER = ["layer", "op", "verdict", "reason", "max ulp", "introduced", "inherited", "propagated", "cause", "inside"]
ANSI = {"green": "32", "yellow": "33", "red": "1;31", "magenta": "35", "grey": "2", "blue": "34", "cyan": "36"}


def _inside(row: UnitRow, layers: list[UnitRow]) -> str:
    """How many units run inside `row`, and how many of those are flagged or not compared."""
    below = {row.path}
    inside = []
    for r in layers:
        if r.parent in below:
            below.add(r.path)
            inside.append(r)
    if not inside:
        return ""
    flagged = sum(is_flagged(r.verdict) for r in inside)
    skipped = sum(r.verdict == NOT_COMPARED for r in inside)
    return (
        f"{len(inside)} units"
        + (f", {flagged} flagged" if flagged else "")
        + (f", {skipped} not compared" if skipped else "")
    )


def _ancestors(rows: list[UnitRow], by_path: dict[str, UnitRow]) -> set[str]:
    """The paths of `rows` and of every unit they run inside."""
    paths = set()
    for row in rows:
        key: str | None = row.path
        while key is not None and key not in paths:
            paths.add(key)
            key = by_path[key].parent if key in by_path else None
    return paths


def shown_units(port: PortResult, verbose: bool = False, only_flagged: bool = False) -> list[UnitRow]:
    """Every unit with -v or up to FOLD units; else the flagged units and the units they run
    inside (with the top level, unless --only-flagged)."""
    layers = port.layers
    if verbose or (len(layers) <= FOLD and not only_flagged):
        return layers
    by_path = {r.path: r for r in layers}
    keep = _ancestors([r for r in layers if is_flagged(r.verdict)], by_path)
    return [r for r in layers if r.path in keep or (not only_flagged and r.depth == 0)]


def _verdict_cell(verdict: str, colour: bool) -> str:
    """The verdict coloured (the ANSI codes go in after the table is laid out), else marked."""
    style = STYLES[verdict]
    return verdict if colour or not style.flagged else f"{style.mark} {verdict}"


def _coloured(lines: list[str], verdicts: list[str]) -> list[str]:
    """The table's verdict column coloured: its span read from the dashes under the header."""
    dashes = lines[1]
    starts = [i for i, c in enumerate(dashes) if c == "-" and (i == 0 or dashes[i - 1] == " ")]
    start = starts[HEADER.index("verdict")]
    end = dashes.index(" ", start) if " " in dashes[start:] else len(dashes)
    out = lines[:2]
    for line, verdict in zip(lines[2:], verdicts, strict=True):
        code = ANSI[STYLES[verdict].colour]
        out.append(f"{line[:start]}\x1b[{code}m{line[start:end]}\x1b[0m{line[end:]}")
    return out


def _table(port: PortResult, shown: list[UnitRow], colour: bool) -> list[str]:
    nested = any(r.depth for r in port.layers)
    header = HEADER if nested else HEADER[:-1]
    lines = format_table(
        header,
        [
            [
                "  " * r.depth + " + ".join(r.covers),
                r.op,
                _verdict_cell(r.verdict, colour),
                short_reason(r),
                number(r.max_ulp),
                number(r.introduced),
                number(r.inherited),
                number(r.propagated),
                cause_cell(r.cause),
                *([_inside(r, port.layers)] if nested else []),
            ]
            for r in shown
        ],
    )
    return _coloured(lines, [r.verdict for r in shown]) if colour else lines


def render(
    report: ModelReport,
    verbose: bool = False,
    only_flagged: bool = False,
    explain: bool = False,
    colour: bool = False,
) -> str:
    """The text `opbench model` prints without --json."""
    shapes = ", ".join(f"{k} {tuple(v)}" for k, v in report.inputs.items())
    lines = [f"{report.model} in {report.mode} mode on {shapes}", ""]
    lines += report.answers()
    lines += [f"{printable(a.port)}: absent ({printable(a.reason)})" for a in report.absent]
    if explain:
        lines += ["", "how each verdict is derived:", *(f"  {line}" for line in report.derivations())]
    for p in report.ports:
        port = printable(p.port)
        lines += ["", f"{port} [{p.dtype}]: {printable(p.description)}; layer by layer on identical inputs:"]
        shown = shown_units(p, verbose, only_flagged)
        lines += _table(p, shown, colour)
        noise = noise_rows(shown, number)
        if noise:
            lines += [f"{port}: each unit against its quantization noise:", *format_table(NOISE_HEADER, noise)]
            end = p.end_to_end.quantization
            if end is not None:
                lines.append(
                    f"{port}: output: rms {number(end['rms'])}, {number(end['ratio'])}x the noise of every "
                    f"quantize point ({number(end['expected_rms'])}), SQNR {number(end['sqnr_db'])} dB"
                )
        hidden = len(p.layers) - len(shown)
        if hidden:
            lines.append(f"{hidden} of {len(p.layers)} units hidden, none of them flagged; -v shows every unit")
        why = [r for r in shown if explain and (verbose or r.verdict != WITHIN)]
        if why:
            lines += ["why:", *(f"  {printable(r.path)}: {printable(explanation(r.cause, r.reason))}" for r in why)]
    lines += [
        "",
        "reason: the unit's ratio to its threshold, or why it is flagged or not compared; introduced: the unit's "
        "normwise relative error on the reference's own inputs; inherited / propagated: the port's end-to-end "
        "difference from the float64 model at the unit's input / output",
    ]
    if not explain and any(is_flagged(r.verdict) for p in report.ports for r in p.layers):
        lines.append("--explain-verdicts says how each flagged unit's threshold is derived")
    return "\n".join(lines)
