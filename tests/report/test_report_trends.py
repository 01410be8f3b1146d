"""Step detection and cross-environment comparison."""

import pandas as pd
import pytest
from fixtures_report import COMMITS, ENVS, GFLOPS, INJECTED, MKL, OPENBLAS, params_label

from accuracy.core.errors import OpbenchError
from accuracy.report.environments import compare_across
from accuracy.report.load import load_results
from accuracy.report.measures import metric_of
from accuracy.report.trends import find_steps


def test_finds_exactly_the_injected_regressions(shared_results):
    steps = find_steps(load_results(shared_results).frame)
    found = set(
        zip(
            steps["benchmark"],
            steps["env_name"],
            steps["params"],
            steps["commit_hash"],
            steps["prev_commit_hash"],
            strict=False,
        )
    )
    expected = {
        (name, env, params_label(combo), COMMITS[first], COMMITS[first - 1]) for name, env, combo, first, _ in INJECTED
    }
    # every timing step shows again in the GFLOP/s derived from the same samples, never on its own
    expected |= {(GFLOPS, *rest) for name, *rest in expected if name.endswith("time_linear")}
    assert found == expected
    assert (steps["change"] == "regression").all()
    ratios = {(b, p): r for b, p, r in zip(steps["benchmark"], steps["params"], steps["ratio"], strict=False)}
    for name, _, combo, _, factor in INJECTED:
        assert ratios[name, params_label(combo)] == pytest.approx(factor, rel=0.05)
        if name.endswith("time_linear"):
            assert ratios[GFLOPS, params_label(combo)] == pytest.approx(1 / factor, rel=0.05)
    assert dict(zip(steps["benchmark"], steps["method"], strict=False)) == {
        "linear.Linear.track_max_ulp": "exact",
        "linear.Linear.time_linear": "ci",
        GFLOPS: "ci",
    }


def test_higher_threshold_drops_the_timing_step(shared_results):
    steps = find_steps(load_results(shared_results).frame, threshold=1.7)
    assert "linear.Linear.time_linear" not in set(steps["benchmark"])
    assert "linear.Linear.track_max_ulp" in set(steps["benchmark"])


def _series(benchmark, kind, unit, values, ci_halfwidth=None):
    """A one-series frame shaped like load_results' output."""
    n = len(values)
    dates = pd.date_range("2026-01-01", periods=n, tz="UTC")
    frame = pd.DataFrame(
        {
            "machine": "m",
            "env_name": "e",
            "benchmark": benchmark,
            "params": "",
            "kind": kind,
            "unit": unit,
            "metric": metric_of(benchmark),
            "commit_hash": [f"c{i}" for i in range(n)],
            "commit_date": dates,
            "started_at": dates,
            "value": values,
            "failed": pd.isna(values),
        }
    )
    half = pd.Series(values) * (ci_halfwidth or float("nan"))
    return frame.assign(
        ci_99_a=frame["value"] - half, ci_99_b=frame["value"] + half, repeat=10 if ci_halfwidth else None
    )


def test_directions_time_faster_is_improvement_gflops_higher_is_improvement():
    faster = find_steps(_series("b.time_x", "time", "seconds", [2.0, 2.0, 1.0, 1.0], ci_halfwidth=0.01))
    assert list(faster["change"]) == ["improvement"] and list(faster["commit_hash"]) == ["c2"]
    more = _series("b.gflops", "derived", "GFLOP/s", [10.0, 10.1, 9.9, 20.0, 20.2, 19.8]).assign(metric="gflops")
    more = find_steps(more)
    assert list(more["change"]) == ["improvement"] and list(more["commit_hash"]) == ["c3"]
    worse_ulp = find_steps(_series("b.track_max_ulp", "track", "ulp", [1.0, 1.0, 0.5, 4.0]))
    assert list(zip(worse_ulp["commit_hash"], worse_ulp["change"], strict=False)) == [
        ("c2", "improvement"),
        ("c3", "regression"),
    ]


def test_overlapping_intervals_are_not_a_step_even_with_a_big_ratio():
    assert find_steps(_series("b.time_x", "time", "seconds", [1.0, 1.5], ci_halfwidth=0.3)).empty
    assert len(find_steps(_series("b.time_x", "time", "seconds", [1.0, 1.5], ci_halfwidth=0.1))) == 1


def test_failed_points_are_skipped_not_steps():
    steps = find_steps(_series("b.track_max_ulp", "track", "ulp", [1.0, float("nan"), 1.0, 2.0]))
    assert list(zip(steps["prev_commit_hash"], steps["commit_hash"], strict=False)) == [("c2", "c3")]


def test_nondeterministic_tracks_need_the_threshold():
    values = [5.0, 5.2, 4.9, 5.1, 5.0]
    assert len(find_steps(_series("b.track_noisy", "track", "ulp", values))) == 4
    assert find_steps(_series("b.track_noisy", "track", "ulp", values), nondeterministic=["*noisy*"]).empty


def test_compare_environments_at_one_commit(shared_results):
    frame = load_results(shared_results).frame
    table = compare_across(frame, by="env_name", baseline=MKL, commit=COMMITS[-1])
    assert len(table) == 5 * 8  # 4 asv benchmarks + the derived GFLOP/s, 8 parameter combinations
    row = table.loc[
        (table["benchmark"] == "linear.Linear.track_max_ulp")
        & (table["params"] == params_label(("numpy:matmul", "float32", 64, 1)))
    ].iloc[0]
    assert (row[MKL], row[OPENBLAS]) == (7.0, 3.0)
    assert row[f"{OPENBLAS}/{MKL}"] == pytest.approx(3 / 7)
    assert set(table.columns) >= {*ENVS, f"{OPENBLAS}/{MKL}"}
    with pytest.raises(OpbenchError):
        compare_across(frame, baseline="nope")


@pytest.mark.parametrize(
    "benchmark,metric",
    [
        ("bench_activations.Relu.track_bits_differ_1_vs_all_threads", "bits_differ_1_vs_all_threads"),
        ("bench_activations.Relu.track_max_rel_fp64", "max_rel_fp64"),
        ("bench_activations.Relu.time_op", "time"),
        ("bench_products.Linear.track_max_ulp", "max_ulp"),
        ("bench_relu.Relu.track_relative_something", "other"),  # unknown track: never guessed by substring
    ],
)
def test_metrics_are_classified_by_declaration_not_by_substring(benchmark, metric):
    assert metric_of(benchmark) == metric


def test_every_suite_track_of_relu_is_classified_by_the_metric_table():
    from accuracy.judge.metric_table import tracks
    from benchmarks import bench_activations

    methods = [m for m in dir(bench_activations.Relu) if m.startswith(("track_", "time_"))]
    assert sorted(methods) == sorted(["time_op", *(m.track for m in tracks())])
    assert all(metric_of(f"bench_activations.Relu.{m}") != "other" for m in methods)
