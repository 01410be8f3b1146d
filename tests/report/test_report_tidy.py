"""The exported tidy frame: typed columns from the metric table, and a data dictionary for them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from fixtures_report import COMMITS, DATES, FINGERPRINTS, MKL

from accuracy.judge.metric_table import BY_NAME
from accuracy.report.export import export_frame
from accuracy.report.load import load_results
from accuracy.report.render import write_report
from accuracy.report.tidy import COLUMNS, DATA_DICTIONARY, dictionary_markdown, tidy

REPO = Path(__file__).resolve().parents[2]


def test_columns_are_split_and_typed(shared_results):
    frame = tidy(load_results(shared_results).frame)
    assert tuple(frame.columns) == COLUMNS
    assert str(frame["size"].dtype) == "Int64" and str(frame["threads"].dtype) == "Int64"
    assert set(frame["size"].dropna()) == {64, 256} and set(frame["threads"].dropna()) == {1}
    assert set(frame["implementation"]) == {"F.linear", "matmul"} and set(frame["backend"]) == {"torch", "numpy"}
    assert set(frame["metric"]) <= set(BY_NAME) and "other" not in set(frame["metric"])
    assert frame.loc[frame["metric"] == "gflops", "higher_is_better"].all()
    assert not frame.loc[frame["metric"] != "gflops", "higher_is_better"].any()
    timings = frame.loc[(frame["metric"] == "time") & ~frame["failed"]]
    assert (timings["n_samples"].dropna() == 10).all() and (timings["ci_low"] <= timings["value"]).all()
    row = frame.loc[
        (frame["metric"] == "max_ulp")
        & (frame["env_name"] == MKL)
        & (frame["commit_hash"] == COMMITS[0])
        & (frame["implementation"] == "matmul")
        & (frame["dtype"] == "float32")
        & (frame["size"] == 64)
    ]
    assert row["value"].tolist() == [3.0] and row["unit"].tolist() == ["ulp"] and row["op"].tolist() == ["linear"]


def test_round_trip_keeps_integers(shared_results, tmp_path):
    frame = tidy(load_results(shared_results).frame)
    csv, parquet = export_frame(frame, tmp_path / "results")
    pd.testing.assert_frame_equal(pd.read_parquet(parquet), frame)
    assert pd.read_csv(csv)["size"].dtype.kind == "i"


def test_data_dictionary_beside_the_data_and_in_the_docs(shared_results, tmp_path):
    write_report(shared_results, tmp_path, "r")
    written = pd.read_csv(tmp_path / "r" / "data_dictionary.csv")
    assert list(written["column"]) == list(pd.read_csv(tmp_path / "r" / "results.csv", nrows=0).columns)
    assert all(DATA_DICTIONARY[c] for c in COLUMNS)
    assert dictionary_markdown() in (REPO / "docs" / "report.md").read_text()


def test_a_hand_written_benchmark_keeps_one_case_per_method_and_parameter(tmp_path):
    """A model's ports have no implementation parameter: each port stays its own case (they
    merged into one, drawn as a bar labelled 'nan'), and names no 'fastest implementation'."""
    from accuracy.report.answers import Peak, latest_cases, speed
    from accuracy.report.synthetic import SyntheticBenchmark, write_benchmarks, write_machine, write_result_file

    ports = ("onnxruntime", "torchscript")
    benchmarks = [
        SyntheticBenchmark(f"bench_models.SmallModelPorts.{name}", kind, unit, ("port",), (ports,))
        for name, kind, unit in (("time_end_to_end", "time", "seconds"), ("track_worst_layer_tier", "track", "tier"))
    ]
    seconds = {"onnxruntime": 0.02, "torchscript": 0.004}
    results = tmp_path / "results"
    write_machine(results, "box")
    write_benchmarks(results, benchmarks)
    write_result_file(
        results, "box", "env", COMMITS[0], DATES[0], benchmarks,
        lambda bench, combo: [seconds[combo[0]]] * 5 if bench.kind == "time" else 0.0,
        FINGERPRINTS[MKL],
    )  # fmt: skip
    cases = latest_cases(load_results(results).frame)
    timed = cases.loc[cases["time"].notna()].set_index("implementation")["time"].to_dict()
    assert timed == {"time_end_to_end port=onnxruntime": 0.02, "time_end_to_end port=torchscript": 0.004}
    assert set(cases["implementation"]) == set(timed) | {f"track_worst_layer_tier port={p}" for p in ports}
    assert speed(cases, Peak()).empty
