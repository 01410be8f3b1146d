"""What each benchmark measures, and therefore which direction of change is worse.

This is the one place that decides "higher is better": every other module asks here, so a
new metric only needs a new pattern below.
"""

from __future__ import annotations

import pandas as pd

# (metric, substrings looked for in the benchmark name and unit, lower-cased). Order matters:
# the first match wins, so the specific patterns come before the generic "rel" one.
_METRIC_PATTERNS = (
    ("gflops", ("gflop",)),
    ("ulp", ("ulp",)),
    ("bound_ratio", ("bound",)),
    ("nonfinite", ("nonfinite", "non_finite")),
    ("rel_error", ("rel",)),
)

# Throughput rises when an op gets faster; every other metric (time, errors) rises when it gets worse.
HIGHER_IS_BETTER = frozenset({"gflops"})


def metric_of(kind: str, benchmark: str, unit: str) -> str:
    """Name the metric of one benchmark: "time", "gflops", "ulp", ... or "other"."""
    if kind == "time":
        return "time"
    text = f"{benchmark} {unit}".lower()
    for metric, needles in _METRIC_PATTERNS:
        if any(needle in text for needle in needles):
            return metric
    return "other"


def metric_column(frame: pd.DataFrame) -> pd.Series:
    """`metric_of` for every row, computed once per distinct (kind, benchmark, unit)."""
    keys = frame[["kind", "benchmark", "unit"]].astype(str)
    distinct = keys.drop_duplicates()
    distinct["metric"] = [metric_of(*row) for row in distinct.itertuples(index=False)]
    return keys.merge(distinct, on=["kind", "benchmark", "unit"], how="left")["metric"].set_axis(
        frame.index
    )


def higher_is_better(metric: pd.Series) -> pd.Series:
    """Boolean per row: does a larger value mean an improvement?"""
    return metric.isin(HIGHER_IS_BETTER)
