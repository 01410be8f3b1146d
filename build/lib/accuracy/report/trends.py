"""Find the commits where a series (one benchmark, parameter set, environment, machine) stepped.

Accuracy tracks are deterministic, so any change is real. Timings are noisy: a step is what
`accuracy.report.changes.timing_change` calls slower or faster (asv's test AND the ratio
threshold); where there are no intervals (and for tracks marked nondeterministic) medians of the
k points either side are compared instead. Output digests are no quality and make no steps.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

import numpy as np
import pandas as pd

from accuracy.judge.metric_table import IDENTITY, compared
from accuracy.report.changes import DEFAULT_THRESHOLD, FASTER, SLOWER, Timing, beyond, timing_change
from accuracy.report.load import SERIES_KEYS
from accuracy.report.measures import NOISY, higher_is_better

DEFAULT_WINDOW = 3
# tracks a user marks noisy on top of the metric table's own (e.g. a plugin's timing-derived track)
DEFAULT_NONDETERMINISTIC: tuple[str, ...] = ()

STEP_COLUMNS = [
    *SERIES_KEYS,
    "kind",
    "metric",
    "unit",
    "change",
    "method",
    "prev_commit_hash",
    "commit_hash",
    "prev_commit_date",
    "commit_date",
    "old_value",
    "new_value",
    "ratio",
]


def find_steps(
    frame: pd.DataFrame,
    threshold: float = DEFAULT_THRESHOLD,
    nondeterministic: Iterable[str] = DEFAULT_NONDETERMINISTIC,
    window: int = DEFAULT_WINDOW,
) -> pd.DataFrame:
    """Regressions and improvements, one row per step, with the commit that introduced it."""
    digests = [m.name for m in compared(IDENTITY)]  # bits changing is no regression or improvement
    ordered = frame.loc[~frame["failed"] & ~frame["metric"].isin(digests)].sort_values(
        [*SERIES_KEYS, "commit_date", "started_at"]
    )
    timing = [c for c in ("value", "ci_99_a", "ci_99_b", "repeat", "samples") if c in ordered.columns]
    series = ordered.groupby(SERIES_KEYS, sort=False)
    prev = series[[*timing, "commit_hash", "commit_date"]].shift(1)
    noisy = _is_noisy(ordered, nondeterministic)
    has_ci = ordered[["ci_99_a", "ci_99_b"]].notna().all(axis=1) & prev[["ci_99_a", "ci_99_b"]].notna().all(axis=1)

    steps = ordered.assign(
        prev_commit_hash=prev["commit_hash"],
        prev_commit_date=prev["commit_date"],
        old_value=prev["value"],
        new_value=ordered["value"],
    )
    method = np.select([~noisy, has_ci], ["exact", "ci"], default="median")
    steps["method"] = method
    is_step = pd.Series(False, index=ordered.index)

    exact = method == "exact"
    is_step[exact] = prev["value"][exact].notna() & (ordered["value"][exact] != prev["value"][exact])

    ci = method == "ci"
    if ci.any():
        is_step[ci] = np.array(
            [
                timing_change(Timing.of(**before), Timing.of(**after), threshold) in (SLOWER, FASTER)
                for before, after in zip(
                    prev.loc[ci, timing].to_dict("records"), ordered.loc[ci, timing].to_dict("records"), strict=False
                )
            ],
            dtype=bool,
        )

    median = method == "median"
    if median.any():
        window_steps = _window_steps(ordered.loc[median], threshold, window)
        steps.loc[window_steps.index, ["old_value", "new_value"]] = window_steps[["old_value", "new_value"]]
        is_step[median] = window_steps["is_step"]

    steps = steps.loc[is_step].copy()
    steps["ratio"] = steps["new_value"] / steps["old_value"]
    worse = (steps["new_value"] > steps["old_value"]) != higher_is_better(steps["metric"])
    steps["change"] = np.where(worse, "regression", "improvement")
    return steps[STEP_COLUMNS].reset_index(drop=True)


def _is_noisy(frame: pd.DataFrame, patterns: Iterable[str]) -> pd.Series:
    """Noisy metrics by the metric table (timings, GFLOP/s), plus tracks matching a pattern."""
    patterns = list(patterns)
    names = pd.Series(frame["benchmark"].unique())
    marked = names[names.map(lambda name: any(fnmatch.fnmatch(name.lower(), p.lower()) for p in patterns))]
    return frame["metric"].isin(NOISY) | frame["benchmark"].isin(marked)


def _window_steps(ordered: pd.DataFrame, threshold: float, window: int) -> pd.DataFrame:
    """Median of the previous `window` points vs the next `window` (this one included).

    Around a real step several neighbouring positions pass the median test, so within each run
    of candidates only the one where the window means differ most is kept: that is the commit
    where the level actually changed.
    """
    before_median, after_median, before_mean, after_mean = (
        _rolling(ordered, how, window, reverse)
        for how, reverse in (("median", False), ("median", True), ("mean", False), ("mean", True))
    )
    keys = [ordered[key] for key in SERIES_KEYS]
    old = before_median.groupby(keys, sort=False).shift(1)
    old_mean = before_mean.groupby(keys, sort=False).shift(1)
    candidate = beyond(after_median / old, threshold)
    score = np.abs(np.log(after_mean / old_mean)).where(candidate)
    run = (candidate != candidate.groupby(keys, sort=False).shift(1)).cumsum()
    is_peak = candidate & (score == score.groupby([*keys, run], sort=False).transform("max"))
    # Two equal scores in one run: keep the earliest, the first commit at the new level.
    first_peak = is_peak & (is_peak.groupby([*keys, run], sort=False).cumsum() == 1)
    return pd.DataFrame({"old_value": old, "new_value": after_median, "is_step": first_peak})


def _rolling(ordered: pd.DataFrame, how: str, window: int, reverse: bool) -> pd.Series:
    """Per-series rolling statistic over `window` points ending (or, reversed, starting) here."""
    data = ordered.iloc[::-1] if reverse else ordered
    rolled = getattr(data.groupby(SERIES_KEYS, sort=False)["value"].rolling(window, min_periods=1), how)()
    return rolled.droplevel(list(range(len(SERIES_KEYS)))).reindex(ordered.index)
