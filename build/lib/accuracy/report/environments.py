"""Side-by-side values of the same commit across environments or machines.

Answers "is MKL faster than OpenBLAS here?" at one commit, as ratios against a chosen baseline,
where trends.py answers "did this series change over time?".
"""

from __future__ import annotations

import pandas as pd

from accuracy.core.errors import OpbenchError

COMPARABLE = ("env_name", "machine")


def compare_across(
    frame: pd.DataFrame, by: str = "env_name", baseline: str | None = None, commit: str | None = None
) -> pd.DataFrame:
    """One column per `by` value plus `<other>/<baseline>` ratio columns; one row per result.

    `commit` restricts to one commit hash (default: every commit); `baseline` defaults to the
    first `by` value in sorted order.
    """
    if by not in COMPARABLE:
        raise OpbenchError(f"can only compare across {' or '.join(COMPARABLE)}, not {by!r}")
    if commit is not None:
        frame = frame.loc[frame["commit_hash"] == commit]
    others = [column for column in COMPARABLE if column != by]
    index = ["commit_hash", *others, "benchmark", "params", "metric", "unit"]
    table = frame.pivot(index=index, columns=by, values="value")
    names = sorted(table.columns)
    baseline = names[0] if baseline is None else baseline
    if baseline not in names:
        raise OpbenchError(f"baseline {baseline!r} not among {by} values: {', '.join(names)}")
    ratios = table[names].div(table[baseline], axis=0).drop(columns=baseline)
    ratios.columns = [f"{name}/{baseline}" for name in ratios.columns]
    return pd.concat([table[names], ratios], axis=1).reset_index().rename_axis(columns=None)


def latest_commit(frame: pd.DataFrame) -> str:
    """The newest commit by commit date: the one a report compares environments at."""
    return frame.loc[frame["commit_date"].idxmax(), "commit_hash"]
