"""A report's report.md: the summary, then each section that has a Markdown form
(accuracy/report/render.py's SECTIONS says which, in what order)."""

from __future__ import annotations

import pandas as pd

from accuracy.report.analysis import MAX_TABLE_ROWS, ReportData, backend_tally, integer_columns, summary


def _machines_markdown(data: ReportData) -> str:
    pairs, notes = data.machines
    if not pairs and not notes:
        return "One machine: nothing to set side by side."
    blocks = [f"- {note}" for note in notes]
    blocks += [
        f"### {pair.other} vs {pair.base}\n\n{pair.headline()}\n\n{_table_markdown(pair.table())}" for pair in pairs
    ]
    return "\n\n".join(blocks)


def _table_markdown(table: pd.DataFrame) -> str:
    if table.empty:
        return "None."
    note = (
        f"\n\nFirst {MAX_TABLE_ROWS} of {len(table)} rows; see the CSV for all." if len(table) > MAX_TABLE_ROWS else ""
    )
    return integer_columns(table.head(MAX_TABLE_ROWS)).to_markdown(index=False, floatfmt=".4g") + note


def _groups_markdown(groups: list[dict]) -> str:
    return "; ".join(" = ".join(f"`{n}`" for n in g["implementations"]) + f": {g['verdict']}" for g in groups)


# ---- the sections, as accuracy/report/render.py's SECTIONS lists them ---------------------------


def verdicts(data: ReportData) -> str:
    return f"## Verdicts: not within rounding\n\n{_table_markdown(data.answers.verdicts)}"


def discrepancies(data: ReportData) -> str:
    table = data.answers.discrepancies
    return f"## Discrepancies\n\n{_table_markdown(table.assign(groups=table['groups'].map(_groups_markdown)))}"


def reproducibility(data: ReportData) -> str:
    return f"## Reproducibility\n\n{_table_markdown(data.answers.reproducibility)}"


def speed(data: ReportData) -> str:
    a = data.answers
    return f"## Speed\n\n{a.peak.basis}\n\n{_table_markdown(backend_tally(a.speed))}\n\n{_table_markdown(a.speed)}"


def changes(data: ReportData) -> str:
    change = data.answers.changes
    lines = change.note or "\n".join(f"- {line}" for line in change.summary)
    return f"## Changes ({change.base} -> {change.new})\n\n{lines}\n\n{_table_markdown(change.table)}"


def selftest(data: ReportData) -> str:
    return f"## Self-test\n\n{data.selftest.headline() if data.selftest else 'No saved self-test (`make selftest`).'}"


def machines(data: ReportData) -> str:
    return f"## Machines side by side\n\n{_machines_markdown(data)}"


def history(data: ReportData) -> str:
    """The steps found; their plots are the page's."""
    return (
        f"## Regressions\n\n{_table_markdown(data.changes('regression'))}\n\n"
        f"## Improvements\n\n{_table_markdown(data.changes('improvement'))}"
    )


def warnings(data: ReportData) -> str:
    return "## Skipped files and warnings\n\n" + ("\n".join(f"- `{line}`" for line in data.warnings) or "None.")


def page(data: ReportData, sections: list[str]) -> str:
    """The whole report.md: the summary list, then the sections' blocks."""
    head = "\n".join(f"- {key}: {value}" for key, value in summary(data))
    return f"# opbench report: {data.name}\n\n{head}\n\n" + "\n\n".join(sections) + "\n\nPlots: see index.html.\n"
