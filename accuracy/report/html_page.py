"""A report's index.html, self-contained: the lead, then each section's heading and content
(accuracy/report/render.py's SECTIONS says which, in what order)."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from accuracy.core.formatting import format_number
from accuracy.report import plots
from accuracy.report.analysis import MAX_TABLE_ROWS, ReportData, backend_tally, integer_columns, summary
from accuracy.report.answers import Answers, pair_answer
from accuracy.report.environments import latest_commit
from accuracy.report.selftest_saved import KEPT, SavedSelftest

SHOWN_ROWS = 12  # an answer table's rows shown before the rest fold into <details>

CASE_COLUMNS = {  # per-op detail table: column -> heading
    "implementation": "implementation",
    "dtype": "dtype",
    "condition": "condition",
    "size": "size",
    "threads": "threads",
    "verdict": "verdict",
    "max_ulp": "max ulp",
    "bound_ratio": "bound ratio",
    "typical_ratio": "typical ratio",
    "nonfinite": "non-finite",
    "bits_differ_run_to_run": "bits vary run to run",
    "bits_differ_1_vs_all_threads": "bits vary with threads",
    "time": "seconds",
    "gflops": "GFLOP/s",
}

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1120px; padding: 0 1em; color: #222; }
h1 { border-bottom: 2px solid #444; margin-bottom: 0.3em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ccc; }
h3 { margin-top: 1.4em; } nav { font-size: 13px; } nav a { margin-right: 0.8em; } .lead { font-size: 15px; }
table { border-collapse: collapse; font-size: 12px; margin: 0.5em 0; } caption { text-align: left; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: left; vertical-align: top; }
th { background: #eee; } tr:nth-child(even) { background: #fafafa; } td.num { text-align: right; }
.regression td { background: #fde8e8; } .improvement td { background: #e8f7e8; }
.beyond { color: #b00; font-weight: 600; } .suspicious { color: #b60; font-weight: 600; }
.undetermined { color: #666; font-weight: 600; } .within { color: #070; }
details { margin: 0.4em 0; } summary { cursor: pointer; color: #035; }
figure { margin: 0.5em 0; } figure img { max-width: 100%; } figcaption { font-size: 12px; color: #444; }
.note { font-size: 12px; color: #444; } .warnings li { font-family: monospace; font-size: 12px; }
"""


def _number(value) -> str:
    return format_number(value, missing="")


def _text(value) -> str:
    """A cell's text, escaped; a missing value is empty."""
    return "" if value is None or value is pd.NA or value != value else html.escape(str(value))


def _op_link(op: str) -> str:
    return f'<a href="#op-{html.escape(str(op))}">{html.escape(str(op))}</a>'


def _verdict_html(label: str) -> str:
    css = next((c for c in ("beyond", "suspicious", "undetermined", "within") if str(label).startswith(c)), "")
    return f'<span class="{css}">{html.escape(str(label))}</span>'


def _code(text: str) -> str:
    return f"<code>{html.escape(str(text))}</code>"


@dataclass(frozen=True)
class Column:
    """One column of a section table, declared once with its heading and cell so that a section
    lists its columns instead of keeping headings and row cells in step by hand."""

    heading: str
    cell: Callable[[Any], str]  # a row -> the cell's HTML (already escaped)
    numeric: bool = False  # right-aligned


# the columns several sections share, with the same cell in each
OP = Column("op", lambda r: _op_link(r.op))
IMPLEMENTATION = Column("implementation", lambda r: _code(r.implementation))
DTYPE = Column("dtype", lambda r: _text(r.dtype))
CONDITION = Column("condition", lambda r: _text(r.condition))
SIZE = Column("size", lambda r: _number(r.size))
THREADS = Column("threads", lambda r: _number(r.threads))
VERDICT = Column("verdict", lambda r: _verdict_html(r.verdict))


def _table(columns: list[Column], rows: Iterable[Any]) -> str:
    """An HTML table of `rows`, one cell per column; rows past SHOWN_ROWS fold into <details> so a
    long table does not bury the sections below it."""
    cells = [[c.cell(row) for c in columns] for row in rows]
    head = "".join(f"<th>{html.escape(c.heading)}</th>" for c in columns)
    opening = ['<td class="num">' if c.numeric else "<td>" for c in columns]

    def table(chunk):
        body = "".join(
            "<tr>" + "".join(f"{td}{v}</td>" for td, v in zip(opening, row, strict=True)) + "</tr>" for row in chunk
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    if not cells:
        return "<p>None.</p>"
    if len(cells) <= SHOWN_ROWS + 3:
        return table(cells)
    return (
        table(cells[:SHOWN_ROWS]) + f"<details><summary>{len(cells) - SHOWN_ROWS} more rows</summary>"
        f"{table(cells[SHOWN_ROWS:])}</details>"
    )


def _env_labels(table: pd.DataFrame) -> tuple[dict[str, str], str]:
    """Short labels (E1, E2, ...) for the long environment names a table's rows carry, and the
    legend that spells them out: a second environment must not push a table off the page."""
    names = sorted(str(e) for e in table["env"].dropna().unique() if str(e))
    labels = {name: f"E{i}" for i, name in enumerate(names, 1)}
    legend = "; ".join(f"<b>{label}</b> = {_code(name)}" for name, label in labels.items())
    return labels, f"<p class=note>Environments: {legend}</p>" if labels else ""


def _answer_table(table: pd.DataFrame, columns: list[Column], short: bool = False) -> str:
    """An answer table's rows under `columns`, led by an environment column where some row names
    an environment (results of one environment need none). With `short`, long environment names
    become E1, E2, ... and a legend above the table spells them out."""
    shown = "env" in table and table["env"].astype(str).str.len().gt(0).any()
    labels, legend = _env_labels(table) if shown and short else ({}, "")
    environment = Column("environment", lambda r: _text(labels.get(str(r.env), r.env)))
    return legend + _table([environment, *columns] if shown else columns, table.itertuples())


def _tally_line(speed: pd.DataFrame) -> str:
    if speed.empty:
        return ""
    crowned = speed.loc[speed["fastest"].astype(bool)]
    parts = ", ".join(f"{r.backend} {r.fastest}" for r in backend_tally(crowned).itertuples() if r.fastest)
    return f"fastest in {len(crowned)} op/dtype/thread cases: {parts}"


def _verdicts_html(answers: Answers) -> str:
    columns = [
        OP,
        IMPLEMENTATION,
        DTYPE,
        CONDITION,
        VERDICT,
        Column("reason", lambda r: _text(r.reason)),
        Column("sizes", lambda r: r.sizes),  # sizes and threads are already lists as text: "1, 2"
        Column("threads", lambda r: r.threads),
    ]
    table = answers.verdicts
    total = answers.cases.groupby(["op", "implementation", "dtype", "condition"], dropna=False).ngroups
    lead = (
        f"<p>{len(table)} of {total} implementation/dtype/condition combinations are not "
        "<em>within rounding</em> somewhere (the worst case is shown).</p>"
    )
    return lead + _answer_table(table, columns, short=True)


def _groups_html(groups: list[dict]) -> str:
    lines = []
    for group in groups:
        names = " = ".join(_code(name) for name in group["implementations"])
        varies = " (bits vary run to run)" if group["varies_run_to_run"] else ""
        lines.append(f"{names}: {_verdict_html(group['verdict'])}{varies}")
    return "<br>".join(lines)


def _discrepancies_html(answers: Answers) -> str:
    columns = [
        OP,
        DTYPE,
        CONDITION,
        SIZE,
        THREADS,
        Column(
            "outputs with identical bits (= joins implementations with the same bits)", lambda r: _groups_html(r.groups)
        ),
        Column("answer", lambda r: _text(r.answer)),
    ]
    return (
        "<p>Per op, implementations are grouped by their output digest (equal: bitwise identical outputs), at "
        "the largest size and most threads measured; each group carries its verdict.</p>"
        + _answer_table(answers.discrepancies, columns)
    )


def _reproducibility_html(answers: Answers) -> str:
    columns = [
        OP,
        IMPLEMENTATION,
        DTYPE,
        CONDITION,
        SIZE,
        Column("bits change with", lambda r: _text(r.changes_with)),
        VERDICT,
    ]
    return (
        "<p>Cases whose output bits differ between one thread and all cores, or between repeated runs "
        "with the same threads. Every other case measured is bitwise reproducible.</p>"
        + _answer_table(answers.reproducibility, columns)
    )


def _speed_html(answers: Answers) -> str:
    table, peak = answers.speed, answers.peak
    columns = [
        OP,
        DTYPE,
        replace(THREADS, numeric=True),
        replace(SIZE, numeric=True),
        Column("fastest", lambda r: _code(r.fastest) if r.fastest else _text(f"none named: {r.busy}")),
        Column("seconds", lambda r: _number(r.time), numeric=True),
        Column("GFLOP/s", lambda r: _number(r.gflops), numeric=True),
        Column("% of measured peak", lambda r: _number(r.pct_measured_peak), numeric=True),
        Column("% of theoretical peak", lambda r: _number(r.pct_theoretical_peak), numeric=True),
        Column("next fastest", lambda r: _code(r.runner_up) if r.runner_up else ""),
        Column("x slower", lambda r: _number(r.runner_up_slower), numeric=True),
    ]
    measured = "; ".join(
        f"{dtype}, {int(threads)} thread(s): {rate:.3g} GFLOP/s ({what})"
        for (_, dtype, threads), (rate, what) in sorted(peak.measured.items(), key=str)
    )
    notes = (
        f"<p class=note><b>Measured peak</b> (the best large-GEMM rate of any implementation in these results, "
        f"per dtype and thread count): {html.escape(measured) or 'no GEMM timed'}.<br>"
        f"<b>Theoretical peak</b>: {html.escape(peak.basis)}; float16/bfloat16 counted at the float32 rate "
        "(CPUs without native half-precision arithmetic compute them in float32).</p>"
    )
    tally = backend_tally(table)
    tally_html = (
        "<p><b>Which backend is fastest?</b> Cases (op, dtype, threads) each backend is fastest and second in:</p>"
        + _table_html(tally)
        if len(tally)
        else ""
    )
    return notes + tally_html + _answer_table(table, columns, short=True)


def _changes_html(answers: Answers) -> str:
    change = answers.changes
    if change.note:
        return f"<p>{html.escape(change.note)}</p>"
    lead = (
        f"<p><b>{html.escape(change.new)}</b> against <b>{html.escape(change.base)}</b> "
        f"(<code>opbench compare</code>'s verdict):</p><ul>"
        + "".join(f"<li>{html.escape(line)}</li>" for line in change.summary)
        + "</ul>"
    )
    columns = [
        OP,
        IMPLEMENTATION,
        DTYPE,
        SIZE,
        THREADS,
        Column("verdict", lambda r: _text(r.verdict)),
        Column("time ratio", lambda r: _number(r.time_ratio)),
        Column("bits", lambda r: _text(r.bits)),
        Column("verdict before", lambda r: _verdict_html(r.verdict_base or "")),
        Column("verdict now", lambda r: _verdict_html(r.verdict_new or "")),
    ]
    return lead + _table(columns, change.table.itertuples())


def _smallest_caught(case: dict) -> str:
    """The weakest mutant a self-test case caught, or '-' where it caught none."""
    caught = case.get("smallest_caught")
    return f"{caught['error_ulp']:.3g} ulp ({caught['mutant']})" if caught else "-"


def _selftest_html(saved: SavedSelftest | None) -> str:
    if saved is None:
        return (
            "<p>No saved self-test: <code>make selftest</code> writes <code>results/selftest.json</code> "
            "(<code>opbench selftest --small --json</code>, minutes).</p>"
        )
    origin = f" at commit {saved.commit[:8]}" if saved.commit else ""
    where = "the copy kept in the repository (reports/selftest.json)" if saved.path == KEPT else str(saved.path)
    columns = [
        Column("op", lambda c: _op_link(c["op"])),
        Column("dtype", lambda c: c["dtype"]),
        Column("condition", lambda c: html.escape(str(c["condition"]))),
        Column("size", lambda c: _number(c["size"])),
        Column("false alarms", lambda c: str(len(c["false_alarms"]))),
        Column("caught / must catch", lambda c: f"{c['caught']}/{c['must_catch']}"),
        Column("smallest caught", lambda c: html.escape(_smallest_caught(c))),
    ]
    alarms = [
        f"<li>{html.escape(c['op'])} {c['dtype']}: {html.escape(a)}</li>" for c in saved.cases for a in c["alarms"]
    ]
    return (
        f"<p class=lead>{html.escape(saved.headline())}.</p><p class=note>From {html.escape(where)}{origin}: "
        "every correct implementation judged, and mutants of one (a bias or divisor off by (1+2^-k), a dropped "
        "term, low-precision accumulation, truncated inputs, shifted results); a mutant erring at least 16x the "
        "least accurate correct algorithm must be caught.</p>"
        + (
            f"<details><summary>{len(alarms)} alarms on correct implementations</summary><ul>{''.join(alarms)}</ul>"
            "</details>"
            if alarms
            else ""
        )
        + f"<details><summary>per op ({len(saved.cases)} cases)</summary>{_table(columns, saved.cases)}</details>"
    )


def _case_table_html(cases: pd.DataFrame) -> str:
    columns = [c for c in CASE_COLUMNS if c in cases]
    numeric = {i for i, c in enumerate(columns) if c not in ("implementation", "dtype", "condition", "verdict")}
    rows = []
    for record in cases.sort_values(["implementation", "dtype", "size", "threads"]).to_dict("records"):
        rows.append(
            [
                _code(record[c])
                if c == "implementation"
                else _verdict_html(record[c])
                if c == "verdict"
                else html.escape(str(record[c]))
                if c in ("dtype", "condition")
                else _number(record[c])
                for c in columns
            ]
        )
    head = "".join(f"<th>{html.escape(CASE_COLUMNS[c])}</th>" for c in columns)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="num">{v}</td>' if i in numeric else f"<td>{v}</td>" for i, v in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<details><summary>all {len(rows)} cases</summary><table><tr>{head}</tr>{body}</table></details>"


def _op_sections_html(answers: Answers) -> str:
    from accuracy.report.answers import verdict_label

    cases = answers.cases.assign(
        verdict=[
            verdict_label(o, i, t, d)
            for o, i, t, d in zip(
                answers.cases["op"],
                answers.cases["implementation"],
                answers.cases.get("verdict_tier", math.nan),
                answers.cases["dtype"],
                strict=False,
            )
        ]
    )
    parts = []
    groups = list(cases.groupby("op", sort=True))
    for (op, group), (accuracy, speed) in zip(groups, plots.op_figures([g for _, g in groups]), strict=True):
        figures = []
        if accuracy:
            figures.append(
                (
                    "Accuracy: worst over sizes and threads per implementation. Log scales; the dashed lines "
                    "are the worst-case rounding bound (ratio 1, beyond it: beyond rounding) and the typical "
                    "threshold (ratio 1, beyond it: suspicious). A 0 is an exact result.",
                    accuracy,
                )
            )
        if speed:
            figures.append(("Speed: time per call (log scale).", speed))
        body = "".join(
            f'<figure><img alt="{html.escape(op)}: {html.escape(caption)}" src="data:image/png;base64,{png}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
            for caption, png in figures
        )
        parts.append(
            f'<h3 id="op-{html.escape(op)}">{html.escape(op)}</h3>{body or "<p>No values to plot.</p>"}'
            f"{_case_table_html(group)}"
        )
    return "\n".join(parts)


def _field(record: dict, key: str) -> str:
    """A record's value as escaped text, empty where the record lacks the key."""
    return html.escape(str(record.get(key, "")))


def _environments_html(data: ReportData) -> str:
    newest = data.frame.sort_values("commit_date").drop_duplicates(["machine", "env_name"], keep="last")
    table = _table(
        [
            Column("machine", lambda r: _field(r, "machine")),
            Column("environment", lambda r: _field(r, "env_name")),
            Column("newest commit", lambda r: _field(r, "commit_hash")[:12]),
            Column("date", lambda r: _field(r, "commit_date")),
            Column("BLAS", lambda r: _field(r, "blas")),
            Column("BLAS threads", lambda r: _field(r, "blas_threads")),
            Column("torch", lambda r: _field(r, "torch_version")),
            Column("numpy", lambda r: _field(r, "numpy_version")),
        ],
        newest.to_dict("records"),
    )
    if data.comparisons.empty:
        return table + "<p class=note>One environment: nothing to set side by side.</p>"
    side = data.comparisons.drop(columns="commit_hash", errors="ignore")
    return (
        table + f"<details><summary>values of every environment side by side at the newest commit "
        f"({latest_commit(data.frame)[:8]}), {len(side)} rows</summary>{_table_html(side)}</details>"
    )


def _machines_html(data: ReportData) -> str:
    pairs, notes = data.machines
    if not pairs and not notes:
        return "<p class=note>One machine: nothing to set side by side.</p>"
    parts = [f"<p class=note>{html.escape(note)}</p>" for note in notes]
    for pair in pairs:
        parts.append(
            f"<h3>{html.escape(pair.other)} vs {html.escape(pair.base)}</h3><p>{html.escape(pair.headline())}</p>"
        )
        parts.append(_table_html(pair.table()))
    return "".join(parts)


def _table_html(table: pd.DataFrame, css_class: str = "") -> str:
    if table.empty:
        return "<p>None.</p>"
    note = (
        f"<p>First {MAX_TABLE_ROWS} of {len(table)} rows; see the CSV for all.</p>"
        if len(table) > MAX_TABLE_ROWS
        else ""
    )
    body = integer_columns(table.head(MAX_TABLE_ROWS)).to_html(
        index=False, na_rep="", float_format="{:.4g}".format, border=0
    )
    if css_class:
        body = body.replace("<tr>", f'<tr class="{css_class}">')
    return note + body


def _folded(table: pd.DataFrame, what: str, css_class: str) -> str:
    if table.empty:
        return f"<p>No {what}.</p>"
    return f"<details><summary>{len(table)} {what}</summary>{_table_html(table, css_class)}</details>"


def _figures_html(figures: list[tuple[str, str]]) -> str:
    if not figures:
        return "<p>No steps to plot.</p>"
    return "\n".join(
        f'<figure style="display:inline-block"><img alt="{html.escape(caption)}" src="data:image/png;base64,{png}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        for caption, png in figures
    )


def _names(values, limit: int = 4) -> str:
    values = list(dict.fromkeys(values))
    more = f" and {len(values) - limit} more" if len(values) > limit else ""
    return ", ".join(values[:limit]) + more


def _lead(data: ReportData) -> str:
    """The three questions a user brings, answered in one line each, above the tables."""
    a = data.answers
    cases = a.cases
    impls = cases.groupby(["op", "implementation"]).ngroups
    head = f"{impls} implementations of {cases['op'].nunique()} ops at commit {latest_commit(data.frame)[:8]}."
    differ = a.discrepancies.loc[a.discrepancies["distinct_outputs"] > 1]
    rounding = differ.loc[differ["answer"].str.contains("all within rounding")]
    outside = list(dict.fromkeys(f"{r.implementation} ({r.op}, {r.dtype})" for r in a.verdicts.itertuples()))
    seed = pair_answer(a.discrepancies)
    bug = (
        f"<b>Bug or rounding?</b> {html.escape(seed) + '. ' if seed else ''}{len(outside)} not within rounding"
        + (f": {html.escape(_names(outside))}" if outside else "")
        + f". In {len(rounding)} of {len(differ)} op/dtype cases where implementations give different bits, "
        "every one is within rounding: the differences are rounding, not bugs."
    )
    if a.peak.measured:
        (env, dtype, threads), (rate, what) = max(
            a.peak.measured.items(), key=lambda item: (item[0][1] == "float32", item[1][0])
        )
        theory = a.peak.theoretical.get((env, dtype, threads))
        share = f", {100 * rate / theory:.0f}% of the theoretical {theory:.3g} GFLOP/s" if theory else ""
        speed = (
            f"<b>Fastest, and how close to peak?</b> best large GEMM {rate:.3g} GFLOP/s ({html.escape(what)}, "
            f"{dtype}, {int(threads)} thread(s)){share}; the fastest implementation of every op is in Speed."
        )
    else:
        speed = "<b>Fastest?</b> see Speed (no large GEMM timed here, so no measured peak)."
    if a.busy:
        speed += f" The machine was busy ({html.escape('; '.join(a.busy.values()))}): no fastest is named there."
    if len(a.speed):
        speed += f" By backend, {html.escape(_tally_line(a.speed))}."
    flagged = a.reproducibility.drop_duplicates(["op", "implementation", "dtype", "condition", "size"])  # per case
    repro = f"<b>Not reproducible?</b> {len(flagged)} cases change bits with the thread count or from run to run" + (
        f": {html.escape(_names(f'{r.implementation} ({r.op})' for r in flagged.itertuples()))}."
        if len(flagged)
        else "."
    )
    return f"<p class=lead>{html.escape(head)}</p><ul class=lead><li>{bug}</li><li>{speed}</li><li>{repro}</li></ul>"


# ---- the sections, as accuracy/report/render.py's SECTIONS lists them: (heading, content) ------


def verdicts(data: ReportData) -> tuple[str, str]:
    return "Verdicts: what is not within rounding", _verdicts_html(data.answers)


def discrepancies(data: ReportData) -> tuple[str, str]:
    heading = "Discrepancies: who gives the same bits, and is the difference rounding?"
    return heading, _discrepancies_html(data.answers)


def reproducibility(data: ReportData) -> tuple[str, str]:
    heading = "Reproducibility: bits that change with threads or from run to run"
    return heading, _reproducibility_html(data.answers)


def speed(data: ReportData) -> tuple[str, str]:
    return "Speed: the fastest implementation, against the peak", _speed_html(data.answers)


def changes(data: ReportData) -> tuple[str, str]:
    return "Changes against the previous results", _changes_html(data.answers)


def selftest(data: ReportData) -> tuple[str, str]:
    return "Self-test of the verdicts", _selftest_html(data.selftest)


def ops(data: ReportData) -> tuple[str, str]:
    return f"Every op ({data.answers.cases['op'].nunique()})", _op_sections_html(data.answers)


def environments(data: ReportData) -> tuple[str, str]:
    return "Environments", _environments_html(data)


def machines(data: ReportData) -> tuple[str, str]:
    return "Machines side by side: same bits, same verdicts, how much faster?", _machines_html(data)


def history(data: ReportData) -> tuple[str, str]:
    return "History", (
        _table_html(pd.DataFrame(summary(data), columns=["", "value"]))
        + _folded(data.changes("regression"), "regressions", "regression")
        + _folded(data.changes("improvement"), "improvements", "improvement")
        + _figures_html(plots.history(data.frame, data.steps, data.max_plots))
    )


def warnings(data: ReportData) -> tuple[str, str]:
    items = "".join(f"<li>{html.escape(line)}</li>" for line in data.warnings) or "<li>None.</li>"
    return "Skipped files and warnings", f'<ul class="warnings">{items}</ul>'


def page(data: ReportData, sections: list[tuple[str, str, str]]) -> str:
    """The whole page: the lead, a link to each section, then the sections (key, heading, content)."""
    title = f"opbench report: {data.name}"
    nav = "<nav>" + "".join(f'<a href="#{key}">{key}</a>' for key, _, _ in sections) + "</nav>"
    body = "\n".join(f'<h2 id="{key}">{html.escape(heading)}</h2>\n{content}' for key, heading, content in sections)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head>\n"
        f"<body><h1>{html.escape(title)}</h1>\n{nav}\n{_lead(data)}\n{body}\n</body></html>\n"
    )
