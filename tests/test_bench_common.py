"""The generated asv classes, called the way asv calls them (setup, method, teardown)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import bench_linalg, bench_reductions  # noqa: E402
from benchmarks.common import RUN_DIR_VAR  # noqa: E402


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
