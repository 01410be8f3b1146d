"""The framework backends: TensorFlow, ONNX Runtime, LibTorch and JAX.

Generated from the registry: every framework implementation is checked at its op's small test
size against the exact reference; LibTorch against PyTorch eager bit for bit. Thread control is
read back from each framework, and each framework's absence is simulated.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hidden_tools import hide

from accuracy.backends import framework_backends, get_backend
from accuracy.backends import jax as jax_backend
from accuracy.backends import tensorflow as tf_backend
from accuracy.catalog.registry import all_ops
from accuracy.core.dtypes import get_format
from accuracy.workflows.evaluation import Case
from accuracy.workflows.explain import explain

FRAMEWORKS = tuple(b.name for b in framework_backends())
# Real findings (docs/findings.md, generated from the declarations): a framework's own kernel leaves the rounding bound.


def _framework_impls(dtype="float32"):
    return [
        pytest.param(op, impl, id=f"{op.name}-{impl.name}")
        for op in all_ops()
        for impl in op.available_impls(dtype)
        if impl.backend in FRAMEWORKS
    ]


def test_every_framework_is_available_here():
    """`make test` installs the frameworks extra; finding a framework imports nothing."""
    for name in FRAMEWORKS:
        assert get_backend(name).available(), name


@pytest.mark.parametrize("op,impl", [p for p in _framework_impls() if not p.values[1].finding])
def test_small_size_against_exact(op, impl):
    """At the op's test size, a framework's kernel is within rounding unless it declares another
    function (semantics); findings are held to `test_every_declared_finding_reproduces`."""
    if not impl.stable:
        pytest.skip("a formula declared to lose accuracy: nothing is promised")
    judgement = Case(op, get_format("float32"), op.test_size).judge(impl)
    if impl.semantics:
        assert judgement.verdict == "beyond rounding", (impl.name, impl.semantics, judgement)
    else:
        assert judgement.verdict == "within rounding", (impl.name, judgement)


@pytest.mark.slow  # each finding at the size that shows it, in its framework: seconds each
@pytest.mark.parametrize(
    "op,impl",
    [
        pytest.param(op, impl, id=f"{op.name}-{impl.name}")
        for op in all_ops()
        for impl in op.concrete_impls()
        if impl.finding and get_backend(impl.backend).available()
    ],
)
def test_every_declared_finding_reproduces(op, impl):
    """A finding is a claim about a library: at explain's default size or the asv suite's first size, it
    must still break the worst-case bound at one of its float32/float64 dtypes (else it is stale).
    Measured in that order until one breaks it: the claim needs one (a stale one measures all)."""
    cases = [(d, s) for d in ("float32", "float64") if d in impl.dtypes for s in (op.default_size, op.bench_sizes[0])]
    ratios: dict[tuple, float] = {}
    for dtype, size in cases:
        ratios[dtype, size] = Case(op, get_format(dtype), size).measure(impl).bound_ratio
        if ratios[dtype, size] > 1:
            break
    assert max(ratios.values()) > 1, (impl.name, impl.finding, ratios)


def _libtorch_pairs():
    """Each LibTorch impl with the first torch eager impl of the op that computes the same function."""
    pairs = []
    for op in all_ops():
        impls = op.available_impls("float32")
        for impl in (i for i in impls if i.backend == "libtorch"):
            eager = next(i for i in impls if i.backend == "torch" and i.semantics == impl.semantics)
            pairs.append(pytest.param(op, impl, eager, id=f"{op.name}-{impl.variant}"))
    return pairs


@pytest.mark.parametrize("op,libtorch,eager", _libtorch_pairs())
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_libtorch_gives_pytorch_eager_bits(op, libtorch, eager, dtype):
    """Same kernels through the C++ front end: bitwise the same output as the Python one."""
    if dtype not in libtorch.dtypes or dtype not in eager.dtypes:
        pytest.skip(f"no {dtype} implementation")
    case = Case(op, get_format(dtype), op.test_size)
    assert case.run(libtorch).tobytes() == case.run(eager).tobytes()


def test_onnxruntime_sessions_take_the_thread_count():
    backend = get_backend("onnxruntime")
    op = next(op for op in all_ops() if op.name == "softmax")
    impl = op.impl("onnxruntime:Softmax")
    case = Case(op, get_format("float32"), 64)
    for n in (1, 2):
        case.run(impl, n)
    counts = {
        key[-1]: s.get_session_options().intra_op_num_threads
        for key, s in backend._sessions.items()
        if key[0] == impl.fn
    }
    assert counts == {1: 1, 2: 2}


def test_libtorch_sees_the_thread_count_in_cpp():
    backend = get_backend("libtorch")
    for n in (1, 2):
        with backend.thread_limit(n):
            assert backend.namespace.num_threads() == n


@pytest.mark.parametrize(
    "name,probe", [("tensorflow", tf_backend.intra_op_threads), ("jax", jax_backend.eigen_pool_threads)]
)
def test_startup_thread_frameworks_run_other_counts_in_a_worker(name, probe):
    """The runtime starts at the first count asked for; another count gets a worker process
    whose framework reports that count."""
    backend = get_backend(name)
    seen = {}
    for n in (1, 2):
        with backend.thread_limit(n):
            seen[n] = int(backend.to_numpy(backend.call(probe, {}), get_format("float64")))
    assert seen == {1: 1, 2: 2}
    assert backend.started_threads in (1, 2) and backend._zygote is not None


TENSORFLOW_INFO = """
import json, sys
from accuracy.backends import get_backend
info = get_backend("tensorflow").info()
assert "tensorflow" not in sys.modules, "imported tensorflow"
print("info done", file=sys.stderr, flush=True)
tf = get_backend("tensorflow").namespace  # imported as opbench's implementations import it
from tensorflow.python.util import _pywrap_util_port
print(json.dumps([info, tf.__version__, bool(_pywrap_util_port.IsMklEnabled()), dict(tf.sysconfig.get_build_info())]))
"""
TENSORFLOW_STARTS = (
    TENSORFLOW_INFO
    + """
import os
from accuracy.backends.tensorflow import NOT_IMPORTED_WITH_TENSORFLOW, intra_op_threads
from accuracy.core.dtypes import get_format
from accuracy.core.errors import OpbenchError
from accuracy.workflows.model.zoo import keras_small_cnn
backend = get_backend("tensorflow")  # TF imported (above) as opbench imports it: no runtime yet
pid = os.fork()
if pid == 0:  # the user's code starts TF's runtime before opbench runs
    tf.constant(1.0) + 1.0
    try:
        backend.call(intra_op_threads, {})
    except OpbenchError as exc:
        print(exc, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
keras_small_cnn()
for n in (2, 1):
    with backend.thread_limit(n):
        print(int(backend.to_numpy(backend.call(intra_op_threads, {}), get_format("float64"))))
print([name for name in NOT_IMPORTED_WITH_TENSORFLOW if name in sys.modules])
"""
)


@functools.cache
def _fresh_tensorflow(code: str, onednn: str = "") -> subprocess.CompletedProcess:
    """`code` in a fresh process (importing TF takes seconds), TF's oneDNN knob set to `onednn`
    ("": unset); once per run for each, so the tests reading one process share it."""
    env = {k: v for k, v in os.environ.items() if k != tf_backend.ONEDNN_VAR} | (
        {tf_backend.ONEDNN_VAR: onednn} if onednn else {}
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)


def _tensorflow_starts() -> subprocess.CompletedProcess:
    """TF's info read without importing it, then both ways TF's runtime can start: the user's code
    first (a forked child), then a Keras model built through opbench."""
    return _fresh_tensorflow(TENSORFLOW_STARTS)


@pytest.mark.slow
@pytest.mark.xdist_group("tensorflow-starts")  # one worker, one process for both
def test_tensorflow_runs_at_every_count_after_a_keras_model_was_built():
    """Building a Keras model starts TF's runtime; its pools must still be opbench's, so the
    registry's TF implementations run afterwards at the default and at one thread (CI once
    failed here: a model test had started TF first, with its own pools). TensorFlow and Keras
    came without the optional libraries they import (which load as usual afterwards: below)."""
    done = _tensorflow_starts()
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[2:] == ["2", "1", "[]"]


def test_a_library_hidden_from_tensorflow_is_hidden_on_the_importing_thread_only(monkeypatch):
    """Another thread importing the library meanwhile (the report's pandas, say) gets it."""
    monkeypatch.setattr(tf_backend, "NOT_IMPORTED_WITH_TENSORFLOW", ("colorsys",))  # a module nothing here imported
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    with tf_backend._without_optional_imports():
        with pytest.raises(ModuleNotFoundError, match="colorsys is not imported with TensorFlow"):
            importlib.import_module("colorsys")
        with ThreadPoolExecutor(1) as other_thread:
            assert other_thread.submit(importlib.import_module, "colorsys").result().__name__ == "colorsys"
        monkeypatch.delitem(sys.modules, "colorsys")
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("colorsys")
    assert importlib.import_module("colorsys").__name__ == "colorsys"
    assert not any(isinstance(finder, tf_backend._HiddenDuringImport) for finder in sys.meta_path)


def _tensorflow_turns_onednn_on() -> bool:
    """TF's default where TF_ENABLE_ONEDNN_OPTS is unset (tensorflow/core/util/util.cc): on for x86
    CPUs with AVX512-VNNI, AVX512-BF16, AVX-VNNI or AMX (this machine's AMD EPYC has moved
    between hosts without and with AVX-512), off elsewhere."""
    flags = set(Path("/proc/cpuinfo").read_text().split()) if Path("/proc/cpuinfo").exists() else set()
    return bool(flags & {"avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16"})


@pytest.mark.slow  # a fresh process that imports TensorFlow
@pytest.mark.xdist_group("tensorflow-starts")
@pytest.mark.parametrize("onednn", ["", "1"])
def test_tensorflow_info_is_what_tensorflow_says_without_importing_it(onednn):
    """The fingerprint every run waits for reads TF's version, build and oneDNN switch from the
    package's files (the import is 5 s here), quietly; imported afterwards, TF gives the same.
    With the knob unset, in the process the runtime tests share."""
    done = _fresh_tensorflow(TENSORFLOW_INFO, onednn) if onednn else _tensorflow_starts()
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.startswith("info done"), done.stderr  # TF's C++ log lines kept off the terminal
    info, version, onednn_enabled, build = json.loads(done.stdout.splitlines()[0])
    assert (info["version"], info["onednn_enabled"], info["build"]) == (version, onednn_enabled, build)
    assert onednn_enabled is (onednn == "1" or (onednn == "" and _tensorflow_turns_onednn_on()))


def test_tensorflows_distribution_is_found_beside_it_without_reading_every_file_list(monkeypatch):
    """The fingerprint's TensorFlow version is its distribution's (tensorflow-cpu here), the one
    importlib's full map names, found from the top_level.txt beside the package: building that map
    read every installed distribution's file list, 0.17 CPU-s of each `opbench run`'s fingerprint."""
    import importlib.metadata

    expected = importlib.metadata.packages_distributions()["tensorflow"][0]
    monkeypatch.setattr(importlib.metadata, "packages_distributions", lambda: pytest.fail("read every file list"))
    assert tf_backend._distribution("tensorflow") == expected


@pytest.mark.slow
@pytest.mark.xdist_group("tensorflow-starts")
def test_a_runtime_started_elsewhere_is_a_one_line_error():
    done = _tensorflow_starts()
    assert done.returncode == 0, done.stderr[-2000:]
    said = done.stdout.splitlines()[1]
    assert "started in this process before opbench sized its thread pools" in said, done.stdout


@pytest.mark.parametrize(
    "backend,hidden",
    [
        ("tensorflow", {"modules": ("tensorflow",)}),
        ("onnxruntime", {"modules": ("onnxruntime",)}),
        ("libtorch", {"commands": ("c++",)}),  # torch is always here; without a compiler there is no LibTorch
        ("jax", {"modules": ("jaxlib",)}),
    ],
)
def test_a_missing_framework_makes_its_implementations_absent(monkeypatch, backend, hidden):
    hide(monkeypatch, **hidden)
    assert not get_backend(backend).available()
    report = explain("softmax", "float32", 64, 1)
    names = {r["impl"].split(":")[0] for r in report["implementations"]}
    assert backend not in names and "torch" in names
    assert all(r["verdict"] != "error" for r in report["implementations"])
