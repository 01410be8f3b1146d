"""`opbench compare`: verdicts, bits, stack differences, names and exit codes on synthetic asv results.

The result sets are written through asv's own Results API (accuracy.report.synthetic), named like
the real suite's benchmarks: one class per op, time_op plus one track per metric-table entry,
over impl_dtype x size x threads.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_runner import run_main, run_opbench
from hypothesis import given, settings
from hypothesis import strategies as st
from test_asv_suite import tiny_repo  # noqa: F401 - a fixture, used by name

from accuracy.cli import main as cli
from accuracy.judge.metric_table import tracks
from accuracy.report.compare import compare_results
from accuracy.report.synthetic import (
    SyntheticBenchmark,
    append_samples,
    write_benchmarks,
    write_machine,
    write_result_file,
)

COMMITS = [hashlib.sha1(f"upgrade {i}".encode()).hexdigest() for i in range(2)]
DATES = [datetime.datetime(2026, 2, 1, tzinfo=datetime.UTC) + datetime.timedelta(days=i) for i in range(2)]

PARAM_NAMES = ("impl_dtype", "size", "threads")
PARAMS = (("torch:F.linear@float32", "numpy:x @ W.T + b@float32"), (64, 256), (1, 2))
BENCHMARKS = [SyntheticBenchmark("bench_products.Linear.time_op", "time", "seconds", PARAM_NAMES, PARAMS)] + [
    SyntheticBenchmark(f"bench_products.Linear.{m.track}", "track", m.unit, PARAM_NAMES, PARAMS) for m in tracks()
]
# what every case measures unless a test says otherwise: correctly within rounding, reproducible
BASELINE = {
    "verdict_tier": 0.0,
    "max_ulp": 2.0,
    "max_rel_fp64": 1e-7,
    "bound_ratio": 0.3,
    "typical_ratio": 0.2,
    "nonfinite": 0.0,
    "bits_differ_run_to_run": 0.0,
    "bits_differ_1_vs_all_threads": 0.0,
}

F_LINEAR, X_W_B = PARAMS[0]
SLOW = (F_LINEAR, 256, 1)
SAME = (X_W_B, 64, 1)
BEYOND = (X_W_B, 256, 1)
WITHIN = (F_LINEAR, 64, 1)


def digest(combo: tuple, version: int = 0) -> float:
    """A 52-bit output digest, as the suite records it; `version` stands for other output bits."""
    return float(int(hashlib.sha256(f"{combo}{version}".encode()).hexdigest()[:13], 16))


def measure(
    values: dict | None = None, noise: float = 0.002, seed: int = 0, samples: int = 10, time: dict | None = None
):
    """Every case at BASELINE; `values` overrides (metric, combo) -> value, `time` scales time_op."""
    rng = np.random.default_rng(seed)
    values, time = values or {}, time or {}

    def fn(bench: SyntheticBenchmark, combo: tuple):
        metric = bench.name.rsplit(".", 1)[-1].removeprefix("track_")
        if (metric, combo) in values:
            return values[metric, combo]
        if metric.startswith("time_"):  # time_op, and bench_references' timings where a test adds them
            seconds = 1e-9 * combo[1] ** 2 * (1.3 if combo[0] == X_W_B else 1.0) * time.get(combo, 1.0)
            return list(seconds * (1 + noise * rng.standard_normal(samples)))
        if metric == "output_digest":
            return digest(combo)
        return BASELINE[metric]

    return fn


UPGRADE = measure(
    {
        ("verdict_tier", BEYOND): 2.0,
        ("bound_ratio", BEYOND): 1.7,
        ("output_digest", BEYOND): digest(BEYOND, 1),
        ("max_ulp", WITHIN): 3.0,
        ("output_digest", WITHIN): digest(WITHIN, 1),
    },
    seed=2,
    time={SLOW: 1.5, SAME: 1.05},
)


def write_sets(
    root: Path, new=None, base=None, layout: str = "machines", fingerprints=(None, None), benchmarks=BENCHMARKS
) -> Path:
    """BASE and NEW at one commit: as two machines ("box-base", "box-new", env py3.11) or as two
    environments on one machine."""
    results = root / "results"
    write_benchmarks(results, benchmarks)
    base, new = base or measure(seed=1), new or UPGRADE
    if layout == "machines":
        sets = [("box-base", "py3.11", base), ("box-new", "py3.11", new)]
    else:
        sets = [
            ("bench-box", "virtualenv-py3.11-numpy2.3.5-scipy-openblas320.3.27.63.1", base),
            ("bench-box", "virtualenv-py3.11-numpy2.4.6-scipy-openblas320.3.30.0.8", new),
        ]
    for (machine, env, fn), fingerprint in zip(sets, fingerprints, strict=False):
        write_machine(results, machine)
        write_result_file(results, machine, env, COMMITS[0], DATES[0], benchmarks, fn, fingerprint)
    return results


def run_json(capsys, results: Path, base: str, new: str, *extra: str) -> tuple[int, dict]:
    done = run_main(capsys, "compare", base, new, "--results", results, "--json", *extra)
    return done.returncode, json.loads(done.stdout)


def by_case(report: dict) -> dict[tuple, dict]:
    return {(f"{r['impl']}@{r['dtype']}", r["size"], r["threads"]): r for r in report["rows"]}


@pytest.mark.parametrize(
    ("layout", "base", "new"),
    [
        ("machines", "box-base", "box-new"),
        (
            "envs",
            "virtualenv-py3.11-numpy2.3.5-scipy-openblas320.3.27.63.1",
            "virtualenv-py3.11-numpy2.4.6-scipy-openblas320.3.30.0.8",
        ),
    ],
)
def test_verdicts_and_exit_code(tmp_path, capsys, layout, base, new):
    code, report = run_json(capsys, write_sets(tmp_path, layout=layout), base, new)
    rows = by_case(report)
    assert code == 1 and report["verdict"] == "NOT SAFE"
    assert rows[BEYOND]["verdicts"] == ["now beyond rounding"] and rows[BEYOND]["bits"] == "changed beyond rounding"
    assert rows[SLOW]["verdicts"] == ["slower"] and rows[SLOW]["time_ratio"] == pytest.approx(1.5, rel=0.02)
    assert rows[SAME]["verdicts"] == ["unchanged"] and rows[SAME]["time_change"] == "same"
    assert rows[WITHIN]["verdicts"] == ["changed within rounding"] and rows[WITHIN]["bits"] == "changed within rounding"
    assert report["summary"][0] == (
        "NOT SAFE: 1 case left within rounding (1 now beyond rounding), 1 significant slowdown beyond 10%"
    )
    assert report["summary"][1] == (
        "bits: 6 bitwise identical, 1 changed beyond rounding, 1 changed within rounding (of 8 cases)"
    )
    assert [r["verdicts"][0] for r in report["rows"][:3]] == [
        "now beyond rounding",
        "slower",
        "changed within rounding",
    ]
    # a slowdown comes with the command that confirms it in the same results (a second results
    # directory, the old advice, gave a second decision and replaced the report and pages)
    assert report["summary"][3] == (
        f"confirm the slowdowns (bench_products.Linear): opbench compare {base!r} {new!r} --confirm (with this "
        "run's --results, --config and --profile) reruns the doubtful classes and decides once on both runs' samples"
    )


def test_two_identical_runs_compare_safe(tmp_path, capsys):
    """Different timing noise, the same bits: SAFE, every case bitwise identical, exit 0."""
    code, report = run_json(capsys, write_sets(tmp_path, new=measure(seed=7)), "box-base", "box-new")
    assert code == 0 and report["verdict"] == "SAFE"
    assert report["summary"][0] == "SAFE: no case left within rounding, no significant slowdown beyond 10%"
    assert len(report["summary"]) == 3  # no rerun to suggest
    assert report["bits"] == {"bitwise identical": 8}
    assert {r["time_change"] for r in report["rows"]} == {"same"}


@pytest.mark.parametrize(
    ("load", "verdict", "change"), [(1.2, "NOT SAFE", "slower"), (11.3, "INCONCLUSIVE", "inconclusive")]
)
def test_a_busy_machine_makes_time_differences_inconclusive(tmp_path, capsys, load, verdict, change):
    """The same software, NEW timed 1.5x slower: real on an idle 2-CPU machine, unattributable when
    a load average of 11 says other work competed (two identical runs under load measured 2.5x).
    torch changed, so the slowdown of torch:F.linear is the upgrade's, not a control's."""
    fingerprint = {"packages": {"numpy": "2.4.6", "torch": "2.12.0"}, "load": {"max_1min": load, "cpus": 2}}
    upgraded = fingerprint | {"packages": {"numpy": "2.4.6", "torch": "2.13.0"}}
    new = measure(seed=7, time={SLOW: 1.5})
    code, report = run_json(
        capsys, write_sets(tmp_path, new=new, fingerprints=(fingerprint, upgraded)), "box-base", "box-new"
    )
    assert report["verdict"] == verdict and code == {"NOT SAFE": 1, "INCONCLUSIVE": 3}[verdict]
    assert by_case(report)[SLOW]["time_change"] == change
    if load > 3:
        assert report["busy"] == [
            "load average up to 11.3 on 2 CPUs during BASE",
            "load average up to 11.3 on 2 CPUs during NEW",
        ]
        assert "the machine was busy" in report["summary"][0] and "rerun on an idle machine" in report["summary"][0]
    else:
        assert report["busy"] == []


def test_time_is_time_op_alone_when_a_class_times_more(tmp_path, capsys):
    """bench_references' classes time two things each (time_dgemm, time_exact_gemm): neither is an op's time."""
    references = [
        SyntheticBenchmark(f"bench_references.ExactGemm.{m}", "time", "seconds", PARAM_NAMES, PARAMS)
        for m in ("time_dgemm", "time_exact_gemm")
    ]
    results = write_sets(tmp_path, new=measure(seed=7), benchmarks=[*BENCHMARKS, *references])
    code, report = run_json(capsys, results, "box-base", "box-new")
    assert code == 0 and report["verdict"] == "SAFE" and len(report["rows"]) == 8


def test_gflops_never_outvotes_time(tmp_path, capsys):
    """The seed bug: x @ W.T + b went 9.66 ms -> 194 us but a separate GFLOP/s track said slower.
    GFLOP/s is now derived from time_op's own samples, and a legacy track_gflops is ignored."""
    case = (X_W_B, 256, 2)
    legacy = SyntheticBenchmark("bench_products.Linear.track_gflops", "track", "GFLOP/s", PARAM_NAMES, PARAMS)
    results = tmp_path / "results"
    write_benchmarks(results, [*BENCHMARKS, legacy])
    for machine, fn in (("box-base", measure(seed=1)), ("box-new", measure(seed=2, time={case: 194e-6 / 9.66e-3}))):
        write_machine(results, machine)

        def with_legacy(bench, combo, fn=fn, machine=machine):
            if bench is legacy:  # the old, separately timed rate claimed a 5x drop
                return 50.0 if machine == "box-base" else 10.0
            return fn(bench, combo)

        write_result_file(results, machine, "py3.11", COMMITS[0], DATES[0], [*BENCHMARKS, legacy], with_legacy)
    code, report = run_json(capsys, results, "box-base", "box-new")
    row = by_case(report)[case]
    assert row["time_change"] == "faster" and row["verdicts"] == ["faster"]
    assert row["gflops_new"] / row["gflops_base"] == pytest.approx(1 / row["time_ratio"], rel=1e-9)
    assert row["gflops_new"] > 40 * row["gflops_base"]
    assert code == 0


def test_wide_intervals_and_single_samples_are_inconclusive_never_slower(tmp_path, capsys):
    """A 71x change with intervals asv's test cannot separate, and one-sample (quick) timings:
    inconclusive, exit 3, never "slower"."""
    wide_base, wide_new = measure(noise=3.0, seed=1, samples=2), measure(noise=3.0, seed=2, samples=2, time={SLOW: 71})

    def base(bench, combo):
        return (wide_base if combo == SLOW else measure(seed=1, samples=1))(bench, combo)

    def new(bench, combo):
        return (wide_new if combo == SLOW else measure(seed=3, samples=1, time={SAME: 2.0}))(bench, combo)

    code, report = run_json(capsys, write_sets(tmp_path, base=base, new=new), "box-base", "box-new")
    rows = by_case(report)
    assert rows[SLOW]["time_change"] == "inconclusive" and rows[SAME]["time_change"] == "inconclusive"
    assert rows[SAME]["time_samples_new"] == 1 and rows[SAME]["time_ratio"] == pytest.approx(2.0, rel=0.01)
    assert not any("slower" in r["verdicts"] for r in report["rows"])
    assert code == 3 and report["verdict"] == "INCONCLUSIVE"
    assert report["summary"][0].startswith(
        "INCONCLUSIVE: no case left within rounding, no significant slowdown "
        "beyond 10%; but the speed of 8 of 8 timed cases is undecided"
    )


def test_mann_whitney_decides_where_there_are_enough_samples(tmp_path, capsys):
    """Overlapping 99% intervals, but 10 samples each, all slower: asv's U test calls it slower."""
    base = measure(noise=0.15, seed=1, samples=10)
    new = measure(noise=0.15, seed=2, samples=10, time={SLOW: 1.6})
    code, report = run_json(capsys, write_sets(tmp_path, base=base, new=new), "box-base", "box-new")
    row = by_case(report)[SLOW]
    assert row["time_change"] == "slower" and code == 1


def test_non_reproducible_case_is_compared_as_what_it_is(tmp_path, capsys):
    """torch.linalg.lstsq-like: bits and errors differ run to run; never a regression."""
    flaky = {("bits_differ_run_to_run", SAME): 1.0}
    base = measure(flaky, seed=1)
    new = measure(
        {**flaky, ("max_ulp", SAME): 5.0, ("typical_ratio", SAME): 0.4, ("output_digest", SAME): digest(SAME, 3)},
        seed=4,
    )
    code, report = run_json(capsys, write_sets(tmp_path, base=base, new=new), "box-base", "box-new")
    row = by_case(report)[SAME]
    assert row["verdicts"] == ["not reproducible"] and row["bits"] == "not reproducible"
    assert code == 0 and report["bits"] == {"bitwise identical": 7, "not reproducible": 1}


@pytest.mark.parametrize(
    ("tiers", "verdict", "code"),
    [
        ((1.0, 2.0), "now beyond rounding", 1),  # suspicious -> beyond
        ((0.0, 1.0), "now suspicious", 1),
        ((0.0, 3.0), "now undetermined", 1),
        ((2.0, 0.0), "now within rounding", 0),
        ((2.0, 2.0), "changed, still not within rounding", 0),
    ],
)
def test_tier_moves(tmp_path, capsys, tiers, verdict, code):
    base = measure({("verdict_tier", SAME): tiers[0]}, seed=1)
    new = measure({("verdict_tier", SAME): tiers[1], ("output_digest", SAME): digest(SAME, 1)}, seed=1)
    got, report = run_json(capsys, write_sets(tmp_path, base=base, new=new), "box-base", "box-new")
    assert by_case(report)[SAME]["verdicts"] == [verdict] and got == code


def test_results_without_tier_or_digest_use_the_bound_ratio_rule(tmp_path, capsys):
    """Results from before the tier and digest tracks: beyond rounding by bound ratio > 1 or a non-finite."""
    old = [b for b in BENCHMARKS if not b.name.endswith(("verdict_tier", "output_digest"))]
    results = tmp_path / "results"
    write_benchmarks(results, old)
    new = measure({("bound_ratio", BEYOND): 1.7, ("nonfinite", SAME): 2.0, ("max_ulp", WITHIN): 3.0}, seed=2)
    for machine, fn in (("box-base", measure(seed=1)), ("box-new", new)):
        write_machine(results, machine)
        write_result_file(results, machine, "py3.11", COMMITS[0], DATES[0], old, fn)
    code, report = run_json(capsys, results, "box-base", "box-new")
    rows = by_case(report)
    assert rows[BEYOND]["verdicts"] == rows[SAME]["verdicts"] == ["now beyond rounding"]
    assert rows[WITHIN]["verdicts"] == ["changed within rounding"]
    assert rows[(F_LINEAR, 256, 2)]["bits"] == "no digest" and code == 1


FINGERPRINT = {
    "python": "3.11.7",
    "versions": {"numpy": "2.3.5", "torch": "2.13.0+cpu"},
    "blas_providers": {
        "loaded": [
            {
                "name": "scipy-openblas32",
                "vendor": "OpenBLAS",
                "version": "0.3.27",
                "architecture": "Cooperlake",
                "threading_layer": "pthreads",
                "num_threads": 2,
            }
        ]
    },
    "env": {},
}
UPGRADED = FINGERPRINT | {
    "versions": {"numpy": "2.4.6", "torch": "2.13.0+cpu"},
    "blas_providers": {
        "loaded": [
            {
                "name": "scipy-openblas32",
                "vendor": "OpenBLAS",
                "version": "0.3.30",
                "architecture": "SkylakeX",
                "threading_layer": "pthreads",
                "num_threads": 2,
            }
        ]
    },
    "env": {"OPENBLAS_CORETYPE": "SkylakeX"},
}


def test_header_shows_the_stack_difference_and_parameters_as_given(tmp_path, capsys):
    results = write_sets(tmp_path, fingerprints=(FINGERPRINT, UPGRADED))
    assert cli.main(["compare", "box-base", "box-new", "--results", str(results)]) == 1
    lines = capsys.readouterr().out.splitlines()
    stack = lines[lines.index(next(line for line in lines if line.startswith("stack "))) :][:5]
    assert [line.split() for line in stack[2:]] == [
        [
            "blas",
            "scipy-openblas32",
            "OpenBLAS",
            "0.3.27",
            "Cooperlake,",
            "pthreads,",
            "2",
            "threads",
            "OpenBLAS",
            "0.3.30",
            "SkylakeX,",
            "pthreads,",
            "2",
            "threads",
        ],
        ["knob", "OPENBLAS_CORETYPE", "-", "SkylakeX"],
        ["package", "numpy", "2.3.5", "2.4.6"],
    ]
    header = next(line for line in lines if line.startswith("op "))
    row = next(line for line in lines if "now beyond rounding" in line and line.startswith("Linear"))
    size, threads = header.index(" size ") + 1, header.index(" threads ") + 1
    assert (row[size:].split()[0], row[threads:].split()[0]) == ("256", "1")
    assert "256.0" not in "\n".join(lines)


def test_names_by_prefix_and_by_package_version(tmp_path, capsys):
    results = write_sets(tmp_path, layout="envs")
    assert run_json(capsys, results, "virtualenv-py3.11-numpy2.3", "virtualenv-py3.11-numpy2.4")[0] == 1
    code, report = run_json(capsys, results, "numpy==2.3.5", "numpy==2.4.6,scipy-openblas32==0.3.30")
    assert code == 1 and report["base"]["matched_on"] == "package versions"
    assert report["new"]["env_names"] == ["virtualenv-py3.11-numpy2.4.6-scipy-openblas320.3.30.0.8"]
    # fingerprints win over the environment name where they name the package
    fingerprinted = write_sets(tmp_path / "fp", fingerprints=(FINGERPRINT, UPGRADED))
    assert run_json(capsys, fingerprinted, "numpy==2.3", "numpy==2.4.6")[1]["new"]["machines"] == ["box-new"]


@pytest.mark.parametrize(
    ("base", "message"),
    [
        ("virtualenv-py3.11-numpy2", "BASE 'virtualenv-py3.11-numpy2' is ambiguous: it matches 2 environments"),
        ("scipy-openblas32==0.3", "BASE 'scipy-openblas32==0.3' is ambiguous: it matches 2 environments"),
        ("numpy==9.9", "BASE 'numpy==9.9' names no result set"),
    ],
)
def test_ambiguous_or_unknown_names_exit_2(tmp_path, capsys, base, message):
    results = write_sets(tmp_path, layout="envs")
    assert cli.main(["compare", base, "numpy==2.4.6", "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"opbench: error: {message}")


def test_newly_failing_is_not_safe(tmp_path, capsys):
    new = measure({("max_ulp", WITHIN): None, ("verdict_tier", WITHIN): None}, seed=1)
    code, report = run_json(capsys, write_sets(tmp_path, new=new), "box-base", "box-new")
    assert code == 1 and by_case(report)[WITHIN]["verdicts"] == ["newly failing"]
    assert report["summary"][0] == "NOT SAFE: 1 newly failing"


def test_commit_prefix_and_latest_commit_of_a_machine(tmp_path, capsys):
    """One machine with history: a machine name means its latest commit; prefixes pick commits."""
    results = tmp_path / "results"
    write_benchmarks(results, BENCHMARKS)
    write_machine(results, "bench-box")
    write_result_file(results, "bench-box", "py3.11", COMMITS[0], DATES[0], BENCHMARKS, measure(seed=1))
    write_result_file(results, "bench-box", "py3.11", COMMITS[1], DATES[1], BENCHMARKS, UPGRADE)
    code, report = run_json(capsys, results, COMMITS[0][:8], COMMITS[1][:10])
    assert code == 1 and by_case(report)[BEYOND]["verdicts"] == ["now beyond rounding"]
    assert report["base"]["commit_hash"] == COMMITS[0] and report["new"]["commit_hash"] == COMMITS[1]
    # the machine's name means its latest commit: the very set the prefix names, which is bad input
    assert cli.main(["compare", COMMITS[1][:8], "bench-box", "--results", str(results)]) == 2
    assert "are the same result set (1 results file)" in capsys.readouterr().err


def test_csv_output(tmp_path, capsys):
    results = write_sets(tmp_path)
    out = tmp_path / "out" / "cmp.csv"
    assert cli.main(["compare", "box-base", "box-new", "--results", str(results), "--csv", str(out)]) == 1
    frame = pd.read_csv(out)
    assert len(frame) == 8 and frame["verdict"].iloc[0] == "now beyond rounding"
    assert frame["size"].dtype.kind == "i" and frame["threads"].dtype.kind == "i"


@pytest.mark.slow
def test_unknown_name_is_one_line_exit_2(tmp_path):
    results = write_sets(tmp_path)
    done = run_opbench("compare", "box-base", "no-such-box", "--results", str(results))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "NEW 'no-such-box'" in done.stderr and "box-base, box-new" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    "args",
    [
        ("box-base", "box-new", "--time-threshold", "0.9"),  # threshold must be above 1
        ("box-base", "box-new", "--results", "{tmp}/missing"),  # no results directory
    ],
)
def test_bad_input_exits_2(tmp_path, capsys, args):
    write_sets(tmp_path)
    args = [a.format(tmp=tmp_path) for a in args]
    if "--results" not in args:
        args += ["--results", str(tmp_path / "results")]
    assert cli.main(["compare", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("opbench: error: ")


def test_ambiguous_machine_and_commit_names_exit_2(tmp_path, capsys):
    results = tmp_path / "results"
    write_benchmarks(results, BENCHMARKS)
    write_machine(results, "py3.11")  # a machine named like the environment
    commits = ["abcd" + "1" * 36, "abcd" + "2" * 36]
    for commit, date in zip(commits, DATES, strict=False):
        write_result_file(results, "py3.11", "py3.11", commit, date, BENCHMARKS, measure(seed=1))
    assert cli.main(["compare", "py3.11", "abcd1", "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert "BASE 'py3.11' is ambiguous" in err and err.count("\n") == 1
    assert cli.main(["compare", "abcd", "abcd2", "--results", str(results)]) == 2
    assert "BASE 'abcd' is ambiguous: it matches 2 commits" in capsys.readouterr().err
    assert cli.main(["compare", "abcd1", "abcd2", "--results", str(results)]) == 0


@pytest.mark.slow
def test_corrupt_new_file_exits_2_with_one_line(tmp_path):
    results = write_sets(tmp_path)
    path = results / "box-new" / f"{COMMITS[0][:8]}-py3.11.json"
    path.write_text(path.read_text()[:200])
    done = run_opbench("compare", "box-base", "box-new", "--results", str(results))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "unreadable" in done.stderr


def test_the_reports_changes_section_and_compare_give_one_decision(tmp_path, capsys):
    """Issue 22 #5: on a busy machine the report said "faster" where compare said "inconclusive"."""
    from accuracy.report.answers import changes
    from accuracy.report.load import load_results

    busy = {"packages": {"numpy": "2.4.6"}, "load": {"max_1min": 11.3, "cpus": 2}}
    results = write_sets(tmp_path, new=measure(seed=7, time={SLOW: 1.5, SAME: 0.5}), fingerprints=(busy, busy))
    section = changes(load_results(results).frame, results)
    code, report = run_json(capsys, results, section.base, section.new)
    assert section.summary == report["summary"]
    assert code == 3 and section.summary[0].startswith("INCONCLUSIVE") and "the machine was busy" in section.summary[0]


@pytest.mark.slow  # end to end: opbench in its own process
def test_a_set_compared_with_itself_is_one_line_exit_2(tmp_path):
    results = write_sets(tmp_path)
    proc = run_opbench("compare", "box-new", "box-new", "--results", str(results))
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert proc.stderr.splitlines() == [
        "opbench: error: BASE 'box-new' and NEW 'box-new' are the same result set (1 results file): "
        "name two different sets to compare"
    ]


def test_overlapping_sets_are_said_to_overlap(tmp_path, capsys):
    """BASE one environment, NEW the whole machine (both environments): one file is in both."""
    base_env = "virtualenv-py3.11-numpy2.3.5-scipy-openblas320.3.27.63.1"
    results = write_sets(tmp_path, layout="envs")
    code, report = run_json(capsys, results, base_env, "bench-box")
    assert code == 0  # the shared environment is paired with itself (env_name is a key): unchanged
    overlap = [line for line in report["summary"] if line.startswith("BASE and NEW overlap")]
    assert overlap == [report["overlap"]] and "1 results file in both (bench-box/" in overlap[0], report["summary"]
    _, report = run_json(capsys, results, base_env, "virtualenv-py3.11-numpy2.4.6-scipy-openblas320.3.30.0.8")
    assert report["overlap"] is None and not any("overlap" in line for line in report["summary"])


def test_an_infinite_error_is_null_with_its_reason_in_strict_json(tmp_path, capsys):
    """max_ulp inf (an overflow) and a ratio that does not apply (NaN): strict JSON, never "inf"."""
    new = measure({("max_ulp", BEYOND): np.inf, ("typical_ratio", BEYOND): np.nan, ("verdict_tier", BEYOND): 2.0})
    done = run_main(capsys, "compare", "box-base", "box-new", "--results", write_sets(tmp_path, new=new), "--json")

    def refuse(token: str):
        raise ValueError(f"not JSON: {token}")

    assert done.returncode == 1, done.stderr
    row = by_case(json.loads(done.stdout, parse_constant=refuse))[BEYOND]
    assert row["max_ulp_base"] == 2.0 and row["max_ulp_new"] is None and row["max_ulp_new_reason"] == "inf"
    assert row["verdicts"] == ["now beyond rounding"]


# Two stacks where only torch changed: numpy's cases are the controls of torch's.
TORCH_BEFORE = {"python": "3.11.7", "versions": {"numpy": "2.4.6", "torch": "2.12.0"}}
TORCH_AFTER = TORCH_BEFORE | {"versions": {"numpy": "2.4.6", "torch": "2.13.0"}}
ENVS = (  # BASE and NEW as two environments on one machine (write_sets' "envs" layout)
    "virtualenv-py3.11-numpy2.3.5-scipy-openblas320.3.27.63.1",
    "virtualenv-py3.11-numpy2.4.6-scipy-openblas320.3.30.0.8",
)
ALL_CASES = [(impl, size, threads) for impl in PARAMS[0] for size in PARAMS[1] for threads in PARAMS[2]]


@settings(max_examples=8, deadline=None)
@given(
    scale=st.floats(1.2, 3.0),
    stacks=st.sampled_from([(TORCH_BEFORE, TORCH_AFTER), (TORCH_BEFORE, TORCH_BEFORE)]),
)
def test_a_machine_that_got_slower_is_never_not_safe(scale, stacks):
    """Issue 44: every time scaled by the same factor (the machine, not the software) is judged
    against the unchanged implementations' drift: SAFE or INCONCLUSIVE, never NOT SAFE."""
    with tempfile.TemporaryDirectory() as tmp:
        new = measure(seed=7, time=dict.fromkeys(ALL_CASES, scale))
        results = write_sets(Path(tmp), new=new, layout="envs", fingerprints=stacks)
        comparison = compare_results(results, *ENVS)
    code, report = comparison.exit_code, comparison.to_json()
    assert report["verdict"] in ("SAFE", "INCONCLUSIVE") and code in (0, 3), report["summary"]
    assert report["controls"]["drift"] == pytest.approx(scale, rel=0.01)
    assert f"unchanged controls ({report['controls']['cases']} cases of numpy" in report["summary"][0]


def test_a_slowdown_is_measured_beyond_the_controls(tmp_path, capsys):
    """The machine ran 1.4x slower in NEW, and torch:F.linear (whose library changed) 1.5x beyond
    that: NOT SAFE for that case only, and the verdict line says what it was judged against."""
    time = dict.fromkeys(ALL_CASES, 1.4) | {SLOW: 1.4 * 1.5}
    new = measure(seed=7, time=time)
    results = write_sets(tmp_path, new=new, layout="envs", fingerprints=(TORCH_BEFORE, TORCH_AFTER))
    code, report = run_json(capsys, results, *ENVS)
    rows = by_case(report)
    assert code == 1 and [r["verdicts"] for r in report["rows"]].count(["slower"]) == 1
    assert rows[SLOW]["time_ratio"] == pytest.approx(2.1, rel=0.01) and rows[SLOW]["control"] is False
    assert {rows[c]["control"] for c in ALL_CASES if c[0] == X_W_B} == {True}
    assert report["summary"][0] == (
        "NOT SAFE: 1 significant slowdown beyond 10% (unchanged controls (4 cases of numpy) moved 1.40x "
        "(median); torch:F.linear 1.50x beyond them)"
    )


def test_the_table_marks_the_controls(tmp_path, capsys):
    results = write_sets(tmp_path, layout="envs", fingerprints=(TORCH_BEFORE, TORCH_AFTER))
    lines = run_main(capsys, "compare", *ENVS, "--results", results).stdout.splitlines()
    cases = [line for line in lines if line.startswith("Linear ")]
    assert len(cases) == 8 and all(line.rstrip().endswith("(control)") == ("numpy:" in line) for line in cases)
    assert "(control): an implementation whose libraries did not change; the others are judged against them" in lines


def test_a_control_that_moved_is_inconclusive_never_slower(tmp_path, capsys):
    """np x @ W.T + b 1.5x slower with numpy unchanged: the machine or noise, never the upgrade."""
    new = measure(seed=7, time={SAME: 1.5})
    results = write_sets(tmp_path, new=new, layout="envs", fingerprints=(TORCH_BEFORE, TORCH_AFTER))
    code, report = run_json(capsys, results, *ENVS)
    row = by_case(report)[SAME]
    assert row["control"] is True and row["time_change"] == "inconclusive" and row["verdicts"] == ["speed inconclusive"]
    assert code == 3 and report["verdict"] == "INCONCLUSIVE"
    assert "1 control moved beyond the controls' median" in report["summary"][0]


def test_two_machines_have_no_controls(tmp_path, capsys):
    """Comparing machines, the machine is what changed: a slowdown there is not a drift to allow for."""
    new = measure(seed=7, time=dict.fromkeys(ALL_CASES, 1.6))
    results = write_sets(tmp_path, new=new, fingerprints=(TORCH_BEFORE, TORCH_BEFORE))
    code, report = run_json(capsys, results, "box-base", "box-new")
    assert report["controls"] is None and code == 1 and report["counts"]["slower"] == 8


def test_a_commit_that_spans_environments_of_different_stacks_is_refused(tmp_path, capsys):
    """`compare <commit> ENV`: the commit covered two matrix environments and compare merged them,
    printing a "(varies)" row for every package; now one line names the environments to choose."""
    base_env, new_env = "virtualenv-py3.11-numpy2.3.5", "virtualenv-py3.11-numpy2.4.6"
    results = tmp_path / "results"
    write_benchmarks(results, BENCHMARKS)
    write_machine(results, "bench-box")
    for env, stack in ((base_env, FINGERPRINT), (new_env, UPGRADED)):
        write_result_file(results, "bench-box", env, COMMITS[0], DATES[0], BENCHMARKS, measure(seed=1), stack)
    write_result_file(results, "bench-box", new_env, COMMITS[1], DATES[1], BENCHMARKS, UPGRADE, UPGRADED)
    done = run_main(capsys, "compare", COMMITS[0][:8], new_env, "--results", results)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"opbench: error: BASE '{COMMITS[0][:8]}' covers 2 environments with different stacks "
        f"({base_env}, {new_env}): name one of them instead\n"
    )
    # against the later commit, which ran in one of the two environments only: refused too
    assert run_main(capsys, "compare", COMMITS[0][:8], COMMITS[1][:8], "--results", results).returncode == 2
    assert run_main(capsys, "compare", base_env, new_env, "--results", results).returncode == 1


def test_confirm_adds_samples_beside_the_first_and_decides_once(tmp_path, capsys, monkeypatch):
    """Issue 44 #2: a slow spell in NEW's run made torch:F.linear "slower". --confirm reruns that
    class at the sets' commit in their asv environments, with asv's --append-samples, into the
    same results: 30 more samples each side, at the same speed, and one decision on all 40:
    the slowdown was the spell. No second results directory, no report, no pages."""
    from accuracy.run import driver

    base_env, new_env = ENVS
    results = write_sets(tmp_path, new=measure(seed=2, time={SLOW: 1.5}), layout="envs")
    assert by_case(run_json(capsys, results, base_env, new_env)[1])[SLOW]["time_change"] == "slower"
    calls = []

    def second_run(**kwargs):  # what asv run --append-samples leaves
        calls.append(kwargs)
        for env, seed in ((base_env, 3), (new_env, 4)):
            path = results / "bench-box" / f"{COMMITS[0][:8]}-{env}.json"
            append_samples(results, path, BENCHMARKS, measure(seed=seed, samples=30))

    monkeypatch.setattr(driver, "run_suite", second_run)
    code, report = run_json(capsys, results, base_env, new_env, "--confirm", "--config", "asv.blas-upgrade.conf.json")
    assert [(c["bench"], c["commits"], c["append_samples"], c["publish"], c["machine"]) for c in calls] == [
        (r"^(bench_products\.Linear)\.", f"{COMMITS[0]}^!", True, False, "bench-box")
    ]
    assert calls[0]["config"] == Path("asv.blas-upgrade.conf.json")
    row = by_case(report)[SLOW]
    assert (row["time_samples_base"], row["time_samples_new"]) == (40, 40)
    assert row["time_change"] == "same" and code == 0 and report["confirmed"] is True
    assert (
        report["summary"][-1]
        == "decided once on both runs' samples (compare --confirm added the second beside the first)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]  # no html/, no reports/


def test_confirm_reruns_on_one_machine_only(tmp_path, capsys):
    results = write_sets(tmp_path, new=measure(seed=2, time={SLOW: 1.5}))
    done = run_main(capsys, "compare", "box-base", "box-new", "--results", results, "--confirm")
    assert done.returncode == 2 and done.stderr == (
        "opbench: error: --confirm reruns on one machine; BASE and NEW were measured on box-base, box-new\n"
    )


@pytest.mark.slow  # asv runs the tiny project's suite twice, in its virtualenv
@pytest.mark.xdist_group("tiny-asv")  # test_asv_suite's virtualenv, created once (tiny_repo)
def test_a_rerun_with_append_samples_keeps_the_first_samples_and_leaves_the_pages(request, tmp_path):
    """What --confirm runs: the same commit again, --append-samples, publish=False."""
    from accuracy.run.driver import run_suite

    repo = request.getfixturevalue("tiny_repo")  # test_asv_suite's three-commit project with a time benchmark

    results, html = tmp_path / "results", tmp_path / "html"
    config = repo / "asv.conf.json"
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    common = {"config": config, "results": results, "html": html, "machine": "ci", "quick": False}
    common |= {"bench": "time_sum", "commits": f"{head.strip()}^!", "profile": None, "knobs": {}, "verbose": False}

    def samples() -> int:
        (path,) = [p for p in (results / "ci").glob("*.json") if p.name != "machine.json"]
        data = json.loads(path.read_text())
        row = dict(zip(data["result_columns"], data["results"]["bench_tiny.time_sum"], strict=False))
        return len(row["samples"][0])

    run_suite(**common)
    first, pages = samples(), {p: p.stat().st_mtime_ns for p in html.rglob("*") if p.is_file()}
    outcome = run_suite(**common, append_samples=True, publish=False)
    assert outcome.written and samples() == 2 * first > 0
    assert {p: p.stat().st_mtime_ns for p in html.rglob("*") if p.is_file()} == pages
