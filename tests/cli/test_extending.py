"""docs/architecture.md's "Extending" section, done for real: a new op and a new backend, each declared once
in a module of their own (a package found through the `opbench.ops` / `opbench.backends` entry
points), show up in `opbench list`, in `opbench explain` and in the generated asv classes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_main, run_opbench

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


@pytest.mark.slow  # end to end: the plugin is found by a fresh process
def test_a_new_op_and_backend_appear_in_list(plugin_path):
    out = run_opbench("list", "--json", env=_finding(plugin_path))
    assert out.returncode == 0, out.stderr
    cube = next(o for o in json.loads(out.stdout) if o["op"] == "cube")
    assert cube["family"] == "plugins"
    assert {i["name"] for i in cube["implementations"]} == {"numpy:x * x * x", "numpy-upcast:x**3 in float64"}


@pytest.mark.slow  # end to end: the plugin is found by a fresh process
def test_a_new_op_and_backend_are_explained_against_the_exact_reference(plugin_path):
    out = run_opbench("explain", "cube", "--dtype", "float32", "--json", env=_finding(plugin_path))
    assert out.returncode == 0, out.stderr
    rows = {r["impl"]: r for r in json.loads(out.stdout)["implementations"]}
    # float64 evaluation rounded once: within an ulp of the correctly rounded cube
    assert rows["numpy-upcast:x**3 in float64"]["max_ulp"] <= 0.5 + 2**-28
    # two float32 roundings: more than the upcast one, still a few ulps
    assert 0.5 < rows["numpy:x * x * x"]["max_ulp"] < 4


@pytest.mark.slow  # end to end: the plugin is found by a fresh process
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


@pytest.mark.slow  # end to end: the plugin is found by a fresh process
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


@pytest.mark.slow  # end to end: the plugin is found by a fresh process
def test_a_broken_plugin_is_left_out_with_one_warning(tmp_path):
    info = tmp_path / "broken-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[opbench.ops]\nbroken = no_such_module_here\n")
    out = run_opbench("list", "--json", env=_finding(tmp_path))
    assert out.returncode == 0
    assert any(o["op"] == "matmul" for o in json.loads(out.stdout))
    assert out.stderr.count("warning: plugin 'broken'") == 1 and "Traceback" not in out.stderr


FIRST_IMPORTS = """
import importlib, os, sys, traceback
import mpmath, numpy, scipy.special  # what the op modules import, loaded once: opbench is not
assert not [name for name in sys.modules if name.startswith("accuracy")]
for subject in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:  # a process where `subject` is the first of opbench's modules imported
        status = 1
        try:
            importlib.import_module("accuracy.catalog.ops." + subject)
            from accuracy.catalog.registry import all_ops
            print(subject, len(all_ops()), flush=True)
            status = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(status)
    os.waitpid(pid, 0)
"""


@pytest.mark.slow
def test_the_catalog_is_complete_whichever_op_module_is_imported_first():
    from accuracy.catalog.registry import OP_MODULES, all_ops

    out = subprocess.run(
        [sys.executable, "-c", FIRST_IMPORTS, *OP_MODULES], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert out.stdout.split() == [word for subject in OP_MODULES for word in (subject, str(len(all_ops())))]


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


# ---- the extension contract (docs/architecture.md, "Extension contract"): one test per row ----------

IMPLS_PLUGIN = '''
"""Implementations added to the built-in op `exp`, one of them another function in float16 only."""
import numpy as np

from accuracy.catalog.registry import Impl, ImplsFor


def exp2_in_half(ns, x):
    return ns.exp2(x) if x.dtype == np.float16 else ns.exp(x)


IMPLS = [ImplsFor("exp", (
    Impl("numpy", "exp via float64", lambda ns, x: ns.exp(x.astype(np.float64)), ("float32",)),
    Impl("numpy", "exp2 in float16", exp2_in_half, ("float16", "float32"),
         per_dtype={"float16": {"semantics": "2**x in float16"}}),
    Impl("numpy", "np.exp", lambda ns, x: ns.exp(x), ("float32",)),  # a name exp already has: left out
))]
'''

FAMILY_PLUGIN = '''
"""An op in a family of its own."""
from accuracy.catalog.ops.common import elementwise_op
from accuracy.catalog.registry import Impl
from dataclasses import replace

OPS = [replace(elementwise_op(
    "square", low=-3.0, high=3.0, np64=lambda x: x * x, mp=lambda x: x * x, oracle=lambda x: x**2, k=1,
    doc="x*x on [-3, 3]", impls=[Impl("numpy", "x * x", lambda ns, x: x * x, ("float32",))],
), family="polynomials")]
'''

FRAMEWORK_PLUGIN = '''
"""A framework backend: numpy standing in for one, declared by its attributes alone."""
import numpy as np

from accuracy.backends.base import Backend


class Tiny(Backend):
    name = "tinyframe"
    framework = "tinyframe"
    dtypes = ("float32",)
    gpu_float32 = "float32"

    def info(self):
        return {"version": "0.1"}


BACKENDS = [Tiny()]
'''


# a plugin module docs/architecture.md shows, after its `<!-- not run: ... (example: NAME) -->` comment
EXAMPLE = re.compile(r"\(example: (?P<name>[\w ]+)\) -->\n```python\n(?P<code>.*?)^```$", re.M | re.S)


def _example(name: str) -> str:
    """The plugin module docs/architecture.md shows for `name` (a port, a unit kind, a cause, a scheduler)."""
    found = {m["name"]: m["code"] for m in EXAMPLE.finditer((ROOT / "docs" / "architecture.md").read_text())}
    return found[name]


PORT_PLUGIN = _example("port")


def _python(site: Path, code: str) -> subprocess.CompletedProcess[str]:
    """`python -c CODE` with the throw-away package importable (the CLI goes through run_opbench)."""
    env = {**os.environ, **_finding(site)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def _package(root: Path, name: str, source: str, entry_points: str) -> Path:
    """A throw-away package installed the way pip leaves one: its module and its dist-info."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{name}.py").write_text(textwrap.dedent(source))
    info = root / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    return root


@pytest.mark.slow
def test_contract_implementation_joins_a_builtin_op(tmp_path):
    """Row "implementation": an `opbench.impls` entry point adds implementations to `exp`; they are
    listed, explained, judged per dtype and timed by asv; a name exp already has is left out, said
    once. Both dtypes are explained by one fresh process, as `opbench explain` runs (its main), so
    that TensorFlow's and torch's seconds of import are paid once; the same process then lists the
    asv class's cases (the suite imported as asv imports it, in a process of its own before)."""
    site = _package(tmp_path, "opbench_exp_more", IMPLS_PLUGIN, "[opbench.impls]\nmore = opbench_exp_more\n")
    explain = "from accuracy.cli.main import main\nfor dtype in ('float32', 'float16'):\n    print(main({}))\n".format(
        "['explain', 'exp', '--dtype', dtype, '--size', '256', '--json']"
    )
    asv_cases = "from benchmarks import bench_elementwise as b\nprint(b.Exp.params[0])\n"
    done = _python(site, explain + asv_cases)
    assert done.returncode == 0, done.stderr
    out, _, rest = done.stdout.partition("\n0\n")  # each report, then main's exit status
    rows = {r["impl"]: r for r in json.loads(out)["implementations"]}
    assert rows["numpy:exp via float64"]["verdict"] == "within rounding"
    assert rows["numpy:exp via float64"]["max_ulp"] <= 0.5 + 2**-28  # float64 exp rounded once
    assert rows["numpy:exp2 in float16"]["verdict"] == "within rounding"  # np.exp at float32
    assert done.stderr.count("already has one of that name") == 1
    half, _, cases = rest.rpartition("\n0\n")
    row = next(r for r in json.loads(half)["implementations"] if r["impl"] == "numpy:exp2 in float16")
    assert row["label"] == "beyond rounding (semantics: 2**x in float16)"
    assert cases.startswith("[") and "numpy:exp via float64@float32" in cases


@pytest.mark.slow  # end to end: the plugin is found by a fresh process
def test_contract_op_family_gets_asv_classes(tmp_path):
    """Row "op family": a plugin op in a family of its own is timed by asv (bench_plugins)."""
    site = _package(tmp_path, "opbench_square", FAMILY_PLUGIN, "[opbench.ops]\nsquare = opbench_square\n")
    code = (
        "from accuracy.catalog.registry import families; from benchmarks import bench_plugins as b; "
        "print(families()[-1], b.Square.op_name, b.Square.params[0])"
    )
    out = _python(site, code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:2] == ["polynomials", "square"] and "numpy:x * x@float32" in out.stdout


@pytest.mark.slow
def test_contract_backend_framework_lists_derive_from_its_attributes(tmp_path):
    """Row "backend": a plugin framework backend is one declaration; the fingerprint and the asv
    profiles' framework lists pick it up from its `framework` attribute."""
    site = _package(tmp_path, "opbench_tiny", FRAMEWORK_PLUGIN, "[opbench.backends]\ntiny = opbench_tiny\n")
    code = (
        "import json; from accuracy.backends import framework_names; from accuracy.backends import environment; "
        "from accuracy.run import profiles; "
        "print(json.dumps([framework_names(), list(profiles.FRAMEWORKS), environment._frameworks()['tinyframe']]))"
    )
    out = _python(site, code)
    assert out.returncode == 0, out.stderr
    names, lean, info = json.loads(out.stdout)
    assert names == lean == ["tensorflow", "onnxruntime", "libtorch", "jax", "tinyframe"]
    assert info == {"available": True, "version": "0.1"}


@pytest.mark.slow
def test_contract_metric_is_one_table_entry(tmp_path):
    """Row "metric": one entry in the metric table is an asv track on every op's benchmark and a
    column of explain (here mean_ulp, a field every measurement already has)."""
    code = textwrap.dedent(
        """
        import sys
        from accuracy.judge import metric_table as t
        t.METRICS = (*t.METRICS, t.Metric("mean_ulp", "ulp", "Mean error in ulps.", t.ACCURACY, explain=True,
                                          field="mean_ulp"))
        from accuracy.cli.explain_command import render
        from accuracy.workflows.explain import explain
        from benchmarks import bench_elementwise as b
        bench = b.Exp()
        params = [p[0] for p in b.Exp.params]
        bench.setup(*params)
        print(bench.track_mean_ulp(*params))
        report = explain("std", "float32", 64, 1)  # numpy and torch only: no other framework to load
        print(render(report).splitlines()[3])
        """
    )
    out = _python(tmp_path, code)
    assert out.returncode == 0, out.stderr
    mean, header = out.stdout.splitlines()[:2]
    assert 0 < float(mean) < 1  # a correct exp errs less than an ulp on average
    assert "mean ulp" in header


def test_contract_every_op_family_is_in_asv():
    """Row "op family" for built-in families: each has its benchmarks/bench_<family>.py, and every
    op with cases in the profile has its generated class there (else it silently drops out of asv)."""
    import importlib

    from accuracy.catalog.registry import OP_MODULES, all_ops
    from accuracy.judge.metric_table import benchmark_class_name
    from benchmarks.common import _cases, current_profile

    missing = [f for f in OP_MODULES if not (ROOT / "benchmarks" / f"bench_{f}.py").is_file()]
    assert not missing, (
        f"op families {missing} have no asv module: add benchmarks/bench_<family>.py with "
        "`globals().update(benchmark_classes('<family>'))` (as benchmarks/bench_activations.py)"
    )
    profile = current_profile()
    for family in OP_MODULES:
        module = importlib.import_module(f"benchmarks.bench_{family}")
        ops = [op for op in all_ops() if op.family == family and _cases(op, profile)]
        absent = [op.name for op in ops if getattr(module, benchmark_class_name(op.name), None) is None]
        assert ops and not absent, (family, absent)


def test_per_dtype_declarations_apply_at_their_dtype_only():
    """A finding, semantics or stability declared for one dtype: the judge, the self-test's set of
    correct implementations and `Impl.at` see it there and nowhere else."""
    import dataclasses

    from accuracy.catalog.registry import Impl, get_op
    from accuracy.core.dtypes import get_format
    from accuracy.workflows.evaluation import Case
    from accuracy.workflows.selftest import _correct

    halved = Impl(
        "numpy",
        "exp, float16 found off",
        lambda ns, x: ns.exp(x),
        ("float16", "float32"),
        per_dtype={"float16": {"finding": "measured off in float16"}, "float32": {"semantics": "renamed"}},
    )
    op = dataclasses.replace(get_op("exp"), impls=(halved,))
    assert halved.at("float16").finding == "measured off in float16" and halved.at("float16").semantics == ""
    assert halved.at("float32").semantics == "renamed" and halved.at("float32").finding == ""
    assert _correct(op, "float16", everything=True) == []  # a finding is not a correct implementation
    assert _correct(op, "float32", everything=True) == []  # nor is another function
    plain = dataclasses.replace(halved, per_dtype={"float16": {"stable": False}})
    assert [i.name for i in _correct(dataclasses.replace(op, impls=(plain,)), "float32", everything=True)] == [
        plain.name
    ]
    case = Case(op, get_format("float32"), 64)
    judged = case.judge(halved)  # np.exp in float32: rounding, but declared another function here
    assert judged.verdict == "beyond rounding" and judged.semantics == "renamed"
    half = Case(op, get_format("float16"), 64).judge(halved)
    assert half.semantics == "" and half.verdict == "within rounding"
    with pytest.raises(ValueError, match="per_dtype"):
        Impl("numpy", "bad", lambda ns, x: x, ("float32",), per_dtype={"float16": {"finding": "x"}})


@pytest.mark.slow  # end to end: the plugin is found by a fresh process
def test_contract_port_is_one_module_and_one_spec_row(tmp_path, capsys):
    """Row "port": an `opbench.ports` entry point adds a port that `opbench model --port` builds and
    judges unit by unit like a built-in one: its one wrong layer is the first not within rounding."""
    site = _package(tmp_path, "opbench_doubled", PORT_PLUGIN, "[opbench.ports]\ndoubled = opbench_doubled\n")
    model = "accuracy.workflows.model.zoo:small_cnn"
    args = ("model", model, "--inputs", "x=2x3x8x8", "--port", "doubled-bias", "--port", "threads:1", "--json")
    out = run_opbench(*args, env=_finding(site))
    assert out.returncode == 1, out.stderr
    doubled, threads = json.loads(out.stdout)["ports"]
    assert doubled["port"] == "doubled-bias" and doubled["description"] == "PyTorch with fc's bias doubled"
    assert doubled["first_not_within"] == "fc" and doubled["flagged"] == 1 and doubled["compared"] == 8
    assert threads["flagged"] == 0
    unknown = run_main(capsys, "model", model, "--inputs", "x=2x3x8x8", "--port", "doubled-bias")  # no plugin here
    assert unknown.returncode == 2 and "doubled-bias" not in unknown.stderr.partition("choose from")[2]


SCHEDULER_PLUGIN = _example("scheduler")


def _without_seconds(report: dict) -> dict:
    return {**report, "ports": [{k: v for k, v in p.items() if k != "seconds"} for p in report["ports"]]}


@pytest.mark.slow  # two model runs
def test_contract_scheduler_runs_the_one_pipeline(tmp_path, capsys, monkeypatch):
    """Row "scheduler": an `opbench.schedulers` entry point adds a scheduler that `opbench model
    --scheduler` runs the work items on (here: the last first); the work functions hold the
    envelope, so the report is the in-process one field for field but `seconds`."""
    entry = "[opbench.schedulers]\nlast = opbench_last_first\n"
    site = _package(tmp_path, "opbench_last_first", SCHEDULER_PLUGIN, entry)
    monkeypatch.syspath_prepend(str(site))
    log = tmp_path / "items.log"
    monkeypatch.setenv("LAST_FIRST_LOG", str(log))
    args = ("model", "accuracy.workflows.model.zoo:small_cnn", "--inputs", "x=2x3x8x8", "--json")
    args += ("--port", "threads:1", "--port", "torchscript")
    here = run_main(capsys, *args)
    theirs = run_main(capsys, *args, "--scheduler", "last-first")
    assert here.returncode == theirs.returncode == 0, theirs.stderr
    assert _without_seconds(json.loads(theirs.stdout)) == _without_seconds(json.loads(here.stdout))
    items = log.read_text().splitlines()
    judged = [line for line in items if line.startswith("judge_task ")]
    assert items[:2] == ["port_here 1", "port_here 0"] and items[2:] == judged
    assert judged[0] == f"judge_task {len(judged) - 1}" and len(judged) >= 8  # each unit one item
    unknown = run_main(capsys, *args, "--scheduler", "nowhere")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1
    assert "--scheduler nowhere: no such scheduler (opbench.schedulers: last-first)" in unknown.stderr
    both = run_main(capsys, *args, "--scheduler", "last-first", "--dask", "local:1")
    assert both.returncode == 2 and "give one" in both.stderr


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """`install(example, module, group)`: a plugin of docs/architecture.md installed in this
    process, the port table's and the cause catalogue's records read again before and after."""
    from accuracy.workflows.model.causes import causes
    from accuracy.workflows.model.ports import port_specs

    def install(example: str, module: str, group: str) -> None:
        site = _package(tmp_path / module, module, _example(example), f"[{group}]\n{module} = {module}\n")
        monkeypatch.syspath_prepend(str(site))
        port_specs.cache_clear()
        causes.cache_clear()

    yield install
    port_specs.cache_clear()
    causes.cache_clear()


SMALL_CNN = ("model", "accuracy.workflows.model.zoo:small_cnn", "--inputs", "x=2x3x8x8")


@pytest.mark.slow  # a model run
def test_contract_unit_kind_is_a_ports_units(installed, capsys):
    """Row "unit kind": a port's `units` makes conv1 and the bn1 it feeds one unit, judged as one
    function of conv1's input; its row covers both, and bn1 has no row of its own."""
    installed("unit kind", "opbench_conv_bn", "opbench.ports")
    result = run_main(capsys, *SMALL_CNN, "--port", "conv-bn", "--json")
    assert result.returncode == 0, result.stderr
    (port,) = json.loads(result.stdout)["ports"]
    rows = {r["path"]: r for r in port["layers"]}
    assert rows["conv1"]["covers"] == ["conv1", "bn1"] and "bn1" not in rows
    assert rows["conv1"]["verdict"] == "within rounding" and port["flagged"] == 0 and port["compared"] == 7


@pytest.mark.slow  # a model run
def test_contract_cause_names_a_plugin_ports_bug(installed, capsys):
    """Row "cause": an `opbench.causes` entry point adds a catalogue entry, tried on flagged units
    as the built-in ones: the doubled bias of the port example is named with its fitted factor."""
    installed("port", "opbench_doubled", "opbench.ports")
    installed("cause", "opbench_scaled_bias", "opbench.causes")
    result = run_main(capsys, *SMALL_CNN, "--port", "doubled-bias", "--json")
    assert result.returncode == 1, result.stderr
    (port,) = json.loads(result.stdout)["ports"]
    cause = next(r for r in port["layers"] if r["path"] == "fc")["cause"]
    assert cause["explains"] and cause["name"] == "bias scaled" and cause["verdict"] == "within rounding"
    assert cause["parameters"]["factor"] == pytest.approx(2.0, rel=1e-3)
    text = run_main(capsys, *SMALL_CNN, "--port", "doubled-bias").stdout
    assert "  cause: explained by its bias scaled by 2; look closer: opbench explain linear --dtype float32" in text
