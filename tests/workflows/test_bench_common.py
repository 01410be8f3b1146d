"""The generated asv classes, called the way asv calls them (setup, method, teardown)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np

from benchmarks import bench_activations, bench_linalg, bench_products, bench_reductions
from benchmarks.common import RUN_DIR_VAR, output_digest


def _values(cls, params):
    bench = cls()
    bench.setup(*params)
    try:
        return [getattr(bench, m)(*params) for m in ("track_max_ulp", "track_bound_ratio", "track_nonfinite")]
    finally:
        bench.teardown(*params)


def test_conditions_are_a_parameter_only_where_an_op_has_them():
    assert bench_linalg.Solve.param_names == ["impl_dtype", "size", "condition", "threads"]
    assert bench_linalg.Solve.params[2] == ["random", "ill"]
    assert "condition" not in bench_linalg.Cholesky.param_names


def test_tracks_share_one_measurement_within_a_run(tmp_path, monkeypatch):
    params = ("numpy:np.linalg.solve@float64", 32, "ill", 1)  # float32 ill is vacuous (NaN)
    alone = _values(bench_linalg.Solve, params)
    monkeypatch.setenv(RUN_DIR_VAR, str(tmp_path))
    first = _values(bench_linalg.Solve, params)
    assert len(list(tmp_path.glob("*.json"))) == 1  # measured once, stored for the other tracks
    assert _values(bench_linalg.Solve, params) == first == alone


def test_a_different_condition_is_a_different_measurement(tmp_path, monkeypatch):
    monkeypatch.setenv(RUN_DIR_VAR, str(tmp_path))
    size = bench_reductions.Sum.params[1][0]
    random = _values(bench_reductions.Sum, ("torch:torch.sum@float32", size, "random", 1))
    cancelling = _values(bench_reductions.Sum, ("torch:torch.sum@float32", size, "cancelling", 1))
    assert len(list(tmp_path.glob("*.json"))) == 2
    assert random != cancelling
    assert cancelling[0] > 100 * random[0]  # ulps explode under cancellation ...
    assert 0 < cancelling[1] <= 1  # ... yet provably within rounding


def _verdict_tracks(cls, params):
    bench = cls()
    bench.setup(*params)
    try:
        return bench.track_verdict_tier(*params), bench.track_typical_ratio(*params)
    finally:
        bench.teardown(*params)


def test_verdict_tier_and_typical_ratio_are_tracks():
    """0 within rounding ... 3 undetermined, lower is better; the semantic variant ddof=0 is 2."""
    size = bench_reductions.Std.params[1][0]
    tier, typical = _verdict_tracks(bench_reductions.Std, ("torch:torch.std(x)@float32", size, 1))
    assert tier == 0 and 0 <= typical <= 1
    tier, _ = _verdict_tracks(bench_reductions.Std, ("numpy:np.std(x)@float32", size, 1))
    assert tier == 2
    assert bench_reductions.Std.track_verdict_tier.unit == "tier"


def _track(cls, params, method, patch=None):
    bench = cls()
    bench.setup(*params)
    try:
        if patch:
            patch(bench)
        return getattr(bench, method)(*params)
    finally:
        bench.teardown(*params)


def test_output_digest_is_equal_exactly_for_equal_bits():
    """relu is exact in every format: every implementation gives the same bits, so the same digest."""
    size = bench_activations.Relu.params[1][0]
    digests = {
        impl: _track(bench_activations.Relu, (impl, size, 1), "track_output_digest")
        for impl in bench_activations.Relu.params[0]
    }
    assert len(set(digests.values())) == 1
    digest = next(iter(digests.values()))
    assert digest == int(digest) and 0 <= digest < 2**52
    other = _track(bench_activations.Sigmoid, (bench_activations.Sigmoid.params[0][0], size, 1), "track_output_digest")
    assert other != digest
    assert output_digest(np.zeros(3, np.float32)) != output_digest(np.zeros(3, np.float64))


def test_a_case_whose_bits_change_run_to_run_says_so_and_reports_its_worst_run():
    params = ("numpy:np.maximum(x, 0)@float32", bench_activations.Relu.params[1][0], 1)

    def flaky(bench):
        exact_run, calls = bench.case.run, iter(range(100))

        def run(impl, threads=None):
            out = exact_run(impl, threads)
            if next(calls) == 1:  # the second run is off by one ulp in one element
                out = out.copy()
                out[np.argmax(out)] = np.nextafter(out.max(), np.float32(np.inf))
            return out

        bench.case.run = run

    assert _track(bench_activations.Relu, params, "track_bits_differ_run_to_run") == 0
    assert _track(bench_activations.Relu, params, "track_max_ulp") == 0
    assert _track(bench_activations.Relu, params, "track_bits_differ_run_to_run", flaky) == 1
    assert _track(bench_activations.Relu, params, "track_max_ulp", flaky) == 1  # the worst of the runs
    assert _track(bench_activations.Relu, params, "track_verdict_tier", flaky) > 0


def test_a_one_thread_result_with_other_bits_is_judged_too():
    """At all cores the tracks report the worse of the all-cores and the 1-thread result."""
    params = ("numpy:np.maximum(x, 0)@float32", bench_activations.Relu.params[1][0], 2)

    def one_thread_off(bench):
        exact_run = bench.case.run

        def run(impl, threads=None):
            out = exact_run(impl, threads)
            if threads == 1:  # one element one ulp off, on one thread only
                out = out.copy()
                out[np.argmax(out)] = np.nextafter(out.max(), np.float32(np.inf))
            return out

        bench.case.run = run

    assert _track(bench_activations.Relu, params, "track_max_ulp") == 0
    assert _track(bench_activations.Relu, params, "track_max_ulp", one_thread_off) == 1
    assert _track(bench_activations.Relu, params, "track_bits_differ_1_vs_all_threads", one_thread_off) == 1
    assert _track(bench_activations.Relu, params, "track_bits_differ_run_to_run", one_thread_off) == 0


def test_bound_ratio_track_is_the_verdicts_at_the_compute_precision():
    """A float16 sum that torch computes in float32: float16's own gamma_4095 is vacuous (4095 u >= 1),
    so a storage-precision bound gives NaN; the precision model (float32 algorithm bound + one rounding
    to float16) proves it, and the asv track, explain's column and the verdict report that same ratio."""
    from accuracy.catalog.registry import get_op
    from accuracy.core.dtypes import get_format
    from accuracy.judge.error_metrics import bound_ratio
    from accuracy.workflows.evaluation import Case

    params = ("torch:torch.sum@float16", 4096, "cancelling", 1)
    track = _track(bench_reductions.Sum, params, "track_bound_ratio")
    op = get_op("sum")
    case = Case(op, get_format("float16"), 4096, "cancelling")
    impl = op.impl("torch:torch.sum")
    out = case.run(impl, 1)  # the track's thread count
    judgement = case.judge(impl, out)
    assert judgement.compute == "float32" and judgement.verdict == "within rounding"
    assert track == judgement.bound_ratio == case.measure(impl, out).bound_ratio
    assert 0 < track < 1e-4  # measured 3.0e-6
    assert np.isnan(bound_ratio(out, case.exact, op.bound(case.inputs64, case.exact, case.fmt)))


def test_bound_ratio_track_of_a_float16_matmul_computed_in_float32():
    """Where float16's bound is finite it is loose: the float32 bound + one rounding is ~6000x sharper."""
    from accuracy.catalog.registry import get_op
    from accuracy.core.dtypes import get_format
    from accuracy.judge.error_metrics import bound_ratio
    from accuracy.workflows.evaluation import Case

    op = get_op("matmul")
    case = Case(op, get_format("float16"), 128)
    impl = op.impl("torch:torch.matmul")
    out = case.run(impl, 1)  # the track's thread count
    storage = bound_ratio(out, case.exact, op.bound(case.inputs64, case.exact, case.fmt))
    track = _track(bench_products.Matmul, ("torch:torch.matmul@float16", 128, 1), "track_bound_ratio")
    assert track == case.judge(impl, out).bound_ratio
    assert 0.05 < track < 1 and track > 1000 * storage  # measured 0.263 and 4.4e-05
