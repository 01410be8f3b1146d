"""Issue 44 #5: progress that reaches its total, ETAs weighted by measured per-class costs, and a
line for each environment asv sets up (minutes that were silent)."""

from __future__ import annotations

import datetime
import io

import pytest

from accuracy.report.synthetic import SyntheticBenchmark, write_benchmarks, write_machine, write_result_file
from accuracy.run import progress as progress_module
from accuracy.run.progress import ClassProgress, measured_costs

DOT, GEMV, SUM = "bench_products.Dot", "bench_products.Gemv", "bench_reductions.Sum"
TOTAL_LINE = "· Running {n} total benchmarks (1 commits * 1 environments * {n} benchmarks)\n"


@pytest.fixture
def clock(monkeypatch):
    """A clock the test moves: seconds since the run started."""
    now = [0.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: now[0])
    return now


def test_a_class_that_prints_nothing_still_counts_so_the_count_reaches_its_total(clock):
    out = io.StringIO()
    progress = ClassProgress([DOT, GEMV, SUM], out=out)
    progress.expect([DOT, GEMV])
    progress.feed(TOTAL_LINE.format(n=2))
    progress.feed(f"[50.00%] ··· {DOT}.time_op   ok\n")
    clock[0] = 4.0
    progress.finish()  # asv never named Gemv (no benchmark of it ran)
    progress.expect([SUM])
    progress.feed(TOTAL_LINE.format(n=1))
    progress.feed(f"[100.00%] ··· {SUM}.time_op   ok\n")
    clock[0] = 6.0
    progress.finish()
    lines = out.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [
        f"[1/3] {DOT} (4s)",
        f"[2/3] no output from {GEMV} (see the log)",
        f"[3/3] {SUM} (2s)",
    ]
    assert lines[-1].endswith("done") and progress.done == progress.total == 3


def test_the_eta_weights_the_classes_left_by_their_measured_cost(clock):
    """Dot took 10 s where earlier results say 1 s; Sum, left, took 98 s there: ETA 16m30s, not
    the 20 s the mean of the finished classes gave (nor, the other way round, 54-86 min for a
    run of minutes whose first class was the heavy one)."""
    out = io.StringIO()
    progress = ClassProgress([DOT, GEMV, SUM], out=out, costs={DOT: 1.0, GEMV: 1.0, SUM: 98.0})
    progress.expect([DOT, GEMV, SUM])
    progress.feed(TOTAL_LINE.format(n=3))
    progress.feed(f"[10.00%] ··· {DOT}.time_op   ok\n")
    clock[0] = 10.0
    progress.feed(f"[20.00%] ··· {GEMV}.time_op   ok\n")
    assert out.getvalue().splitlines() == [f"[1/3] {DOT} (10s), elapsed 10s, ETA 16m30s"]


def test_a_class_without_a_measured_cost_counts_as_the_mean_of_those_with_one(clock):
    out = io.StringIO()
    progress = ClassProgress([DOT, GEMV, SUM], out=out, costs={DOT: 2.0, SUM: 4.0})
    progress.feed(TOTAL_LINE.format(n=3))
    progress.feed(f"··· {DOT}.time_op   ok\n")
    clock[0] = 2.0
    progress.feed(f"··· {GEMV}.time_op   ok\n")
    assert out.getvalue().endswith("ETA 7s\n")  # Gemv 3 s (the mean) + Sum 4 s, at 1x


def test_each_environment_asv_sets_up_gets_a_line(clock):
    out = io.StringIO()
    progress = ClassProgress([], out=out)  # as the driver feeds it asv's discovery, which sets up the environments
    clock[0] = 75.0
    for line in (
        "· Creating environments\n",
        "·· Creating virtualenv for virtualenv-py3.11-numpy2.3.5\n",
        "·· Installing 9540def5 <main> into virtualenv-py3.11-numpy2.3.5\n",
        "· Discovering benchmarks\n",
    ):
        progress.feed(line)
    assert out.getvalue().splitlines() == [
        "asv: Creating virtualenv for virtualenv-py3.11-numpy2.3.5, elapsed 1m15s",
        "asv: Installing 9540def5 <main> into virtualenv-py3.11-numpy2.3.5, elapsed 1m15s",
    ]


def test_measured_costs_are_the_newest_durations_asv_recorded_per_class(tmp_path):
    params = (("numpy:np.dot@float32",), (64,))
    benches = [
        SyntheticBenchmark(f"{cls}.{name}", "track", "ulp", ("impl_dtype", "size"), params)
        for cls in (DOT, SUM)
        for name in ("track_max_ulp", "track_bound_ratio", "track_nonfinite")[: 3 if cls == DOT else 1]
    ]
    write_machine(tmp_path, "box")
    write_benchmarks(tmp_path, benches)
    date = datetime.datetime(2026, 2, 1, tzinfo=datetime.UTC)
    write_result_file(tmp_path, "box", "py3.11", "a" * 40, date, benches, lambda bench, combo: 1.0)
    (tmp_path / "box" / "bbbbbbbb-py3.11.json").write_text("{not json")  # unreadable: no weights from it
    # synthetic results record 1 s per benchmark: Dot has 3, Sum 1; Gemv is not in these results
    assert measured_costs(tmp_path / "box", [DOT, GEMV, SUM]) == {DOT: 3.0, SUM: 1.0}
    assert measured_costs(tmp_path / "nowhere", [DOT]) == {}


def test_a_class_asv_comes_back_to_counts_once_so_the_count_never_passes_its_total(clock):
    """Benchmarks sharing a setup_cache run together across classes: asv went Dot, Gemv, Dot, and
    Dot counted twice, `make bench` ended at [121/120] (issue 57, item 5)."""
    out = io.StringIO()
    progress = ClassProgress([DOT, GEMV], out=out)
    progress.expect([DOT, GEMV])
    progress.feed(TOTAL_LINE.format(n=3))
    for name in (f"{DOT}.time_op", f"{GEMV}.time_op", f"{DOT}.track_ulp"):
        progress.feed(f"[50.00%] ··· {name}   ok\n")
        clock[0] += 1.0
    progress.finish()
    assert progress.done == progress.total == 2
    assert [line.split(",")[0] for line in out.getvalue().splitlines()] == [f"[1/2] {DOT} (1s)", f"[2/2] {GEMV} (1s)"]


def test_the_read_pass_expects_only_the_classes_left_to_read():
    """A hand-written module runs whole in the measure pass: the read pass said 'no output from
    bench_models.SmallModelPorts, bench_references.ExactGemm (see the log)', which had run."""
    from accuracy.run.batches import Batch
    from accuracy.run.driver import _left_to_read

    models, gemm = "bench_models.SmallModelPorts", "bench_references.ExactGemm"
    suite = [f"{DOT}.time_op", f"{DOT}.track_ulp", f"{models}.time_port", f"{gemm}.time_dgemm", "bench_free.time_f"]
    measured = {f"{DOT}.time_op": {}, f"{models}.time_port": {}, f"{gemm}.time_dgemm": {}}
    batch = Batch(
        ("bench_products", "bench_models", "bench_references", "bench_free"), (DOT, models, gemm, "bench_free")
    )
    assert _left_to_read(suite, batch, measured) == (DOT, "bench_free")
