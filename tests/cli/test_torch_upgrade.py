"""The torch upgrade matrix (asv.torch-upgrade.conf.json): its environments are what the docs say,
its install step keeps each environment's torch, and `opbench compare` reads bench_models' model
tracks, the results it gives (docs/upgrades.md, "Torch upgrade")."""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from asv.config import Config
from asv.environment import iter_matrix
from cli_runner import run_main
from packaging.requirements import Requirement
from packaging.version import Version

from accuracy.judge.metric_table import BY_NAME, METRICS, MODEL_TIME_BENCHMARK, MODELS
from accuracy.report.synthetic import SyntheticBenchmark, write_benchmarks, write_machine, write_result_file
from accuracy.run import matrix_install
from benchmarks import bench_models

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "asv.torch-upgrade.conf.json"
HELD = ("torch", "torchvision")


def environments() -> list[dict[str, str]]:
    """The matrix's environments as asv itself expands them: package -> version for each."""
    conf = Config.load(str(CONFIG))
    return [
        {name: version for (kind, name), version in combo.items() if kind == "req"}
        for combo in iter_matrix(conf.environment_type, conf.pythons, conf)
    ]


def pins(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", path.read_text(), flags=re.MULTILINE))


def test_the_matrix_is_this_stack_and_one_upgrade_and_the_docs_name_it():
    envs = environments()
    assert [sorted(env) for env in envs] == [sorted(HELD)] * 2
    base, new = envs
    project = pins(ROOT / "constraints.txt")
    assert base == {name: project[name] for name in HELD}  # BASE is this project's own pins
    for name in HELD:  # NEW upgrades both
        assert Version(new[name]) > Version(base[name])
    compare = f"opbench compare torch=={base['torch']} torch=={new['torch']}"
    section = (ROOT / "docs" / "upgrades.md").read_text().split("## Torch upgrade")[1].split("\n## ")[0]
    section = " ".join(section.split())  # as read, whatever the line breaks
    assert compare in section and compare in CONFIG.read_text()
    assert f"torch {base['torch']} (torchvision {base['torchvision']})" in section
    assert f"torch {new['torch']} (torchvision {new['torchvision']})" in section


def test_the_install_step_holds_the_matrix_packages_and_installs_the_rest_pinned():
    conf = Config.load(str(CONFIG))
    step = shlex.split(conf.install_command[-1])
    assert step[1:4] == ["python", "-m", matrix_install.__name__] and tuple(step[6:]) == HELD
    extras = step[5].split(",")
    held = {"torch": "2.99.0", "torchvision": "0.114.0"}
    chosen = [Requirement(r) for r in matrix_install.requirements(extras, held)]
    assert all(r.marker is None for r in chosen)  # pip reads an extra's marker as false: chosen here
    wanted = {r.name for r in chosen}
    declared = {Requirement(r).name for r in importlib.metadata.requires("opbench") or []}
    assert not wanted & set(HELD) and {"numpy", "mkl", "onnxruntime", "transformers"} <= wanted <= declared
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    rewritten = matrix_install.constraints(lines, held)
    assert pins_of(rewritten) == pins_of(lines) | held  # the rest exactly as constraints.txt pins it


def test_a_torchvision_built_for_another_torch_stops_the_install():
    here = {"torch": importlib.metadata.version("torch"), "torchvision": importlib.metadata.version("torchvision")}
    assert matrix_install.mismatched(here) == []
    declared = [Requirement(r) for r in importlib.metadata.requires("torchvision") or []]
    required = next(r for r in declared if r.name == "torch")
    other = here | {"torch": "2.99.0"}
    assert matrix_install.mismatched(other) == [
        f"torchvision {here['torchvision']} requires {required}; the environment has torch 2.99.0"
    ]


def pins_of(lines: list[str]) -> dict[str, str]:
    return dict(m.groups() for line in lines if (m := re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)))


# bench_models' own names: its class, methods, ports and units
CLASS = f"bench_models.{bench_models.SmallModelPorts.__name__}"
TIER, ERROR = BY_NAME["worst_layer_tier"], BY_NAME["output_relative_error"]
MODEL_METRICS = [m for m in METRICS if m.suite == MODELS]
BENCHMARKS = [
    SyntheticBenchmark(f"{CLASS}.{MODEL_TIME_BENCHMARK}", "time", "seconds", ("port",), (bench_models.PORTS,))
] + [SyntheticBenchmark(f"{CLASS}.{m.track}", "track", m.unit, ("port",), (bench_models.PORTS,)) for m in MODEL_METRICS]
COMMIT = hashlib.sha1(b"torch upgrade").hexdigest()
TORCHSCRIPT, ONNXRUNTIME = "torchscript", "onnxruntime"


def test_model_tracks_are_the_metric_tables():
    for metric in MODEL_METRICS:
        assert getattr(bench_models.SmallModelPorts, metric.track).unit == metric.unit
    assert hasattr(bench_models.SmallModelPorts, MODEL_TIME_BENCHMARK)


def model_results(tmp_path: Path, new_values: dict) -> Path:
    """BASE torch 2.13.0 and NEW 2.14.1, one environment each, one commit: every port within
    rounding at a relative error of 1e-7, 20 ms end to end; `new_values` ((metric, port) -> value)
    changes NEW."""
    results = tmp_path / "results"
    write_machine(results, "box")
    write_benchmarks(results, BENCHMARKS)
    date = datetime.datetime(2026, 11, 29, tzinfo=datetime.UTC)
    for seed, torch, changes in ((0, "2.13.0", {}), (1, "2.14.1", new_values)):
        rng = np.random.default_rng(seed)

        def measure(bench, combo, changes=changes, rng=rng):
            metric = bench.name.rsplit(".", 1)[-1].removeprefix("track_")
            if bench.kind == "time":
                return list(0.02 * (1 + 0.002 * rng.standard_normal(10)))
            return changes.get((metric, combo[0]), 0.0 if metric == TIER.name else 1e-7)

        fingerprint = {"python": "3.11.7", "versions": {"torch": torch}, "load": {"max_1min": 1.0, "cpus": 2}}
        env = f"virtualenv-py3.11-torch{torch}"
        write_result_file(results, "box", env, COMMIT, date, BENCHMARKS, measure, fingerprint)
    return results


def test_compare_reads_model_tracks_a_port_leaving_within_rounding_is_not_safe(tmp_path, capsys):
    results = model_results(tmp_path, {(TIER.name, TORCHSCRIPT): 2.0, (ERROR.name, ONNXRUNTIME): 1.3e-7})
    done = run_main(capsys, "compare", "torch==2.13.0", "torch==2.14.1", "--results", results, "--json")
    report = json.loads(done.stdout)
    rows = {r["impl"]: r for r in report["rows"]}
    assert done.returncode == 1 and set(rows) == set(bench_models.PORTS)
    assert rows[TORCHSCRIPT]["verdicts"] == ["now beyond rounding"]
    assert rows[ONNXRUNTIME]["verdicts"] == ["changed within rounding"]
    assert rows[ONNXRUNTIME]["output_relative_error_new"] == pytest.approx(1.3e-7)
    assert {r["time_change"] for r in rows.values()} == {"same"}
    assert report["summary"][0] == "NOT SAFE: 1 case left within rounding (1 now beyond rounding)"
    assert report["stack_difference"] == [{"what": "package torch", "base": "2.13.0", "new": "2.14.1"}]
    assert report["controls"] is None  # every port runs on torch: none is a control


def test_compare_table_shows_the_model_columns(tmp_path, capsys):
    results = model_results(tmp_path, {(ERROR.name, ONNXRUNTIME): 1.3e-7})
    done = run_main(capsys, "compare", "torch==2.13.0", "torch==2.14.1", "--results", results)
    header = next(line for line in done.stdout.splitlines() if line.startswith("op "))
    assert done.returncode == 0 and TIER.column in header and ERROR.column in header
    assert done.stdout.splitlines()[-3].startswith("SAFE: no case left within rounding")
