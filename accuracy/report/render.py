"""Write a report directory: index.html (self-contained), report.md and the CSV/Parquet data.

`write_report` is the one entry point: the `report` command and the end of `opbench run` both
call it, so a run and a later re-render give the same files. The analysis is built once
(accuracy/report/analysis.py) and drawn as HTML (html_page.py) and Markdown (markdown_page.py),
section by section from the one list SECTIONS: the answer tables (accuracy/report/answers.py),
then one section per op run, then environments and history.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from accuracy.core.errors import OpbenchError
from accuracy.core.files import atomic_directory
from accuracy.report import html_page, markdown_page
from accuracy.report.analysis import ReportData, analyse, backend_tally, without_value
from accuracy.report.changes import DEFAULT_MAX_PLOTS, DEFAULT_THRESHOLD
from accuracy.report.export import export_frame
from accuracy.report.tidy import tidy, write_data_dictionary
from accuracy.report.trends import DEFAULT_NONDETERMINISTIC

__all__ = ["SECTIONS", "backend_tally", "render_html", "render_markdown", "without_value", "write_report"]


@dataclass(frozen=True)
class Section:
    """One section of the report: its anchor in the page, its HTML (heading, content), and its
    Markdown block, or None where report.md leaves it to the page (plots, long tables)."""

    key: str
    html: Callable[[ReportData], tuple[str, str]]
    markdown: Callable[[ReportData], str] | None


SECTIONS = (
    Section("verdicts", html_page.verdicts, markdown_page.verdicts),
    Section("discrepancies", html_page.discrepancies, markdown_page.discrepancies),
    Section("reproducibility", html_page.reproducibility, markdown_page.reproducibility),
    Section("speed", html_page.speed, markdown_page.speed),
    Section("changes", html_page.changes, markdown_page.changes),
    Section("self-test", html_page.selftest, markdown_page.selftest),
    Section("ops", html_page.ops, None),
    Section("environments", html_page.environments, None),
    Section("machines", html_page.machines, markdown_page.machines),
    Section("history", html_page.history, markdown_page.history),
    Section("warnings", html_page.warnings, markdown_page.warnings),
)


def render_html(data: ReportData) -> str:
    return html_page.page(data, [(section.key, *section.html(data)) for section in SECTIONS])


def render_markdown(data: ReportData) -> str:
    return markdown_page.page(data, [section.markdown(data) for section in SECTIONS if section.markdown])


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
    data = analyse(
        results_dir,
        name,
        threshold=threshold,
        nondeterministic=nondeterministic,
        max_plots=max_plots,
        on_warning=on_warning,
    )
    target = Path(out_dir) / name
    markdown, page = render_markdown(data), render_html(data)
    # built in a temporary directory that replaces the old report whole: a full disk or a kill
    # leaves the old report as it was, never the old one mixed with a cut-off index.html
    with atomic_directory(target) as building:
        export_frame(tidy(data.frame), building / "results")
        write_data_dictionary(building)
        data.changes("regression").to_csv(building / "regressions.csv", index=False)
        data.changes("improvement").to_csv(building / "improvements.csv", index=False)
        data.steps.to_csv(building / "steps.csv", index=False)
        data.comparisons.to_csv(building / "comparisons.csv", index=False)
        (building / "report.md").write_text(markdown, encoding="utf-8")
        (building / "index.html").write_text(page, encoding="utf-8")
    return target / "index.html"
