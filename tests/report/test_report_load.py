"""Loading asv results into the tidy frame: content, robustness, export."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fixtures_report import BENCHMARKS, COMMITS, DATES, ENVS, FAILED, MACHINE, N_COMMITS, params_label

from accuracy.core.errors import OpbenchError
from accuracy.report.export import export_frame
from accuracy.report.load import load_results

N_COMBOS = 8
N_BENCHMARKS = len(BENCHMARKS)


def _snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Content hash and mtime of every file: loading must change neither."""
    return {
        str(path): (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def test_one_row_per_benchmark_combo_commit_env(shared_results):
    loaded = load_results(shared_results)
    frame = loaded.frame
    assert loaded.warnings == []
    measured = frame.loc[frame["kind"] != "derived"]
    assert len(measured) == N_BENCHMARKS * N_COMBOS * N_COMMITS * len(ENVS)
    # one GFLOP/s row per timing that did not fail (FAILED is the one that did)
    assert (frame["metric"] == "gflops").sum() == N_COMBOS * N_COMMITS * len(ENVS) - 1
    assert not frame.duplicated(["machine", "env_name", "commit_hash", "benchmark", "params"]).any()
    assert set(frame["commit_hash"]) == set(COMMITS)
    assert set(frame["env_name"]) == set(ENVS)
    assert (frame["machine"] == MACHINE).all()
    first = frame.loc[frame["commit_hash"] == COMMITS[0], "commit_date"].unique()
    assert list(first) == [pd.Timestamp(DATES[0])]


def test_params_are_readable_and_split_into_typed_columns(shared_results):
    frame = load_results(shared_results).frame
    row = frame.loc[frame["params"] == "impl=torch:F.linear, dtype=float32, size=256, threads=1"].iloc[0]
    assert (row["impl"], row["dtype"], row["size"], row["threads"]) == ("torch:F.linear", "float32", 256, 1)
    assert frame["size"].dtype.kind == "i"
    assert sorted(frame["size"].unique()) == [64, 256]


def test_kind_unit_stats_and_fingerprint(shared_results):
    frame = load_results(shared_results).frame
    time_rows = frame.loc[(frame["kind"] == "time") & ~frame["failed"]]
    assert (time_rows["unit"] == "seconds").all()
    assert (time_rows["repeat"] == 10).all() and (time_rows["number"] == 1).all()
    assert (time_rows["ci_99_a"] <= time_rows["value"]).all() and (time_rows["value"] <= time_rows["ci_99_b"]).all()
    tracks = frame.loc[frame["kind"] == "track"]
    assert tracks["ci_99_a"].isna().all()
    rates = frame.loc[frame["metric"] == "gflops"].merge(
        time_rows, on=["env_name", "commit_hash", "params"], suffixes=("", "_time")
    )
    assert set(rates["unit"]) == {"GFLOP/s"} and len(rates) == len(time_rows)
    flops = 2.0 * 32 * rates["size"] * (rates["size"] // 4)  # the linear op's flop count
    assert np.allclose(rates["value"], flops / rates["value_time"] / 1e9)
    assert (rates["ci_99_a"] <= rates["value"]).all() and (rates["value"] <= rates["ci_99_b"]).all()
    blas = frame.groupby("env_name")["blas"].unique().map(list).to_dict()
    assert blas == {"py3.11-openblas": ["openblas 0.3.31 Haswell"], "py3.11-mkl": ["mkl 2025.2"]}
    assert set(frame["torch_version"]) == {"2.13.0"} and set(frame["numpy_version"]) == {"2.4.6"}


def test_failed_benchmark_is_a_nan_row(shared_results):
    frame = load_results(shared_results).frame
    name, env, combo, commit = FAILED
    failed = frame.loc[frame["failed"]]
    assert len(failed) == 1
    row = failed.iloc[0]
    assert (row["benchmark"], row["env_name"], row["params"], row["commit_hash"]) == (
        name,
        env,
        params_label(combo),
        COMMITS[commit],
    )
    assert np.isnan(row["value"])


def test_bad_files_are_skipped_by_name_and_never_modified(shared_results, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(shared_results, results)
    files = sorted((results / MACHINE).glob("*.json"))
    files = [f for f in files if f.name != "machine.json"]
    corrupt, truncated, partial, short = files[:4]
    corrupt.write_text("{not json")
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    data = json.loads(partial.read_text())
    del data["results"]
    partial.write_text(json.dumps(data))
    data = json.loads(short.read_text())
    name = "linear.Linear.track_max_ulp"
    data["results"][name][0] = data["results"][name][0][:5]  # 5 values for 8 combinations
    short.write_text(json.dumps(data))
    (results / MACHINE / "deadbeef-py3.11-mkl.fingerprint").write_text("{")  # orphan, ignored
    files[4].with_suffix(".fingerprint").write_text("{broken")
    before = _snapshot(results)

    loaded = load_results(results)

    assert _snapshot(results) == before
    named = {line.split(":")[0] for line in loaded.warnings}
    assert named == {str(corrupt), str(truncated), str(partial), str(short), str(files[4].with_suffix(".fingerprint"))}
    assert all("\n" not in line for line in loaded.warnings)
    assert any(f"skipped {name}, 5 values for 8 parameter combinations" in line for line in loaded.warnings)
    frame = loaded.frame
    full = N_BENCHMARKS * N_COMBOS * N_COMMITS * len(ENVS)
    assert len(frame.loc[frame["kind"] != "derived"]) == full - 3 * N_BENCHMARKS * N_COMBOS - N_COMBOS
    assert frame.loc[frame["file"] == files[4].name, "blas"].isna().all()


def test_unreadable_machine_json_skips_that_machine(shared_results, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(shared_results, results)
    shutil.copytree(results / MACHINE, results / "other-box")
    (results / "other-box" / "machine.json").write_text("[")
    loaded = load_results(results)
    assert set(loaded.frame["machine"]) == {MACHINE}
    assert [line.split(":")[0] for line in loaded.warnings] == [str(results / "other-box" / "machine.json")]


def test_missing_benchmarks_json_guesses_kind_from_name(shared_results, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(shared_results, results)
    (results / "benchmarks.json").unlink()
    loaded = load_results(results)
    frame = loaded.frame
    assert set(frame.loc[frame["benchmark"].str.contains(".time_"), "kind"]) == {"time"}
    assert set(frame.loc[frame["benchmark"].str.contains(".track_"), "kind"]) == {"track"}
    assert "param1=torch:F.linear, param2=float32, param3=256, param4=1" in set(frame["params"])
    assert len(loaded.warnings) == 1 + N_BENCHMARKS


@pytest.mark.parametrize("make", [lambda p: p / "nope", lambda p: p])
def test_missing_or_empty_results_dir_is_a_user_error(tmp_path, make):
    with pytest.raises(OpbenchError) as info:
        load_results(make(tmp_path))
    assert "\n" not in str(info.value) and str(make(tmp_path)) in str(info.value)


def test_csv_and_parquet_round_trip(shared_results, tmp_path):
    frame = load_results(shared_results).frame
    csv, parquet = export_frame(frame, tmp_path / "results")
    assert frame["samples"].notna().any()  # the raw samples compare tests stay in memory only
    frame = frame.drop(columns="samples")
    pd.testing.assert_frame_equal(pd.read_parquet(parquet), frame)
    back = pd.read_csv(csv)
    assert list(back.columns) == list(frame.columns) and len(back) == len(frame)
    np.testing.assert_allclose(back["value"], frame["value"], rtol=1e-12)
