"""The command line, run as a user would: `python -m accuracy ...` in a subprocess where the claim is
about a real process (what it imports, its stderr from C++, the console script's exit), else `main`
in this process (tests/cli_runner.py), which answers the same."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys

import pytest
from cli_runner import ROOT, run_main, run_opbench
from core_ops import CORE_OPS

from accuracy.backends import get_backend
from accuracy.backends.libtorch import BUILDING
from accuracy.catalog.registry import all_ops
from accuracy.cli.main import main


@pytest.mark.parametrize(
    "args,needle",
    [
        (["explain", "nosuchop"], "unknown op"),
        (["explain", "linear", "--dtype", "float8"], "unknown dtype"),
        (["explain", "linear", "--threads", "0"], "--threads"),
        (["explain", "linear", "--size", "0"], "size"),
        (["explain", "erf", "--dtype", "float16", "--size", "-3"], "size"),
        (["selftest", "nosuchop"], "unknown op"),
        (["selftest", "sum", "--dtype", "float8"], "unknown dtype"),
    ],
)
def test_user_errors_exit_2_with_one_line(capsys, args, needle):
    out = run_main(capsys, *args)
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("opbench: error:") and needle in lines[0]
    assert "Traceback" not in out.stderr + out.stdout


@pytest.fixture(scope="module")
def listing():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["list", "--json"]) == 0
    return json.loads(out.getvalue())


def test_list_json(listing):
    ops = {o["op"]: o for o in listing}
    assert len(ops) >= 18
    for name in sorted(CORE_OPS):
        assert name in ops, name
        assert ops[name]["implementations"] and ops[name]["dtypes"]
    frameworks = (
        "tensorflow",
        "onnxruntime",
        "onnxruntime-noopt",
        "libtorch",
        "jax",
    )  # tests/workflows/test_frameworks.py
    linear = [i["name"] for i in ops["linear"]["implementations"] if i["backend"] not in frameworks]
    assert sorted(linear) == sorted(
        [
            "torch:F.linear",
            "torch:x @ W.T + b",
            "torch:addmm(b, x, W.T)",
            "numpy:x @ W.T + b",
            "numpy:einsum('bi,oi->bo') + b",
            "torch-compile:F.linear",
            "torch-compile:x @ W.T + b",
        ]
    )  # the five spellings, and torch.compile of the two opted in (no CUDA here)
    assert ops["linear"]["dtypes"] == ["float16", "bfloat16", "float32", "float64"]
    assert "bfloat16" not in next(i for i in ops["exp"]["implementations"] if i["name"] == "numpy:np.exp")["dtypes"]


def test_list_text(capsys):
    out = run_main(capsys, "list")
    assert out.returncode == 0
    assert "torch:F.linear" in out.stdout and "layer_norm" in out.stdout


@pytest.mark.slow  # end to end: imports every framework to fingerprint it
def test_info_json():
    out = run_opbench("info", "--json", "--full")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["blas"], "threadpoolctl sees at least one BLAS"
    for lib in info["blas"]:
        assert "internal_api" in lib and "architecture" in lib
    assert any(lib["internal_api"] in ("openblas", "mkl", "blis") for lib in info["blas"])
    assert info["torch"]["available"] and info["torch"]["cpu_capability"]
    assert isinstance(info["numpy"]["simd_baseline"], list) and info["numpy"]["simd_baseline"]
    assert isinstance(info["numpy"]["simd_enabled"], list) and info["numpy"]["simd_enabled"]
    assert info["devices"][0] == "cpu"
    loaded = {p["name"]: p for p in info["blas_providers"]["loaded"]}
    assert loaded["numpy-openblas"]["vendor"] == "OpenBLAS" and loaded["numpy-openblas"]["version"]
    assert info["blas_providers"]["load_errors"] == []


@pytest.mark.slow  # (every framework's linear, in text, is the README's block: tests/test_docs.py)
def test_explain_json(capsys):
    out = run_main(capsys, "explain", "dot", "--dtype", "float32", "--json", "--size", "256", "--threads", "1")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["op"] == "dot" and report["dtype"] == "float32" and report["size"] == 256
    assert report["threads"] == 1
    names = [r["impl"] for r in report["implementations"]]
    assert {"numpy:np.dot", "torch:torch.dot", "blas-numpy-openblas:dot"} <= set(names)
    assert all(r["verdict"] == "within rounding" for r in report["implementations"])


@pytest.mark.slow
@pytest.mark.parametrize("level", [None, "1"])
def test_explain_stderr_is_clean_of_tensorflow_logs(monkeypatch, level):
    """exp runs TensorFlow's tf.math.exp: its C++ INFO lines (absl's preamble, cpu_feature_guard's
    advice to rebuild, the oneDNN notice on an AVX-512 CPU) never reach explain's stderr unless the
    user asks for them (level 0). Level 1 is what `import jax` sets in its process and children."""
    if level is None:
        monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    else:
        monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", level)
    out = run_opbench("explain", "exp", "--dtype", "float32", "--size", "64", "--threads", "1", timeout=300)
    assert out.returncode == 0, out.stderr
    # in a fresh environment another test may be building LibTorch meanwhile: opbench says so, once
    noise = [line for line in out.stderr.splitlines() if BUILDING not in line]
    assert "tensorflow:tf.math.exp" in out.stdout and noise == []


@pytest.mark.slow
def test_explain_text_answers_first(capsys):
    """The verdicts, then only the pairs whose difference is not rounding (every pair under -v); the
    header counts what ran."""
    out = run_main(capsys, "explain", "std", "--dtype", "float64", "--threads", "1")
    assert out.returncode == 0, out.stderr
    assert "beyond rounding (semantics: ddof=0)" in out.stdout and "within rounding" in out.stdout
    assert "pairwise discrepancy" in out.stdout and "element nearest its limit" in out.stdout
    # --threads 1 runs on one thread; reproducibility still compares 1 thread with all cores
    from accuracy.cli.explain_command import render
    from accuracy.core.threads import all_cores
    from accuracy.workflows.explain import explain

    assert f"1 vs {all_cores()} threads" in out.stdout
    report = explain("std", "float64", None, 1)
    impls, pairs = report["implementations"], report["pairs"]
    assert out.stdout.splitlines()[1].startswith(f"{len(impls)} implementations; bound: ")
    matter = [p for p in pairs if p["class"] not in ("identical", "within rounding")]
    assert matter and len(matter) < len(pairs)  # std has both kinds

    def pair_rows(text: str) -> list[str]:
        section = text.split("pairwise discrepancy", 1)[1].split("\n\n", 1)[0].splitlines()[3:]
        return [line for line in section if not line.startswith("  (")]

    rows = pair_rows(out.stdout)  # by default, exactly the pairs that matter, in order
    assert len(rows) == len(matter)
    assert all(r.startswith(f"{p['a']}  ") and f"  {p['b']}  " in r for r, p in zip(rows, matter, strict=True))
    assert len(pair_rows(render(report, verbose=True))) == len(pairs)  # -v lists every pair


@pytest.mark.slow  # end to end: runs the self-test's mutants in subprocesses
def test_selftest_command_reports_both_targets(capsys):
    out = run_main(capsys, "selftest", "dot", "--small", "--dtype", "float32")  # frameworks: test_cluster
    assert out.returncode == 0, out.stderr
    assert "0 false alarms" in out.stdout and "mutants caught" in out.stdout
    done = run_main(capsys, "selftest", "sum", "--small", "--dtype", "float64", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["summary"]["false_alarms"] == 0 and report["summary"]["catch_rate"] >= 0.95
    assert {c["condition"] for c in report["cases"]} == {"random", "cancelling"}


def test_torch_cuda_backend_is_absent_here_and_listed_nowhere(listing):
    torch = pytest.importorskip("torch")
    cuda = get_backend("torch-cuda")
    assert cuda.available() == torch.cuda.is_available()
    if not torch.cuda.is_available():
        for o in listing:
            assert "torch-cuda" not in o["backends"], o["op"]
        for op in all_ops():
            for d in op.dtypes():
                assert all(i.backend != "torch-cuda" for i in op.available_impls(d))


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_torch_cuda_runs_bit_for_bit_and_within_rounding():
    import dataclasses

    import numpy as np

    from accuracy.catalog.registry import get_op
    from accuracy.core.dtypes import get_format
    from accuracy.workflows.evaluation import Case

    backend = get_backend("torch-cuda")
    for dtype in ("float16", "bfloat16", "float32", "float64"):
        fmt = get_format(dtype)
        x = fmt.round(np.linspace(-3, 3, 101))
        t = backend.to_native(x)
        assert t.device.type == "cuda"
        assert backend.to_numpy(t, fmt).tobytes() == x.tobytes()
    op = get_op("linear")
    impl = dataclasses.replace(op.impl("torch:F.linear"), backend="torch-cuda")
    for dtype in ("float32", "float64"):
        j = Case(op, get_format(dtype), 256).judge(impl)
        assert j.verdict == "within rounding", j


def test_unknown_condition_is_one_line_and_exit_2(capsys):
    proc = run_main(capsys, "explain", "solve", "--condition", "nosuch")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "opbench: error: op 'solve' has no condition 'nosuch'; choose from random, ill"
    ]


def test_listed_conditions(listing):
    conditions = {o["op"]: o["conditions"] for o in listing}
    assert conditions["solve"] == conditions["inv"] == ["random", "ill"]
    assert conditions["sum"] == ["random", "cancelling"]
    assert conditions["matmul"] == ["random"]


def _subparsers():
    from accuracy.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, sub.choices


def test_every_subcommand_and_argument_has_help():
    _parser, commands = _subparsers()
    assert {"list", "info", "explain", "run", "compare", "report"} <= set(commands)
    for name, sub in commands.items():
        assert sub.description, name
        for action in sub._actions:
            assert action.help and action.help != argparse.SUPPRESS, (name, action.dest)


@pytest.mark.slow
def test_version_flag_prints_the_package_version():
    from accuracy import __version__

    out = run_opbench("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"opbench {__version__}"


FRAMEWORK_MODULES = ("torch", "tensorflow", "jax", "onnxruntime")
HEAVY = (*FRAMEWORK_MODULES, "pandas", "matplotlib", "scipy.linalg", "asv")


def _output_and_loaded_after(*args: str) -> tuple[str, set[str]]:
    """What a fresh `opbench ARGS` process prints, and the heavy modules it has imported when it exits."""
    code = (
        "import sys\nfrom accuracy.cli.main import main\n"
        f"try:\n    main({list(args)!r})\nexcept SystemExit:\n    pass\n"
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    *output, loaded, _ = proc.stdout.split("\n")
    return "\n".join(output), set(loaded.split())


def _loaded_after(*args: str) -> set[str]:
    return _output_and_loaded_after(*args)[1]


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--help"], ["list"], ["explain", "nosuchop"], ["compare", "--help"]])
def test_the_cli_answers_without_importing_what_it_does_not_run(args):
    """`--help`, `list` and a bad-input error import no framework, pandas, matplotlib, scipy.linalg or
    asv: each costs seconds (torch alone 11 s under load), which issue 20 budgets at 1.5 s."""
    assert _loaded_after(*args) == set()


@pytest.mark.slow
def test_check_of_outputs_within_rounding_imports_no_framework(tmp_path):
    """`opbench check` of outputs that are within rounding answers without torch (1.6 s of its 3):
    only an output the cause catalogue may explain loads torch's modules."""
    import numpy as np

    rng = np.random.default_rng(0)
    x, w, b = (rng.normal(size=s).astype("f4") for s in ((4, 8), (3, 8), (3,)))
    np.savez(tmp_path / "lin.npz", x=x, W=w, b=b)
    np.save(tmp_path / "out.npy", (x.astype("f8") @ w.T.astype("f8") + b).astype("f4"))
    args = ("check", "linear", "--inputs", str(tmp_path / "lin.npz"), "--output", f"a={tmp_path / 'out.npy'}")
    assert _loaded_after(*args) & set(FRAMEWORK_MODULES) == set()


@pytest.mark.slow
def test_info_names_every_framework_and_its_version_without_importing_one(capsys):
    """`opbench info` answers in a second (issue 20): versions from the installed metadata;
    `--full` imports the frameworks for their runtime details."""
    from importlib.metadata import version

    text, loaded = _output_and_loaded_after("info")
    assert loaded & set(FRAMEWORK_MODULES) == set()
    assert f"torch {version('torch')} (runtime details: opbench info --full)" in text
    out = run_main(capsys, "info", "--json")  # what it says, as a fresh process says it (from the metadata)
    frameworks = json.loads(out.stdout)["frameworks"]
    assert frameworks["onnxruntime"]["version"] == version("onnxruntime")
    assert frameworks["jax"]["version"] == version("jax") and "--full" in frameworks["jax"]["runtime"]


@pytest.mark.slow
def test_backends_say_whether_they_are_available_without_importing_their_framework():
    code = (
        "import sys\nfrom accuracy.backends import get_backend\n"
        f"names = ('torch', 'torch-compile', 'scipy', *{FRAMEWORK_MODULES[1:]!r})\n"
        "found = [get_backend(n).available() for n in names]\n"
        f"print(found, [m for m in {FRAMEWORK_MODULES!r} if m in sys.modules])"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found, loaded = proc.stdout.strip().split("] [")
    assert "True" in found and loaded.rstrip("]") == ""
