"""Ports in a child process (#56): `isa:LEVEL` rebuilds the model from its factory in a child with
PyTorch's dispatch knobs set, hands it the parent's weights as safetensors and gets each leaf's
output and its own end-to-end run back as an activations file. A level this CPU lacks is absent
with why (the product's own probe, accuracy.backends.cpu_levels, says which); a child that crashes,
hangs or misses a library is one line for its port, and the other ports' results stand."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
import torch
from cli_runner import run_main
from user_modules import same_model_output, user_module

from accuracy.backends.cpu_levels import LEVELS, cpu_flags, lacks
from accuracy.backends.pytorch import tensor_to_numpy as to_numpy
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.ports import build_port, child_process
from accuracy.workflows.model.ports.child_process import ChildPort, Rebuild
from accuracy.workflows.model.rows import AbsentPort
from accuracy.workflows.model.sweep import ModelRun, run_model
from accuracy.workflows.model.trace import forward, load_model, record
from accuracy.workflows.model.zoo import example_inputs

pytestmark = pytest.mark.slow  # each port starts a Python with torch: seconds

# the level this process's own kernels run at: a child held to it computes the same bits
OWN_LEVEL = torch.backends.cpu.get_cpu_capability().lower()
OWN = f"isa:{OWN_LEVEL}"
# A factory that draws unseeded weights (no two processes build the same model), and one that fails
# only in the child: the runner is the child's sys.argv[0].
FACTORIES = textwrap.dedent(
    """
    import os, signal, sys, time
    import torch

    def unseeded():
        layers = torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 5)
        return torch.nn.Sequential(*layers)

    def _in_child():
        return sys.argv[0].endswith("child_runner.py")

    def crashes():
        if _in_child():
            os.kill(os.getpid(), signal.SIGSEGV)
        return unseeded()

    def hangs():
        if _in_child():
            time.sleep(120)
        return unseeded()

    def misses_a_library():
        if _in_child():
            import opbench_no_such_library  # noqa: F401
        return unseeded()
    """
)


@pytest.fixture
def factories(tmp_path, monkeypatch, one_thread_count):
    """The factories' module, importable from the current directory (as the child imports it), and
    every pool of this process at torch's thread count, the count the child is started with."""
    with user_module(tmp_path, monkeypatch, "child_factories", FACTORIES):
        yield "child_factories"


def _inputs() -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(7).standard_normal((2, 3, 8, 8)).astype(np.float32)}


def test_the_child_runs_the_parents_weights_on_the_same_kernels_bitwise(factories):
    """An unseeded factory draws other weights in the child; the safetensors the parent hands over
    make it the same model: at the parent's own level, the child's every leaf and its whole run are
    the parent's bits."""
    spec = f"{factories}:unseeded"
    model, inputs = load_model(spec), _inputs()
    calls, out = record(model, inputs)
    port = build_port(OWN, model, inputs, Rebuild(spec, False, calls))
    assert isinstance(port, ChildPort), port
    assert f"on {OWN_LEVEL.upper()} kernels" in port.description
    assert f"ATEN_CPU_CAPABILITY={OWN_LEVEL}" in port.description
    units = port.units(calls)
    assert [u.reason for u in units] == [""] * len(calls)
    for unit in units:
        assert same_model_output(port.isolated(unit, unit.calls[0].inputs), to_numpy(unit.calls[0].output))
    run = port.end_to_end(inputs, units)
    assert same_model_output(run.output, to_numpy(out))
    assert same_model_output(run.output, to_numpy(forward(model, inputs)))
    assert port.built_seconds > 0


@pytest.mark.parametrize("level", sorted(LEVELS))
def test_each_level_runs_where_the_cpu_has_it_and_is_absent_with_why_where_not(level):
    """What the probe says of this CPU decides: a level it lacks is absent with the flags missing
    (AVX-512 on this AMD host), never started (ATen would take it and die of SIGILL); one it has
    runs in a child whose ATen reports that level, and a correct port flags nothing."""
    spec = "accuracy.workflows.model.zoo:small_cnn"
    model, inputs = load_model(spec), example_inputs("small_cnn")
    calls, _ = record(model, inputs)
    built = build_port(f"isa:{level}", model, inputs, Rebuild(spec, False, calls))
    why = lacks(level)
    if why is not None:
        assert built == why and "this CPU lacks" in why and LEVELS[level].flags[0] in why
        return
    assert isinstance(built, ChildPort) and f"on {level.upper()} kernels" in built.description


def test_the_probe_reads_the_cpus_flags(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse4_2 avx avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    flags = cpu_flags(cpuinfo)
    assert flags == {"fpu", "sse4_2", "avx", "avx2", "fma"}
    assert lacks("default", flags) is None and lacks("avx2", flags) is None
    assert lacks("avx512", flags) == (
        "this CPU lacks avx512f, avx512bw, avx512vl, avx512dq "
        "(ATen's avx512 kernels need avx512f, avx512bw, avx512vl, avx512dq)"
    )
    assert cpu_flags(tmp_path / "absent") is None


@pytest.mark.parametrize(
    ("factory", "why"),
    [
        ("crashes", "the child process died of SIGSEGV"),
        ("hangs", "the child process did not finish in 3 s (killed)"),
        (
            "misses_a_library",
            "the child process failed: ModuleNotFoundError: No module named 'opbench_no_such_library'",
        ),
    ],
)
def test_a_child_that_crashes_hangs_or_misses_a_library_is_one_line_and_the_other_ports_stand(
    factories, monkeypatch, tmp_path, factory, why
):
    if factory == "hangs":  # killed wherever it is by then: in torch's import or asleep
        monkeypatch.setattr(child_process, "TIMEOUT_S", 3.0)
    inputs = write_arrays(tmp_path / "x.npz", _inputs())
    report = run_model(ModelRun(f"{factories}:{factory}", inputs, [OWN, "threads:1"]))
    assert report.absent == [AbsentPort(OWN, why)]
    (threads,) = report.ports
    assert threads.port == "threads:1" and threads.compared == 4 and threads.flagged == 0


def test_opbench_model_names_the_isa_ports_and_refuses_an_unknown_level(capsys):
    args = ("model", "accuracy.workflows.model.zoo:small_cnn", "--inputs", "x=2x3x8x8")
    unknown = run_main(capsys, *args, "--port", "isa:avx3")
    assert unknown.returncode == 2 and "unknown port" in unknown.stderr and "isa:avx2" in unknown.stderr
    ran = run_main(capsys, *args, "--port", OWN, "--json")
    assert ran.returncode == 0, ran.stderr
    (port,) = json.loads(ran.stdout)["ports"]
    assert port["port"] == OWN and port["flagged"] == 0 and port["compared"] == 8
