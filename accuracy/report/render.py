"""Write a report directory: index.html (self-contained), report.md and the CSV/Parquet data.

`write_report` is the one entry point: the `report` command and the end of `opbench run` both
call it, so a run and a later re-render give the same files.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from accuracy.errors import OpbenchError
from accuracy.report import plots
from accuracy.report.environments import compare_across, latest_commit
from accuracy.report.export import export_frame
from accuracy.report.load import load_results
from accuracy.report.changes import DEFAULT_THRESHOLD
from accuracy.report.tidy import tidy, write_data_dictionary
from accuracy.report.trends import DEFAULT_NONDETERMINISTIC, find_steps

DEFAULT_MAX_PLOTS = 12
MAX_TABLE_ROWS = 200  # beyond this the HTML/Markdown tables point to the CSV instead
STEP_TABLE_COLUMNS = ["benchmark", "params", "env_name", "machine", "prev_commit", "commit",
                      "old_value", "new_value", "ratio", "unit", "method"]

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { border-bottom: 2px solid #444; } h2 { margin-top: 2em; }
table { border-collapse: collapse; font-size: 12px; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: left; }
th { background: #eee; } tr:nth-child(even) { background: #fafafa; }
.regression td { background: #fde8e8; } .improvement td { background: #e8f7e8; }
figure { display: inline-block; margin: 0.5em; } figcaption { font-size: 11px; max-width: 480px; }
img { max-width: 560px; } .warnings li { font-family: monospace; font-size: 12px; }
"""


@dataclass
class ReportData:
    """Everything a report shows, computed once and rendered twice (HTML and Markdown)."""

    name: str
    results_dir: Path
    frame: pd.DataFrame
    steps: pd.DataFrame
    comparisons: pd.DataFrame
    warnings: list[str]

    def changes(self, kind: str) -> pd.DataFrame:
        rows = self.steps.loc[self.steps["change"] == kind].assign(
            prev_commit=lambda f: f["prev_commit_hash"].str[:8], commit=lambda f: f["commit_hash"].str[:8]
        )
        return rows[STEP_TABLE_COLUMNS]


def write_report(
    results_dir: str | Path = "results",
    out_dir: str | Path = "reports",
    name: str = "latest",
    *,
    threshold: float = DEFAULT_THRESHOLD,
    nondeterministic: Iterable[str] = DEFAULT_NONDETERMINISTIC,
    max_plots: int = DEFAULT_MAX_PLOTS,
    on_warning: Callable[[str], None] | None = None,
) -> Path:
    """Analyse `results_dir` and write `<out_dir>/<name>/`; return the path of its index.html."""
    if not name or Path(name).name != name or name in (".", ".."):
        raise OpbenchError(f"report name {name!r} must be a plain directory name")
    if threshold <= 1:
        raise OpbenchError(f"threshold {threshold} must be greater than 1 (e.g. 1.10 for 10%)")
    loaded = load_results(results_dir)
    for line in loaded.warnings if on_warning else ():
        on_warning(line)
    frame = loaded.frame
    data = ReportData(
        name=name,
        results_dir=Path(results_dir),
        frame=frame,
        steps=find_steps(frame, threshold=threshold, nondeterministic=nondeterministic),
        comparisons=_comparisons(frame),
        warnings=loaded.warnings,
    )
    target = Path(out_dir) / name
    try:
        target.mkdir(parents=True, exist_ok=True)
        export_frame(tidy(frame), target / "results")
        write_data_dictionary(target)
        data.changes("regression").to_csv(target / "regressions.csv", index=False)
        data.changes("improvement").to_csv(target / "improvements.csv", index=False)
        data.steps.to_csv(target / "steps.csv", index=False)
        data.comparisons.to_csv(target / "comparisons.csv", index=False)
        (target / "report.md").write_text(render_markdown(data), encoding="utf-8")
        (target / "index.html").write_text(render_html(data, max_plots), encoding="utf-8")
    except OSError as exc:
        raise OpbenchError(f"cannot write report to {target}: {exc.strerror or exc}") from exc
    return target / "index.html"


def _comparisons(frame: pd.DataFrame) -> pd.DataFrame:
    """Environments side by side at the newest commit (empty when there is only one)."""
    if frame["env_name"].nunique() < 2:
        return pd.DataFrame()
    return compare_across(frame, by="env_name", commit=latest_commit(frame))


def _newest(frame: pd.DataFrame) -> str:
    return latest_commit(frame)[:8]


def _without_commit(comparisons: pd.DataFrame) -> pd.DataFrame:
    """The commit is in the heading; the CSV keeps the full hash column."""
    return comparisons.drop(columns="commit_hash", errors="ignore")


def _summary(data: ReportData) -> list[tuple[str, object]]:
    frame = data.frame
    return [
        ("Results directory", str(data.results_dir)),
        ("Machines", ", ".join(sorted(frame["machine"].unique()))),
        ("Environments", ", ".join(sorted(frame["env_name"].unique()))),
        ("Commits", frame["commit_hash"].nunique()),
        ("Benchmarks", frame["benchmark"].nunique()),
        ("Results", len(frame)),
        ("Failed results", int(frame["failed"].sum())),
        ("Regressions", int((data.steps["change"] == "regression").sum())),
        ("Improvements", int((data.steps["change"] == "improvement").sum())),
        ("Skipped files / warnings", len(data.warnings)),
    ]


def _table_html(table: pd.DataFrame, css_class: str = "") -> str:
    if table.empty:
        return "<p>None.</p>"
    note = f"<p>First {MAX_TABLE_ROWS} of {len(table)} rows; see the CSV for all.</p>" if len(table) > MAX_TABLE_ROWS else ""
    body = table.head(MAX_TABLE_ROWS).to_html(index=False, na_rep="", float_format="{:.4g}".format, border=0)
    if css_class:
        body = body.replace("<tr>", f'<tr class="{css_class}">')
    return note + body


def _figures_html(figures: list[tuple[str, str]]) -> str:
    if not figures:
        return "<p>No data for these plots.</p>"
    return "\n".join(
        f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{png}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        for caption, png in figures
    )


def render_html(data: ReportData, max_plots: int = DEFAULT_MAX_PLOTS) -> str:
    title = f"opbench report: {data.name}"
    summary = pd.DataFrame(_summary(data), columns=["", "value"])
    warnings = "".join(f"<li>{html.escape(line)}</li>" for line in data.warnings) or "<li>None.</li>"
    sections = [
        ("Summary", _table_html(summary)),
        ("Regressions", _table_html(data.changes("regression"), "regression")),
        ("Improvements", _table_html(data.changes("improvement"), "improvement")),
        (f"Environments at the newest commit ({_newest(data.frame)})", _table_html(_without_commit(data.comparisons))),
        ("History of the largest steps", _figures_html(plots.history(data.frame, data.steps, max_plots))),
        ("Time vs size", _figures_html(plots.size_scaling(data.frame, max_plots))),
        ("Accuracy per implementation and dtype", _figures_html(plots.error_bars(data.frame, max_plots))),
        ("Skipped files and warnings", f'<ul class="warnings">{warnings}</ul>'),
    ]
    body = "\n".join(f"<h2>{heading}</h2>\n{content}" for heading, content in sections)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head>\n"
        f"<body><h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n"
    )


def _table_markdown(table: pd.DataFrame) -> str:
    if table.empty:
        return "None."
    note = f"\n\nFirst {MAX_TABLE_ROWS} of {len(table)} rows; see the CSV for all." if len(table) > MAX_TABLE_ROWS else ""
    return table.head(MAX_TABLE_ROWS).to_markdown(index=False, floatfmt=".4g") + note


def render_markdown(data: ReportData) -> str:
    summary = "\n".join(f"- {key}: {value}" for key, value in _summary(data))
    warnings = "\n".join(f"- `{line}`" for line in data.warnings) or "None."
    return (
        f"# opbench report: {data.name}\n\n{summary}\n\n"
        f"## Regressions\n\n{_table_markdown(data.changes('regression'))}\n\n"
        f"## Improvements\n\n{_table_markdown(data.changes('improvement'))}\n\n"
        f"## Environments at the newest commit ({_newest(data.frame)})\n\n"
        f"{_table_markdown(_without_commit(data.comparisons))}\n\n"
        f"## Skipped files and warnings\n\n{warnings}\n\nPlots: see index.html.\n"
    )
