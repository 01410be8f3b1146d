"""A report's index.html, self-contained: the lead, then each section's heading and content
(accuracy/report/render.py's SECTIONS says which, in what order)."""

from __future__ import annotations

import html
import math
from collections.abc import Collection

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


def _rows_html(headings: list[str], rows: list[list[str]], numeric: Collection[int] = frozenset()) -> str:
    """An HTML table of cells that are already HTML; rows past SHOWN_ROWS fold into <details>."""

    def table(chunk):
        head = "".join(f"<th>{html.escape(h)}</th>" for h in headings)
        body = "".join(
            "<tr>"
            + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
            + "</tr>"
            for row in chunk
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    if not rows:
        return "<p>None.</p>"
    if len(rows) <= SHOWN_ROWS + 3:
        return table(rows)
    return (
        table(rows[:SHOWN_ROWS]) + f"<details><summary>{len(rows) - SHOWN_ROWS} more rows</summary>"
        f"{table(rows[SHOWN_ROWS:])}</details>"
    )


def _env_cell(frame: pd.DataFrame) -> bool:
    return "env" in frame and frame["env"].astype(str).str.len().gt(0).any()


def _env_labels(table: pd.DataFrame) -> tuple[dict[str, str], str]:
    """Short labels (E1, E2, ...) for the long environment names a table's rows carry, and the
    legend that spells them out: a second environment must not push a table off the page."""
    names = sorted(str(e) for e in table["env"].dropna().unique() if str(e))
    labels = {name: f"E{i}" for i, name in enumerate(names, 1)}
    legend = "; ".join(f"<b>{label}</b> = {_code(name)}" for name, label in labels.items())
    return labels, f"<p class=note>Environments: {legend}</p>" if labels else ""


def _tally_line(speed: pd.DataFrame) -> str:
    if speed.empty:
        return ""
    crowned = speed.loc[speed["fastest"].astype(bool)]
    parts = ", ".join(f"{r.backend} {r.fastest}" for r in backend_tally(crowned).itertuples() if r.fastest)
    return f"fastest in {len(crowned)} op/dtype/thread cases: {parts}"


def _verdicts_html(answers: Answers) -> str:
    table = answers.verdicts
    env = _env_cell(table)
    headings = [
        *(["environment"] if env else []),
        "op",
        "implementation",
        "dtype",
        "condition",
        "verdict",
        "reason",
        "sizes",
        "threads",
    ]
    labels, legend = _env_labels(table) if env else ({}, "")
    rows = [
        [
            *([_text(labels.get(str(r.env), r.env))] if env else []),
            _op_link(r.op),
            _code(r.implementation),
            _text(r.dtype),
            _text(r.condition),
            _verdict_html(r.verdict),
            _text(r.reason),
            r.sizes,
            r.threads,
        ]
        for r in table.itertuples()
    ]
    total = answers.cases.groupby(["op", "implementation", "dtype", "condition"], dropna=False).ngroups
    lead = (
        f"<p>{len(table)} of {total} implementation/dtype/condition combinations are not "
        "<em>within rounding</em> somewhere (the worst case is shown).</p>"
    )
    return lead + legend + _rows_html(headings, rows)


def _groups_html(groups: list[dict]) -> str:
    lines = []
    for group in groups:
        names = " = ".join(_code(name) for name in group["implementations"])
        varies = " (bits vary run to run)" if group["varies_run_to_run"] else ""
        lines.append(f"{names}: {_verdict_html(group['verdict'])}{varies}")
    return "<br>".join(lines)


def _discrepancies_html(answers: Answers) -> str:
    table = answers.discrepancies
    env = _env_cell(table)
    headings = [
        *(["environment"] if env else []),
        "op",
        "dtype",
        "condition",
        "size",
        "threads",
        "outputs with identical bits (= joins implementations with the same bits)",
        "answer",
    ]
    rows = [
        [
            *([_text(r.env)] if env else []),
            _op_link(r.op),
            _text(r.dtype),
            _text(r.condition),
            _number(r.size),
            _number(r.threads),
            _groups_html(r.groups),
            _text(r.answer),
        ]
        for r in table.itertuples()
    ]
    return (
        "<p>Per op, implementations are grouped by their output digest (equal: bitwise identical outputs), at "
        "the largest size and most threads measured; each group carries its verdict.</p>" + _rows_html(headings, rows)
    )


def _reproducibility_html(answers: Answers) -> str:
    table = answers.reproducibility
    env = _env_cell(table)
    headings = [
        *(["environment"] if env else []),
        "op",
        "implementation",
        "dtype",
        "condition",
        "size",
        "bits change with",
        "verdict",
    ]
    rows = [
        [
            *([_text(r.env)] if env else []),
            _op_link(r.op),
            _code(r.implementation),
            _text(r.dtype),
            _text(r.condition),
            _number(r.size),
            _text(r.changes_with),
            _verdict_html(r.verdict),
        ]
        for r in table.itertuples()
    ]
    return (
        "<p>Cases whose output bits differ between one thread and all cores, or between repeated runs "
        "with the same threads. Every other case measured is bitwise reproducible.</p>" + _rows_html(headings, rows)
    )


def _speed_html(answers: Answers) -> str:
    table, peak = answers.speed, answers.peak
    env = _env_cell(table)
    headings = [
        *(["environment"] if env else []),
        "op",
        "dtype",
        "threads",
        "size",
        "fastest",
        "seconds",
        "GFLOP/s",
        "% of measured peak",
        "% of theoretical peak",
        "next fastest",
        "x slower",
    ]
    labels, legend = _env_labels(table) if env else ({}, "")
    rows = [
        [
            *([_text(labels.get(str(r.env), r.env))] if env else []),
            _op_link(r.op),
            _text(r.dtype),
            _number(r.threads),
            _number(r.size),
            _code(r.fastest) if r.fastest else _text(f"none named: {r.busy}"),
            _number(r.time),
            _number(r.gflops),
            _number(r.pct_measured_peak),
            _number(r.pct_theoretical_peak),
            _code(r.runner_up) if r.runner_up else "",
            _number(r.runner_up_slower),
        ]
        for r in table.itertuples()
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
    numeric = {i for i, h in enumerate(headings) if h not in ("environment", "op", "dtype", "fastest", "next fastest")}
    tally = backend_tally(table)
    tally_html = (
        "<p><b>Which backend is fastest?</b> Cases (op, dtype, threads) each backend is fastest and second in:</p>"
        + _table_html(tally)
        if len(tally)
        else ""
    )
    return notes + tally_html + legend + _rows_html(headings, rows, numeric)


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
    table = change.table
    headings = [
        "op",
        "implementation",
        "dtype",
        "size",
        "threads",
        "verdict",
        "time ratio",
        "bits",
        "verdict before",
        "verdict now",
    ]
    rows = [
        [
            _op_link(r.op),
            _code(r.implementation),
            _text(r.dtype),
            _number(r.size),
            _number(r.threads),
            _text(r.verdict),
            _number(r.time_ratio),
            _text(r.bits),
            _verdict_html(r.verdict_base or ""),
            _verdict_html(r.verdict_new or ""),
        ]
        for r in table.itertuples()
    ]
    return lead + _rows_html(headings, rows)


def _selftest_html(saved: SavedSelftest | None) -> str:
    if saved is None:
        return (
            "<p>No saved self-test: <code>make selftest</code> writes <code>results/selftest.json</code> "
            "(<code>opbench selftest --small --json</code>, minutes).</p>"
        )
    origin = f" at commit {saved.commit[:8]}" if saved.commit else ""
    where = "the copy kept in the repository (reports/selftest.json)" if saved.path == KEPT else str(saved.path)
    headings = ["op", "dtype", "condition", "size", "false alarms", "caught / must catch", "smallest caught"]
    rows = [
        [
            _op_link(c["op"]),
            c["dtype"],
            html.escape(str(c["condition"])),
            _number(c["size"]),
            str(len(c["false_alarms"])),
            f"{c['caught']}/{c['must_catch']}",
            html.escape(
                "-"
                if not c.get("smallest_caught")
                else f"{c['smallest_caught']['error_ulp']:.3g} ulp ({c['smallest_caught']['mutant']})"
            ),
        ]
        for c in saved.cases
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
        + f"<details><summary>per op ({len(rows)} cases)</summary>{_rows_html(headings, rows)}</details>"
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


def _environments_html(data: ReportData) -> str:
    newest = data.frame.sort_values("commit_date").drop_duplicates(["machine", "env_name"], keep="last")
    columns = [
        "machine",
        "env_name",
        "commit_hash",
        "commit_date",
        "blas",
        "blas_threads",
        "torch_version",
        "numpy_version",
    ]
    rows = [
        [
            html.escape(str(r.get(c, "")))[: 12 if c == "commit_hash" else None]
            if c != "blas"
            else html.escape(str(r.get(c, "")))
            for c in columns
        ]
        for r in newest.to_dict("records")
    ]
    table = _rows_html(
        ["machine", "environment", "newest commit", "date", "BLAS", "BLAS threads", "torch", "numpy"], rows
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
