"""The metric table drives the asv tracks, the report's classification, compare and the CLI."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.judge.metric_table import ACCURACY, METRICS, cli_columns, compared, metric_for, tracks
from accuracy.report.changes import DEFAULT_THRESHOLD, Timing, timing_change
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
    assert tuple(m.name for m in compared(ACCURACY)) == ACCURACY_SLOTS
    assert [m.label for m in cli_columns()] == ["max ulp", "max rel", "bound ratio", "typical ratio", "flags >= ulp"]


def test_a_new_entry_becomes_an_asv_track(monkeypatch):
    """Adding a metric is one entry: the generated suite grows the track from it."""
    import importlib

    import accuracy.judge.metric_table as table
    from accuracy.judge.metric_table import Metric

    extra = Metric(
        "p99_ulp", "ulp", "99th percentile of the ulp error.", ACCURACY, column="p99 ulp", field="p99_ulp", explain=True
    )
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


@settings(deadline=None, max_examples=300)  # a loaded machine must not fail a property test by time
@given(old=ci, new=ci, spread=st.floats(1.0, 1.5), repeat=st.integers(1, 12))
def test_timing_change_never_calls_an_unconfirmed_change_slower(old, new, spread, repeat):
    """Slower needs the ratio past the threshold AND asv's test (here: intervals that separate)."""
    before, after = (Timing(v, (v / spread, v * spread), repeat) for v in (old, new))
    change = timing_change(before, after)
    overlap = not (after.ci[0] > before.ci[1] or after.ci[1] < before.ci[0])
    if change == "slower":
        assert new / old >= DEFAULT_THRESHOLD and not overlap and repeat >= 2
    if repeat < 2 or (overlap and not 1 / DEFAULT_THRESHOLD < new / old < DEFAULT_THRESHOLD):
        assert change == "inconclusive"


def test_mann_whitney_on_samples_as_asv_computes_it():
    """Overlapping intervals, but 8 samples each entirely apart: asv's U test finds them different."""
    base = Timing(1.0, (0.5, 2.0), 8, tuple(1.0 + 0.01 * i for i in range(8)))
    new = Timing(1.5, (0.7, 3.0), 8, tuple(1.5 + 0.01 * i for i in range(8)))
    assert timing_change(base, new) == "slower" and timing_change(new, base) == "faster"
    assert timing_change(Timing(1.0, (0.5, 2.0), 8), Timing(1.5, (0.7, 3.0), 8)) == "inconclusive"


@pytest.mark.parametrize("interval", [None, (math.nan, 1.0), (-math.inf, math.inf)])
def test_a_timing_without_a_finite_interval_is_inconclusive(interval):
    assert timing_change(Timing(1.0, (0.99, 1.01), 10), Timing(3.0, interval, 10)) == "inconclusive"
