"""`opbench compare BASE NEW`: verdicts, the summary and exit codes on synthetic asv results.

The result sets are written through asv's own Results API (accuracy.report.synthetic), named like
the real suite's benchmarks (benchmarks/common.py): one class per op, time_op plus track_* methods
over impl_dtype x size x threads.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from accuracy import cli
from accuracy.report.synthetic import SyntheticBenchmark, write_benchmarks, write_machine, write_result_file

REPO = Path(__file__).resolve().parents[1]
COMMITS = [hashlib.sha1(f"upgrade {i}".encode()).hexdigest() for i in range(2)]
DATES = [datetime.datetime(2026, 2, 1, tzinfo=datetime.UTC) + datetime.timedelta(days=i) for i in range(2)]

PARAM_NAMES = ("impl_dtype", "size", "threads")
PARAMS = (("torch:F.linear@float32", "numpy:matmul@float32"), (64, 256), (1,))
UNITS = {
    "time_op": ("time", "seconds"),
    "track_max_ulp": ("track", "ulp"),
    "track_max_rel_fp64": ("track", "relative"),
    "track_bound_ratio": ("track", "ratio"),
    "track_nonfinite": ("track", "count"),
    "track_bits_differ_1_vs_all_threads": ("track", "bool"),
    "track_verdict_tier": ("track", "tier"),
}
BENCHMARKS = [
    SyntheticBenchmark(f"bench_products.Linear.{method}", kind, unit, PARAM_NAMES, PARAMS)
    for method, (kind, unit) in UNITS.items()
]

SLOW = ("torch:F.linear@float32", 256, 1)   # time 1.5x, tight samples: CIs separate -> slower
SAME = ("numpy:matmul@float32", 64, 1)      # time 1.05x: CIs may separate, ratio under 1.10 -> same
BEYOND = ("numpy:matmul@float32", 256, 1)   # bound ratio 0.3 -> 1.7 -> beyond rounding
BETTER = ("torch:F.linear@float32", 64, 1)  # max ulp 2.0 -> 1.0 -> more accurate
UPGRADE = {
    ("time_op", SLOW): 1.5,
    ("time_op", SAME): 1.05,
    ("track_bound_ratio", BEYOND): 1.7 / 0.3,
    ("track_max_ulp", BETTER): 0.5,
}
BASELINE = {"track_max_ulp": 2.0, "track_max_rel_fp64": 1e-7, "track_bound_ratio": 0.3,
            "track_nonfinite": 0.0, "track_bits_differ_1_vs_all_threads": 0.0}


def measure(changes: dict | None = None, noise: float = 0.002, seed: int = 0, overrides: dict | None = None):
    """Measurements of the baseline, times the factors in `changes`; `overrides` replaces values."""
    rng = np.random.default_rng(seed)
    changes, overrides = changes or {}, overrides or {}

    def fn(bench: SyntheticBenchmark, combo: tuple):
        method = bench.name.rsplit(".", 1)[-1]
        if (method, combo) in overrides:
            return overrides[method, combo]
        if method == "track_verdict_tier":  # as the verdict would say: 2 (beyond) past the bound
            bound = overrides.get(("track_bound_ratio", combo), BASELINE["track_bound_ratio"]
                                  * changes.get(("track_bound_ratio", combo), 1.0))
            nonfinite = overrides.get(("track_nonfinite", combo), 0.0)
            return 2.0 if bound > 1 or nonfinite else 0.0
        factor = changes.get((method, combo), 1.0)
        seconds = 1e-9 * combo[1] ** 2 * (1.3 if combo[0].startswith("numpy") else 1.0)
        if method == "time_op":
            return list(seconds * factor * (1 + noise * rng.standard_normal(10)))
        return BASELINE[method] * factor

    return fn


def write_sets(root: Path, new=None, base=None, layout: str = "machines") -> Path:
    """BASE and NEW at one commit: as two machines ("box-base", "box-new", env py3.11) or as two
    environments ("py3.11-openblas", "py3.11-mkl") on one machine."""
    results = root / "results"
    write_benchmarks(results, BENCHMARKS)
    base = base or measure(seed=1)
    new = new or measure(UPGRADE, seed=2)
    if layout == "machines":
        sets = [("box-base", "py3.11", base), ("box-new", "py3.11", new)]
    else:
        sets = [("bench-box", "py3.11-openblas", base), ("bench-box", "py3.11-mkl", new)]
    for machine, env, fn in sets:
        write_machine(results, machine)
        write_result_file(results, machine, env, COMMITS[0], DATES[0], BENCHMARKS, fn)
    return results


def run_json(capsys, results: Path, base: str, new: str, *extra: str) -> tuple[int, dict]:
    code = cli.main(["compare", base, new, "--results", str(results), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def verdicts(report: dict) -> dict[tuple, list[str]]:
    return {(f"{r['impl']}@{r['dtype']}", r["size"], r["threads"]): r["verdicts"] for r in report["rows"]}


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "accuracy", "compare", *args],
                          cwd=REPO, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(("layout", "base", "new"), [
    ("machines", "box-base", "box-new"),
    ("envs", "py3.11-openblas", "py3.11-mkl"),
])
def test_verdicts_and_exit_code(tmp_path, capsys, layout, base, new):
    results = write_sets(tmp_path, layout=layout)
    code, report = run_json(capsys, results, base, new)
    assert code == 1
    assert verdicts(report) == {
        SLOW: ["slower"],
        SAME: ["unchanged"],
        BEYOND: ["beyond rounding"],
        BETTER: ["more accurate"],
    }
    rows = {(f"{r['impl']}@{r['dtype']}", r["size"], r["threads"]): r for r in report["rows"]}
    assert rows[SLOW]["time_change"] == "slower" and rows[SLOW]["time_ratio"] == pytest.approx(1.5, rel=0.02)
    # GFLOP/s comes from the same samples: it moves with time and never votes on its own
    assert rows[SLOW]["gflops_new"] / rows[SLOW]["gflops_base"] == pytest.approx(1 / 1.5, rel=0.02)
    assert rows[SAME]["time_change"] == "same" and rows[SAME]["time_ratio"] == pytest.approx(1.05, rel=0.02)
    assert (rows[BEYOND]["bound_ratio_base"], rows[BEYOND]["bound_ratio_new"]) == pytest.approx((0.3, 1.7))
    assert (rows[BETTER]["max_ulp_base"], rows[BETTER]["max_ulp_new"]) == (2.0, 1.0)
    assert report["verdict"] == "NOT SAFE" and report["exit_code"] == 1
    assert report["summary"].startswith("NOT SAFE: 1 result now beyond rounding, 1 slowdown beyond 10%")
    assert [r["verdicts"][0] for r in report["rows"]] == ["beyond rounding", "slower", "more accurate", "unchanged"]


def test_table_is_worst_first_then_summary(tmp_path, capsys):
    results = write_sets(tmp_path)
    assert cli.main(["compare", "box-base", "box-new", "--results", str(results)]) == 1
    lines = capsys.readouterr().out.rstrip("\n").splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("op "))
    body = lines[header + 2: header + 6]
    column = lines[header].index("verdict")
    assert [line[column:].strip() for line in body] == [
        "beyond rounding", "slower", "more accurate", "unchanged"]
    assert "0.3 -> 1.7" in body[0] and "1.50x" in body[1] and "2 -> 1" in body[2]
    assert lines[-1].startswith("NOT SAFE: 1 result now beyond rounding, 1 slowdown beyond 10%")


def test_equal_sets_are_safe(tmp_path, capsys):
    results = write_sets(tmp_path, new=measure(seed=1))
    code, report = run_json(capsys, results, "box-base", "box-new")
    assert code == 0
    assert set(map(tuple, verdicts(report).values())) == {("unchanged",)}
    assert report["summary"].startswith("SAFE: no slowdowns beyond 10%, results unchanged")
    assert cli.main(["compare", "box-base", "box-base", "--results", str(results)]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("SAFE:")


def test_accuracy_change_within_rounding_is_safe(tmp_path, capsys):
    results = write_sets(tmp_path, new=measure({("track_max_ulp", SAME): 1.5, ("track_bound_ratio", SAME): 2.0}, seed=1))
    code, report = run_json(capsys, results, "box-base", "box-new")
    assert code == 0
    assert verdicts(report)[SAME] == ["less accurate"]
    assert report["summary"].startswith("SAFE: no slowdowns beyond 10%, results changed within rounding in 1 case")


def test_noise_is_not_a_slowdown_and_one_sample_is_inconclusive(tmp_path, capsys):
    # 1.5x slower median, but samples spread so widely that the 99% intervals overlap and are
    # wider than the threshold: no evidence of a change, and none of its absence.
    noisy_base, noisy_new = measure(noise=0.6, seed=1), measure({("time_op", SLOW): 1.5}, noise=0.6, seed=2)
    # a single sample (a quick run) has no interval: 2x slower, yet no evidence either way
    one_sample = {("time_op", SAME): [2 * 1e-9 * 64**2 * 1.3]}

    def new_fn(bench, combo):
        return (noisy_new if combo == SLOW else measure(seed=3, overrides=one_sample))(bench, combo)

    def base_fn(bench, combo):
        return (noisy_base if combo == SLOW else measure(seed=1))(bench, combo)

    results = write_sets(tmp_path, new=new_fn, base=base_fn)
    code, report = run_json(capsys, results, "box-base", "box-new")
    rows = {(f"{r['impl']}@{r['dtype']}", r["size"], r["threads"]): r for r in report["rows"]}
    assert rows[SLOW]["time_ratio"] > 1.1 and rows[SLOW]["time_change"] == "inconclusive"
    assert rows[SLOW]["verdicts"] == ["unchanged"]
    assert rows[SAME]["time_ratio"] == pytest.approx(2.0, rel=0.05)
    assert rows[SAME]["time_change"] == "inconclusive" and rows[SAME]["verdicts"] == ["unchanged"]
    assert code == 0 and "timing inconclusive in 2 cases" in report["summary"]


def test_new_nonfinite_and_new_failure_are_not_safe(tmp_path, capsys):
    new = measure({("track_nonfinite", SAME): 1.0}, seed=1,
                  overrides={("track_nonfinite", SAME): 3.0, ("track_max_ulp", BETTER): None})
    code, report = run_json(capsys, write_sets(tmp_path, new=new), "box-base", "box-new")
    assert code == 1
    assert verdicts(report)[SAME] == ["beyond rounding"]
    assert verdicts(report)[BETTER] == ["newly failing"]
    assert report["summary"].startswith("NOT SAFE: 1 result now beyond rounding, 1 newly failing")


def test_commit_prefix_and_latest_commit_of_a_machine(tmp_path, capsys):
    """One machine with history: a machine name means its latest commit; prefixes pick commits."""
    results = tmp_path / "results"
    write_benchmarks(results, BENCHMARKS)
    write_machine(results, "bench-box")
    write_result_file(results, "bench-box", "py3.11", COMMITS[0], DATES[0], BENCHMARKS, measure(seed=1))
    write_result_file(results, "bench-box", "py3.11", COMMITS[1], DATES[1], BENCHMARKS, measure(UPGRADE, seed=2))
    code, report = run_json(capsys, results, COMMITS[0][:8], COMMITS[1][:10])
    assert code == 1 and verdicts(report)[BEYOND] == ["beyond rounding"]
    assert report["base"]["commit_hash"] == COMMITS[0] and report["new"]["commit_hash"] == COMMITS[1]
    code, report = run_json(capsys, results, COMMITS[1][:8], "bench-box")
    assert code == 0 and report["new"]["commit_hash"] == COMMITS[1]


def test_csv_output(tmp_path, capsys):
    results = write_sets(tmp_path)
    out = tmp_path / "out" / "cmp.csv"
    assert cli.main(["compare", "box-base", "box-new", "--results", str(results), "--csv", str(out)]) == 1
    import pandas as pd

    frame = pd.read_csv(out)
    assert len(frame) == 4 and frame["verdict"].iloc[0] == "beyond rounding"


@pytest.mark.slow
def test_unknown_name_is_one_line_exit_2(tmp_path):
    results = write_sets(tmp_path)
    done = run_cli("box-base", "no-such-box", "--results", str(results))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "NEW 'no-such-box'" in done.stderr and "box-base, box-new" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("args", [
    ("box-base", "box-new", "--time-threshold", "0.9"),  # threshold must be above 1
    ("box-base", "box-new", "--results", "{tmp}/missing"),  # no results directory
])
def test_bad_input_exits_2(tmp_path, capsys, args):
    write_sets(tmp_path)
    args = [a.format(tmp=tmp_path) for a in args]
    if "--results" not in args:
        args += ["--results", str(tmp_path / "results")]
    assert cli.main(["compare", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("opbench: error: ")


def test_ambiguous_names_exit_2(tmp_path, capsys):
    results = tmp_path / "results"
    write_benchmarks(results, BENCHMARKS)
    write_machine(results, "py3.11")  # a machine named like the environment
    commits = ["abcd" + "1" * 36, "abcd" + "2" * 36]
    for commit, date in zip(commits, DATES):
        write_result_file(results, "py3.11", "py3.11", commit, date, BENCHMARKS, measure(seed=1))
    assert cli.main(["compare", "py3.11", "abcd1", "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert "BASE 'py3.11' is ambiguous" in err and err.count("\n") == 1
    assert cli.main(["compare", "abcd", "abcd2", "--results", str(results)]) == 2
    assert "BASE 'abcd' is ambiguous: it starts 2 commits" in capsys.readouterr().err
    assert cli.main(["compare", "abcd1", "abcd2", "--results", str(results)]) == 0


@pytest.mark.slow
def test_corrupt_new_file_exits_2_with_one_line(tmp_path):
    results = write_sets(tmp_path)
    path = results / "box-new" / f"{COMMITS[0][:8]}-py3.11.json"
    path.write_text(path.read_text()[:200])
    done = run_cli("box-base", "box-new", "--results", str(results))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "unreadable" in done.stderr


def test_leaving_within_rounding_is_not_safe_even_inside_the_bound(tmp_path, capsys):
    """The verdict tier decides: within rounding (0) -> suspicious (1) with the bound ratio still
    below 1 is NOT SAFE; a change of ulps that stays within rounding is not."""
    def new(bench, combo):
        if bench.name.endswith("track_verdict_tier") and combo == SAME:
            return 1.0
        return measure({("track_max_ulp", BETTER): 3.0}, seed=1)(bench, combo)

    code, report = run_json(capsys, write_sets(tmp_path, new=new), "box-base", "box-new")
    assert code == 1
    assert verdicts(report)[SAME] == ["beyond rounding"]
    assert verdicts(report)[BETTER] == ["less accurate"]
