"""The metric table drives the asv tracks, the report's classification, compare and the CLI."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accuracy.metric_table import ACCURACY, METRICS, cli_columns, compared, metric_for, tracks
from accuracy.report.changes import DEFAULT_THRESHOLD, timing_change
from accuracy.report.compare import ACCURACY_SLOTS


def test_every_asv_track_is_lower_is_better_and_named_once():
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names))
    assert all(not m.higher_is_better for m in tracks())
    assert all(metric_for(m.track) is m for m in tracks())
    assert metric_for("time_op").name == "time" and metric_for("track_unknown") is None


def test_every_track_reads_a_field_the_suite_measures_and_compare_and_cli_read_the_table():
    from benchmarks import bench_products

    bench = bench_products.Dot()
    bench.setup("numpy:np.dot@float32", 64, 1)
    try:
        measured = bench._measured()
        for metric in tracks():
            value = getattr(bench, metric.track)()
            assert value == value or metric.name in ("bound_ratio", "typical_ratio")  # NaN only where vacuous
            if metric.field:
                assert metric.field in measured
    finally:
        bench.teardown("numpy:np.dot@float32", 64, 1)
    assert ACCURACY_SLOTS == tuple(m.name for m in compared(ACCURACY))
    assert [m.label for m in cli_columns()] == ["max ulp", "max rel", "bound ratio", "typical ratio", "flags >= ulp"]


def test_a_new_entry_becomes_an_asv_track(monkeypatch):
    """Adding a metric is one entry: the generated suite grows the track from it."""
    import importlib

    import accuracy.metric_table as table
    from accuracy.metric_table import Metric

    extra = Metric("p99_ulp", "ulp", "99th percentile of the ulp error.", ACCURACY, column="p99 ulp", field="p99_ulp",
                   explain=True)
    monkeypatch.setattr(table, "METRICS", (*table.METRICS, extra))
    monkeypatch.setattr(table, "BY_TRACK", {**table.BY_TRACK, extra.track: extra})
    import benchmarks.common as common

    try:
        common = importlib.reload(common)
        assert common._OpBenchmark.track_p99_ulp.unit == "ulp"
        assert metric_for("track_p99_ulp") is extra
        assert "p99 ulp" in [m.column for m in table.cli_columns()]
    finally:
        monkeypatch.undo()
        importlib.reload(common)


ci = st.floats(1e-6, 1.0)


@given(old=ci, new=ci, spread=st.floats(1.0, 1.5))
def test_timing_change_never_calls_overlapping_or_wide_intervals_slower(old, new, spread):
    old_ci, new_ci = (old / spread, old * spread), (new / spread, new * spread)
    change = timing_change(old, new, old_ci, new_ci)
    overlap = not (new_ci[0] > old_ci[1] or new_ci[1] < old_ci[0])
    if overlap:
        assert change in ("same", "inconclusive")
    if change == "slower":
        assert new / old >= DEFAULT_THRESHOLD
    if spread * spread > DEFAULT_THRESHOLD and change == "same":
        pytest.fail("an interval wider than the threshold cannot show the absence of a change")


@pytest.mark.parametrize("interval", [None, (math.nan, 1.0), (-math.inf, math.inf), (0.0, 1.0)])
def test_a_timing_without_a_finite_interval_is_inconclusive(interval):
    assert timing_change(1.0, 3.0, (0.99, 1.01), interval) == "inconclusive"
