"""What a report shows, computed once from the results and drawn twice (accuracy/report/html_page.py
and markdown_page.py): the answers, the steps, environments and machines side by side, and the
results without a value."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from accuracy.core.errors import OpbenchError
from accuracy.report.answers import Answers, answer
from accuracy.report.changes import DEFAULT_MAX_PLOTS, DEFAULT_THRESHOLD
from accuracy.report.environments import compare_across, latest_commit
from accuracy.report.fleet import MachinePair, machine_pairs
from accuracy.report.load import load_results
from accuracy.report.selftest_saved import SavedSelftest, find_selftest
from accuracy.report.trends import DEFAULT_NONDETERMINISTIC, find_steps

MAX_TABLE_ROWS = 200  # beyond this the HTML/Markdown tables point to the CSV instead

STEP_TABLE_COLUMNS = [
    "benchmark",
    "params",
    "env_name",
    "machine",
    "prev_commit",
    "commit",
    "old_value",
    "new_value",
    "ratio",
    "unit",
    "method",
]


@dataclass
class ReportData:
    """Everything a report shows, computed once and rendered twice (HTML and Markdown)."""

    name: str
    results_dir: Path
    frame: pd.DataFrame
    steps: pd.DataFrame
    comparisons: pd.DataFrame
    warnings: list[str]
    answers: Answers
    selftest: SavedSelftest | None
    machines: tuple[list[MachinePair], list[str]] = ([], [])  # a fleet: each machine beside the first
    max_plots: int = DEFAULT_MAX_PLOTS  # the history's step figures drawn at most

    def changes(self, kind: str) -> pd.DataFrame:
        rows = self.steps.loc[self.steps["change"] == kind].assign(
            prev_commit=lambda f: f["prev_commit_hash"].str[:8], commit=lambda f: f["commit_hash"].str[:8]
        )
        return rows[STEP_TABLE_COLUMNS]


def analyse(
    results_dir: str | Path,
    name: str,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    nondeterministic: Iterable[str] = DEFAULT_NONDETERMINISTIC,
    max_plots: int = DEFAULT_MAX_PLOTS,
    on_warning: Callable[[str], None] | None = None,
) -> ReportData:
    """Load `results_dir` and build everything report `name` shows; the loader's warnings go to
    `on_warning` as they are found."""
    if threshold <= 1:
        raise OpbenchError(f"threshold {threshold} must be greater than 1 (e.g. 1.10 for 10%)")
    loaded = load_results(results_dir)
    if on_warning:
        for line in loaded.warnings:
            on_warning(line)
    frame = loaded.frame
    return ReportData(
        name=name,
        results_dir=Path(results_dir),
        frame=frame,
        steps=find_steps(frame, threshold=threshold, nondeterministic=nondeterministic),
        comparisons=_comparisons(frame),
        warnings=[*loaded.warnings, *failure_warnings(frame)],
        answers=answer(frame, Path(results_dir)),
        selftest=find_selftest(Path(results_dir)),
        machines=machine_pairs(frame, Path(results_dir)),
        max_plots=max_plots,
    )


def _comparisons(frame: pd.DataFrame) -> pd.DataFrame:
    """Environments side by side at the newest commit (empty when there is only one)."""
    if frame["env_name"].nunique() < 2:
        return pd.DataFrame()
    return compare_across(frame, by="env_name", commit=latest_commit(frame))


def summary(data: ReportData) -> list[tuple[str, object]]:
    """The report's opening list: what the results hold, in numbers."""
    frame = data.frame
    return [
        ("Results directory", str(data.results_dir)),
        ("Machines", ", ".join(sorted(frame["machine"].unique()))),
        ("Environments", ", ".join(sorted(frame["env_name"].unique()))),
        ("Commits", frame["commit_hash"].nunique()),
        ("Benchmarks", frame["benchmark"].nunique()),
        ("Results", len(frame)),
        ("Results without a value", _without_value_line(frame)),
        ("Regressions", int((data.steps["change"] == "regression").sum())),
        ("Improvements", int((data.steps["change"] == "improvement").sum())),
        ("Skipped files / warnings", len(data.warnings)),
    ]


def without_value(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Results without a value, by why: asv records a benchmark that raised or timed out as None
    (`error`), a skipped parameter combination as NaN; a bound-ratio track is NaN, too, where the
    case ran but the worst-case bound is vacuous (infinite) at that size, and the verdict rests on
    the other tiers."""
    missing = frame.loc[frame["failed"]]
    error = missing["error"].astype(bool) if "error" in missing else pd.Series(False, index=missing.index)
    case = ["machine", "env_name", "commit_hash", "params"]
    owner = frame["benchmark"].str.rsplit(".", n=1).str[0]
    ran = frame.loc[(frame["metric"] == "verdict_tier") & ~frame["failed"], case].assign(_owner=owner)
    ran_keys = set(map(tuple, ran[[*case, "_owner"]].to_numpy().tolist()))
    keys = missing[case].assign(_owner=owner.loc[missing.index])[[*case, "_owner"]].to_numpy().tolist()
    vacuous = (
        (missing["metric"] == "bound_ratio")
        & ~error
        & pd.Series([tuple(k) in ran_keys for k in keys], index=missing.index)
    )
    return {
        "failed (an exception or a timeout; asv's log has the traceback)": missing.loc[error],
        "vacuous bound ratios (no finite worst-case bound; the verdict uses the other tiers)": missing.loc[vacuous],
        "skipped parameter combinations (not applicable, e.g. a dtype an implementation lacks)": missing.loc[
            ~error & ~vacuous
        ],
    }


def _without_value_line(frame: pd.DataFrame) -> str:
    parts = [f"{len(rows)} {why}" for why, rows in without_value(frame).items() if len(rows)]
    return f"{int(frame['failed'].sum())}" + (f": {'; '.join(parts)}" if parts else "")


def failure_warnings(frame: pd.DataFrame) -> list[str]:
    """Benchmarks that really failed belong in the warnings, by name."""
    failed = next(iter(without_value(frame).values()))
    return [
        f"{name}: failed for {len(rows)} parameter combinations (see asv's log)"
        for name, rows in failed.groupby("benchmark")
    ]


def integer_columns(table: pd.DataFrame) -> pd.DataFrame:
    """Float columns that hold whole numbers only (sizes, threads) print as integers: 65536, not 6.554e+04."""
    table = table.copy()
    for column in table.columns:
        values = table[column]
        if pd.api.types.is_float_dtype(values) and values.notna().any():
            finite = values.dropna()
            if (finite == finite.round()).all() and finite.abs().max() < 2**53:
                table[column] = values.astype("Int64")
    return table


def backend_tally(speed: pd.DataFrame) -> pd.DataFrame:
    """Which backend is fastest: per backend, how many op/dtype/thread cases it is fastest in
    (and second in), over every op, not only GEMM."""
    speed = speed.loc[speed["fastest"].astype(bool)]  # none is crowned where the machine was busy
    backend = speed["fastest"].astype(str).str.split(":").str[0]
    second = speed["runner_up"].astype(str).str.split(":").str[0]
    tally = pd.DataFrame(
        {"fastest": backend.value_counts(), "second": second.loc[speed["runner_up"].astype(bool)].value_counts()}
    ).fillna(0)
    tally = tally.astype(int).sort_values(["fastest", "second"], ascending=False)
    return tally.rename_axis("backend").reset_index()
