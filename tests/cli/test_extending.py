"""The README's "Extending" section, done for real: a new op and a new backend, each declared once
in a module of their own (a package found through the `opbench.ops` / `opbench.backends` entry
points), show up in `opbench list`, in `opbench explain` and in the generated asv classes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_opbench

ROOT = Path(__file__).resolve().parents[2]

PLUGIN = '''
"""An op and a backend, each one declaration."""
import mpmath
import numpy as np

from accuracy.backends.base import Backend
from accuracy.catalog.ops.common import elementwise_op
from accuracy.catalog.registry import Impl


class UpcastNumpy(Backend):
    """numpy computing in float64 and rounding once to the storage dtype."""

    name = "numpy-upcast"

    def to_native(self, array):
        return np.asarray(array, dtype=np.float64)


BACKENDS = [UpcastNumpy()]

OPS = [elementwise_op(
    "cube", low=-3.0, high=3.0, np64=lambda x: x**3, mp=lambda x: x**3, oracle=lambda x: x * x * x, k=4,
    doc="x**3 on [-3, 3]",
    impls=[
        Impl("numpy", "x * x * x", lambda ns, x: x * x * x, ("float32", "float64")),
        Impl("numpy-upcast", "x**3 in float64", lambda ns, x: x**3, ("float32",)),
    ],
)]
'''


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> Path:
    """A package installed the way pip leaves one: the module plus its dist-info entry points."""
    root = tmp_path_factory.mktemp("site")
    (root / "opbench_cube.py").write_text(textwrap.dedent(PLUGIN))
    info = root / "opbench_cube-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: opbench-cube\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[opbench.ops]\ncube = opbench_cube\n\n[opbench.backends]\nupcast = opbench_cube\n"
    )
    return root


def _finding(plugin_path: Path) -> dict[str, str]:
    """The environment in which Python finds the plugin (and this checkout of opbench)."""
    return {"PYTHONPATH": os.pathsep.join([str(plugin_path), str(ROOT)])}


def test_a_new_op_and_backend_appear_in_list(plugin_path):
    out = run_opbench("list", "--json", env=_finding(plugin_path))
    assert out.returncode == 0, out.stderr
    cube = next(o for o in json.loads(out.stdout) if o["op"] == "cube")
    assert cube["family"] == "plugins"
    assert {i["name"] for i in cube["implementations"]} == {"numpy:x * x * x", "numpy-upcast:x**3 in float64"}


def test_a_new_op_and_backend_are_explained_against_the_exact_reference(plugin_path):
    out = run_opbench("explain", "cube", "--dtype", "float32", "--json", env=_finding(plugin_path))
    assert out.returncode == 0, out.stderr
    rows = {r["impl"]: r for r in json.loads(out.stdout)["implementations"]}
    # float64 evaluation rounded once: within an ulp of the correctly rounded cube
    assert rows["numpy-upcast:x**3 in float64"]["max_ulp"] <= 0.5 + 2**-28
    # two float32 roundings: more than the upcast one, still a few ulps
    assert 0.5 < rows["numpy:x * x * x"]["max_ulp"] < 4


def test_a_new_op_judges_outputs_brought_to_check(plugin_path, tmp_path):
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    np.save(tmp_path / "upcast.npy", (x.astype(np.float64) ** 3).astype(np.float32))  # rounded once
    np.save(tmp_path / "off.npy", x**3 * np.float32(1.001))
    out = run_opbench(
        "check",
        "cube",
        "--inputs",
        str(tmp_path / "in.npz"),
        "--json",
        f"--output=upcast={tmp_path / 'upcast.npy'}",
        f"--output=off={tmp_path / 'off.npy'}",
        env=_finding(plugin_path),
    )
    assert out.returncode == 1, out.stderr
    rows = {r["label"]: r for r in json.loads(out.stdout)["outputs"]}
    assert rows["upcast"]["verdict"] == "within rounding" and rows["upcast"]["max_ulp"] <= 0.5
    assert rows["off"]["verdict"] in ("suspicious", "beyond rounding") and rows["off"]["max_ulp"] > 1000


def test_a_new_op_gets_generated_asv_classes(plugin_path):
    code = "from benchmarks import bench_plugins as b; print(b.Cube.op_name, b.Cube.params[0])"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **_finding(plugin_path)},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("cube ") and "numpy-upcast:x**3 in float64@float32" in out.stdout


def test_a_broken_plugin_is_left_out_with_one_warning(tmp_path):
    info = tmp_path / "broken-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[opbench.ops]\nbroken = no_such_module_here\n")
    out = run_opbench("list", "--json", env=_finding(tmp_path))
    assert out.returncode == 0
    assert any(o["op"] == "matmul" for o in json.loads(out.stdout))
    assert out.stderr.count("warning: plugin 'broken'") == 1 and "Traceback" not in out.stderr


def test_the_catalog_is_complete_whichever_op_module_is_imported_first():
    from accuracy.catalog.registry import OP_MODULES, all_ops

    expected = len(all_ops())
    code = (
        "import importlib, sys; importlib.import_module('accuracy.catalog.ops.' + sys.argv[1]); "
        "from accuracy.catalog.registry import all_ops; print(len(all_ops()))"
    )
    for subject in OP_MODULES:
        out = subprocess.run(
            [sys.executable, "-c", code, subject], capture_output=True, text=True, cwd=ROOT, timeout=120
        )
        assert out.returncode == 0, out.stderr
        assert int(out.stdout) == expected, subject


def test_every_op_family_is_the_subject_module_that_declares_it():
    import importlib

    from accuracy.catalog.registry import OP_MODULES, all_ops

    declared = {
        op.name: subject
        for subject in OP_MODULES
        for op in importlib.import_module(f"accuracy.catalog.ops.{subject}").OPS
    }
    assert {op.name: op.family for op in all_ops() if op.family in OP_MODULES} == declared
    assert all(declared.values())
