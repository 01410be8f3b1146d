"""Ports in an environment of their own (#56): uv builds it from the port's pins, keeps it by a hash
of them, shows its lines while it builds and measures it; the model is rebuilt there by its factory
with this process's weights. No test downloads: uv runs offline (UV_OFFLINE), so a release its cache
lacks is a failed build here, never gigabytes fetched; the torch pinned is this environment's own."""

from __future__ import annotations

import importlib.metadata
import os
import sys
import textwrap

import numpy as np
import pytest
import torch
from user_modules import same_model_output

from accuracy.backends.pytorch import tensor_to_numpy as to_numpy
from accuracy.core.files import cache_home
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.ports import build_port, spec_for
from accuracy.workflows.model.ports.child_process import ChildPort, Rebuild
from accuracy.workflows.model.ports.environments import READY, environments_root, pins_for
from accuracy.workflows.model.sweep import ModelRun, run_model
from accuracy.workflows.model.trace import load_model, record

pytestmark = pytest.mark.slow  # uv and a Python with torch: seconds
OWN_TORCH = f"env:torch=={torch.__version__}"  # in uv's cache where `make setup` installed it with uv
TORCH_ONLY = textwrap.dedent(
    """
    import torch

    def model():  # unseeded: the child draws other weights, which the parent's replace
        return torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    """
)


@pytest.fixture
def offline(tmp_path, monkeypatch, one_thread_count):
    """A cache of environments of the test's own, uv held to its own cache, and a factory importing only torch."""
    monkeypatch.setenv("UV_CACHE_DIR", os.environ.get("UV_CACHE_DIR") or str(cache_home() / "uv"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("UV_OFFLINE", "1")
    (tmp_path / "torch_only.py").write_text(TORCH_ONLY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "torch_only:model"
    sys.modules.pop("torch_only", None)


def _inputs() -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(3).standard_normal((5, 6)).astype(np.float32)}


def test_a_factory_importing_only_torch_runs_unchanged_in_an_environment_built_then_cached(offline, capsys):
    """Built once (its lines shown, its time told), then found by the hash of its pins; the model
    there is this one: at this process's kernels and threads, the same bits leaf by leaf and end to end."""
    model, inputs = load_model(offline), _inputs()
    calls, out = record(model, inputs)
    first = build_port(OWN_TORCH, model, inputs, Rebuild(offline, False, calls))
    assert isinstance(first, ChildPort), first
    shown = capsys.readouterr().err
    assert f"--port {OWN_TORCH}: building its environment with uv: torch=={torch.__version__} safetensors==" in shown
    assert "environment built in" in shown
    assert f"PyTorch {torch.__version__} in its own environment (torch=={torch.__version__}" in first.description
    assert ", cached)" not in first.description
    (built,) = list(environments_root().iterdir())  # one environment, no half-built folder left
    assert (built / READY).is_file()
    again = build_port(OWN_TORCH, model, inputs, Rebuild(offline, False, calls))
    assert isinstance(again, ChildPort) and ", cached)" in again.description
    assert "building" not in capsys.readouterr().err
    for port in (first, again):
        units = port.units(calls)
        for unit in units:
            assert same_model_output(port.isolated(unit, []), to_numpy(unit.calls[0].output))
        assert same_model_output(port.end_to_end(inputs, units).output, to_numpy(out))


def test_pins_that_do_not_resolve_are_one_line_and_the_other_ports_stand(offline, tmp_path):
    inputs = write_arrays(tmp_path / "x.npz", _inputs())
    report = run_model(ModelRun(offline, inputs, ["env:torch==0.0.1", "env:torch>>1", "threads:1"]))
    (threads,) = report.ports
    assert threads.compared == 3 and threads.flagged == 0
    unresolved, malformed = report.absent
    assert unresolved.port == "env:torch==0.0.1"
    assert unresolved.reason.startswith("its pins do not install: ") and "torch" in unresolved.reason
    assert "\n" not in unresolved.reason
    assert malformed.reason.startswith("--port env:torch>>1: 'torch>>1' is not a requirement")
    assert not list(environments_root().iterdir())  # the failed build left nothing to be found later


def test_the_pins_of_a_port(monkeypatch):
    """torch==VERSION carries this stack's torchvision (the release built for that torch) and
    transformers; env:PINS is the user's set; both get the runner's helpers at this environment's
    versions, except where the port pins them itself."""
    numpy = importlib.metadata.version("numpy")
    safetensors = importlib.metadata.version("safetensors")
    moved = pins_for("torch==2.15.0")
    assert moved[:2] == ["torch==2.15.0", "torchvision"]
    assert f"transformers=={importlib.metadata.version('transformers')}" in moved
    assert f"numpy=={numpy}" in moved and f"safetensors=={safetensors}" in moved
    own = pins_for("env:torch==2.12.0, numpy==2.3.5")
    assert own[:2] == ["torch==2.12.0", "numpy==2.3.5"] and f"numpy=={numpy}" not in own
    assert f"safetensors=={safetensors}" in own and not any(p.startswith("torchvision") for p in own)
    assert spec_for("env:torch==2.12.0,numpy==2.3.5").name == "env:PINS"
    assert spec_for("torch==2.15.0").name == "torch==VERSION"
