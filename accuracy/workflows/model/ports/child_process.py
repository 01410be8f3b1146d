"""A port in a child process: the same model rebuilt there from its factory, in this environment
with PyTorch's dispatch knobs set before torch loads (`isa:LEVEL`), or in an environment of its
own (`env:PINS`, `torch==VERSION`: port_environments.py).

The child gets the parent's weights as safetensors (the same model even where the factory draws
unseeded weights), the model's inputs and each leaf call's inputs, and sends back each leaf's
output on them and its own end-to-end run, in the activations-file protocol that `--activations`
reads (child_runner.py is the child's side). Its units are judged on the reference's inputs, as
an in-process port's are. A child that crashes, hangs or cannot import what it needs makes the
port absent with one line; the other ports' results stand.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from accuracy.backends.cpu_levels import LEVELS, lacks
from accuracy.backends.pytorch import tensor_to_numpy as to_numpy
from accuracy.core.files import cache_home
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.activations_file import END_TO_END, OUTPUT_KEY, input_key, read_activations
from accuracy.workflows.model.ports.base import FLOAT32, EndToEnd, Port
from accuracy.workflows.model.trace import LayerCall
from accuracy.workflows.model.unit import Unit, leaf_units, port_inputs

RUNNER = Path(__file__).with_name("child_runner.py")
PACKAGE = Path(__file__).parents[3]  # the `accuracy` package this process imports
# the runner by path: its own folder is not put on sys.path (runpy), the current directory is (-c)
COMMAND = "import runpy, sys; sys.argv.pop(0); runpy.run_path(sys.argv[0], run_name='__main__')"
# The longest a child may run before it counts as hung: BERT-base's reference and leaves took 40 s
# in-process here; a child that also starts torch and reads the weights gets ten times that.
TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Rebuild:
    """What a child needs to build the model again: its factory, the mode, the reference's calls."""

    factory: str
    train: bool
    calls: list[LayerCall]


class ChildPort(Port):
    """The units a child process computed: each leaf's output on the reference's inputs, and its own end-to-end run."""

    def __init__(self, name: str, description: str, arrays: dict[str, np.ndarray], seconds: float, reasons=None):
        self.name, self.description, self.arrays, self.built_seconds = name, description, arrays, seconds
        self.reasons: dict[str, str] = reasons or {}  # why the child gave no output for a leaf, where it said
        self.fmt = FLOAT32

    def units(self, calls: list[LayerCall]) -> list[Unit]:
        units = leaf_units(calls)
        for unit in units:
            if not unit.reason and unit.key not in self.arrays:
                unit.reason = self.reasons.get(unit.key, "the child process gave no output for it")
        return units

    def isolated(self, unit: Unit, inputs: list) -> np.ndarray:
        return self.arrays[unit.key]

    def end_to_end(self, inputs, units) -> EndToEnd:
        own = {k.removeprefix(END_TO_END): a for k, a in self.arrays.items() if k.startswith(END_TO_END)}
        return EndToEnd({k: a for k, a in own.items() if k != OUTPUT_KEY}, own[OUTPUT_KEY])


def _write_request(folder: Path, model, inputs: dict, rebuild: Rebuild, threads: int, same: bool, convert) -> None:
    """The child's inputs: the request, the weights, the model's inputs and each judged leaf's inputs."""
    from safetensors.torch import save_file

    # copies, so that tied weights (a decoder's embedding and head) are two tensors safetensors takes
    save_file(
        {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}, folder / "weights.safetensors"
    )
    write_arrays(folder / "inputs.safetensors", inputs)
    leaves = [u.calls[0] for u in leaf_units(rebuild.calls) if not u.reason]
    feeds = {input_key(c, i): to_numpy(t) for c in leaves for i, t in enumerate(port_inputs(c.inputs, FLOAT32))}
    write_arrays(folder / "activations.safetensors", feeds)
    request = {"factory": rebuild.factory, "train": rebuild.train, "threads": threads, "same_environment": same}
    request["convert"] = convert  # None: PyTorch runs the leaves; "litert": LiteRT does
    (folder / "request.json").write_text(json.dumps(request))


def _failure(process: subprocess.CompletedProcess) -> str:
    """The child's failure in one line: its own last line, or the signal that ended it."""
    lines = [line.strip() for line in process.stderr.splitlines() if line.strip()]
    said = lines[-1] if lines else ""
    if process.returncode < 0:
        name = signal.Signals(-process.returncode).name
        return f"the child process died of {name}" + (f" ({said})" if said else "")
    return f"the child process failed: {said or f'exit status {process.returncode}'}"


def _import_path() -> Path:
    """A folder holding only a link to this `accuracy` package: opbench importable in the child
    (its torchvision shim, its zoo's factories) and nothing else of this environment, as the
    folder it is imported from here may be a site-packages holding this torch. Kept in the cache
    (one per package path), so that the child's bytecode of it is written once."""
    folder = cache_home() / "opbench" / "import-path" / hashlib.sha256(str(PACKAGE).encode()).hexdigest()[:16]
    link = folder / "accuracy"
    if not link.is_symlink():
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # another opbench made it meanwhile
            link.symlink_to(PACKAGE, target_is_directory=True)
    return folder


def run_child(python: str, knobs: dict[str, str], model, inputs: dict, rebuild: Rebuild, same: bool, convert=None):
    """The child's result: (its arrays, its facts, seconds), or why it gave none, in one line."""
    import torch

    started = time.perf_counter()
    environ = {**os.environ, **knobs, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    command = [python, "-c", COMMAND, str(RUNNER)]
    with tempfile.TemporaryDirectory(prefix="opbench-port-") as name:
        folder = Path(name)
        environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_import_path()), os.environ.get("PYTHONPATH")]))
        _write_request(folder, model, inputs, rebuild, torch.get_num_threads(), same, convert)
        try:
            process = subprocess.run(
                [*command, name],
                env=environ,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return f"the child process did not finish in {TIMEOUT_S:g} s (killed)"
        except OSError as exc:
            return f"the child process did not start: {exc.strerror or exc}"
        if process.returncode != 0:
            return _failure(process)
        facts = json.loads((folder / "result.json").read_text())
        arrays = read_activations(folder / "result.safetensors", rebuild.calls)
    return arrays, facts, time.perf_counter() - started


def isa_port(name: str, model, inputs: dict, rebuild: Rebuild) -> Port | str:
    """PyTorch in a child process with ATen, oneDNN and MKL held to one x86 level (isa:default,
    isa:avx2, isa:avx512); absent where this CPU lacks it."""
    level = LEVELS[name.partition(":")[2]]
    why = lacks(level.name)
    if why is not None:
        return why
    done = run_child(sys.executable, level.knobs, model, inputs, rebuild, same=True)
    if isinstance(done, str):
        return done
    arrays, facts, seconds = done
    if facts["capability"].lower() != level.name:
        return f"asked for ATen's {level.name} kernels, the child dispatched to {facts['capability']}"
    knobs = ", ".join(f"{k}={v}" for k, v in level.knobs.items())
    described = f"PyTorch {facts['torch']} in a child process on {facts['capability']} kernels ({knobs})"
    return ChildPort(name, described, arrays, seconds)
