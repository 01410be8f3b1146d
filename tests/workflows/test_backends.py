"""Backend variants: torch.compile on the CPU, CUDA math modes, and their clean absence."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
import torch

from accuracy.backends import TORCH_VARIANTS, cpu_levels, get_backend
from accuracy.catalog.registry import all_ops, get_op
from accuracy.workflows.evaluation import make_case


def test_cuda_math_modes_set_their_flags_only_inside_a_call_and_restore_them():
    backend = get_backend("torch-cuda-tf32")
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    seen = []
    with backend.math_mode():
        seen.append((torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32))
    assert seen == [(True, True)]
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
    reduced = get_backend("torch-cuda-reduced-reduction")
    with reduced.math_mode():
        assert torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction is True
        assert torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction is True


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only machine")
def test_cuda_variants_are_absent_without_a_gpu():
    for name in ("torch-cuda", "torch-cuda-tf32", "torch-cuda-reduced-reduction"):
        assert not get_backend(name).available()
    for op in all_ops():
        for dtype in op.dtypes():
            assert not [i for i in op.available_impls(dtype) if i.backend.startswith("torch-cuda")]


def test_opted_in_impls_gain_the_torch_variants():
    linear = next(op for op in all_ops() if op.name == "linear")
    names = {i.name for i in linear.concrete_impls()}
    assert {f"{b}:F.linear" for b in TORCH_VARIANTS} <= names
    assert "torch-compile:addmm(b, x, W.T)" not in names  # only what was declared


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_float32_matmul_is_within_rounding_and_tf32_is_not_more_accurate():
    case = make_case("matmul", "float32", 512)
    plain = case.measure(case.op.impl("torch-cuda:torch.matmul"))
    tf32 = case.measure(case.op.impl("torch-cuda-tf32:torch.matmul"))
    assert case.judge(case.op.impl("torch-cuda:torch.matmul")).verdict == "within rounding"
    assert tf32.max_abs >= plain.max_abs


def test_torch_compile_runs_on_the_same_inputs_and_stays_within_rounding():
    case = make_case("gelu", "float32", get_op("gelu").test_size)  # the registry test's kernel: compiled once
    compiled = case.measure(case.op.impl("torch-compile:F.gelu"))
    verdicts = {case.judge(case.op.impl(name)).verdict for name in ("torch-compile:F.gelu", "torch:F.gelu")}
    assert verdicts == {"within rounding"}
    assert 0 < compiled.bound_ratio <= 1


COMPILED_SUM = """
import numpy as np, torch
from accuracy.backends.pytorch import TorchCompileBackend
x = np.random.default_rng(60).standard_normal(1000).astype(np.float32)
total = TorchCompileBackend().call(lambda t, x: t.sum(x), {"x": torch.from_numpy(x)})
print(torch.backends.cpu.get_cpu_capability(), float(total), float(x.astype(np.float64).sum()))
"""


@pytest.mark.slow
def test_torch_compile_keeps_its_disk_cache_apart_per_dispatch_level():
    """Inductor's FX graph cache omits ATen's dispatch level from its key: loaded under a lower
    ATEN_CPU_CAPABILITY, an AVX-512 graph summed wrong (17.19 for 28.92) and an AVX2 graph failed to
    build at DEFAULT. The highest level this CPU has compiles first, then the next lower one, on the
    one cache directory every process shares (its ISA probes, built once, are 3 of 4 compiles in an
    empty one); a tag of this run's own keeps the first graph new. Each sum is the float64 sum to
    float32 rounding."""
    levels = [name for name in cpu_levels.LEVELS if not cpu_levels.lacks(name)][::-1]
    if len(levels) < 2:
        pytest.skip("one dispatch level only: this CPU is not x86, or lists no flags")
    env = {**os.environ, "TORCH_COMPILE_CACHE_KEY_TAG": f"opbench-test-{uuid.uuid4()}-"}
    for level in levels[:2]:
        done = subprocess.run(
            [sys.executable, "-c", COMPILED_SUM],
            env={**env, **cpu_levels.LEVELS[level].knobs},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        capability, compiled, exact = done.stdout.split()
        assert capability.lower() == level
        assert abs(float(compiled) - float(exact)) < 1e-4 * (1 + abs(float(exact)))


def test_torch_compile_compiles_once_and_runs_one_call_at_a_time_from_many_threads(monkeypatch):
    """A scan calls from two threads: both compiled at once, and dynamo's first import deadlocked."""
    import threading
    import time

    from accuracy.backends.pytorch import TorchCompileBackend

    backend, compiles, inside, most = TorchCompileBackend(), [], [0], [0]

    def fake_compile(fn, dynamic):
        compiles.append(fn)

        def run(**inputs):
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            time.sleep(0.05)
            inside[0] -= 1
            return fn(**inputs)

        return run

    monkeypatch.setattr(backend, "namespace", type("ns", (), {"compile": staticmethod(fake_compile)}))
    monkeypatch.setattr("importlib.import_module", lambda name: type("config", (), {"recompile_limit": 8}))
    barrier, results = threading.Barrier(4), []

    def op(ns, x):
        return x + 1

    def call():
        barrier.wait()
        results.append(backend.call(op, {"x": 1}))

    threads = [threading.Thread(target=call) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert results == [2, 2, 2, 2] and len(compiles) == 1 and most[0] == 1
