"""What each asv result measures, by the metric table (never by substring), and the GFLOP/s
that timings imply.

A benchmark's metric comes from its method name alone (`time_op` -> time, `track_max_ulp` ->
max_ulp); a method the table does not know is "other". GFLOP/s rows are derived from `time_op`'s
own statistics and the op's flop count, so throughput and time can never disagree.
"""

from __future__ import annotations

import math
from functools import cache

import pandas as pd

from accuracy.judge.metric_table import BY_NAME, METRICS, benchmark_class_name, metric_for

HIGHER_IS_BETTER = frozenset(m.name for m in METRICS if m.higher_is_better)
NOISY = frozenset(m.name for m in METRICS if not m.deterministic)
UNKNOWN = "other"


def metric_of(benchmark: str) -> str:
    """The metric of one asv benchmark (`bench_products.Linear.track_max_ulp` -> "max_ulp")."""
    metric = metric_for(benchmark.rsplit(".", 1)[-1])
    return metric.name if metric else UNKNOWN


def metric_column(frame: pd.DataFrame) -> pd.Series:
    """`metric_of` for every row, computed once per distinct benchmark."""
    return frame["benchmark"].map({name: metric_of(name) for name in frame["benchmark"].unique()})


def higher_is_better(metric: pd.Series) -> pd.Series:
    """Boolean per row: does a larger value mean an improvement?"""
    return metric.isin(HIGHER_IS_BETTER)


@cache
def _flops_by_class() -> dict:
    from accuracy.catalog.registry import all_ops

    return {benchmark_class_name(op.name): op.flops for op in all_ops() if op.flops}


def flop_count(benchmark: str, size) -> float:
    """The op's flop count at `size` for a benchmark of class `<module>.<Op>.<method>`; NaN if unknown."""
    parts = benchmark.rsplit(".", 2)
    flops = _flops_by_class().get(parts[-2]) if len(parts) == 3 else None
    try:
        return float(flops(int(size))) if flops else math.nan
    except (TypeError, ValueError):
        return math.nan


def with_gflops(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame plus one GFLOP/s row per timing of an op with a flop count.

    The value and each time statistic become flops / seconds; lower and upper statistics swap
    ends, since the slowest time is the lowest rate.
    """
    if "size" not in frame.columns:
        return frame
    times = frame.loc[(frame["metric"] == "time") & ~frame["failed"]]  # a failure is reported once, as a time
    keys = times[["benchmark", "size"]].drop_duplicates()
    keys["flops"] = [flop_count(b, s) for b, s in zip(keys["benchmark"], keys["size"], strict=False)]
    rates = times.merge(keys, on=["benchmark", "size"], how="left")
    rates = rates.loc[rates["flops"].notna()].copy()
    if rates.empty:
        return frame
    gflops = rates.pop("flops") / 1e9
    for low, high in (("value", "value"), ("ci_99_a", "ci_99_b"), ("q_25", "q_75")):
        seconds_low, seconds_high = (pd.to_numeric(rates[c], errors="coerce") for c in (low, high))
        rates[low], rates[high] = gflops / seconds_high, gflops / seconds_low
    rates["metric"], rates["unit"], rates["kind"] = "gflops", BY_NAME["gflops"].unit, "derived"
    if "samples" in rates:
        rates["samples"] = None  # seconds; the rate is judged through time_op, never on its own
    rates["benchmark"] = [name.rsplit(".", 1)[0] + ".gflops" for name in rates["benchmark"]]
    return pd.concat([frame, rates], ignore_index=True)
