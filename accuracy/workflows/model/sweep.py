"""Every port of one model evaluated: here, or each port as one work item on a Dask cluster.

Each port's units run isolated on the reference's inputs and the whole port runs end to end;
then each unit is judged once per set of identical inputs, for all the ports fed them (a row
depends on its port only through its output).
"""

from __future__ import annotations

import gc
import math
import pickle
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from accuracy.backends import get_backend
from accuracy.core.dtypes import FORMATS, FloatFormat, is_floating
from accuracy.core.errors import OpbenchError, first_line
from accuracy.core.files import no_parent
from accuracy.core.heap import release_freed_memory
from accuracy.judge.verdicts import WITHIN
from accuracy.workflows.array_files import read_arrays
from accuracy.workflows.cluster import ClusterLost, thread_limits, worker_name
from accuracy.workflows.model.activations_file import activations, checked_activations, save_activations
from accuracy.workflows.model.causes import explain
from accuracy.workflows.model.causes.cause import Context
from accuracy.workflows.model.memory import check_model_memory
from accuracy.workflows.model.ports import build_port, default_ports, spec_for
from accuracy.workflows.model.ports.base import EndToEnd, Port
from accuracy.workflows.model.ports.child_process import Rebuild
from accuracy.workflows.model.ports.file_port import FilePort
from accuracy.workflows.model.ports.keras_layers import keras_port
from accuracy.workflows.model.ports.onnx_file import read_mapping, read_onnx
from accuracy.workflows.model.ports.onnx_quantized import onnx_file_port, read_calibration
from accuracy.workflows.model.positions import sequence_length, with_positions
from accuracy.workflows.model.preprocessing import input_rows
from accuracy.workflows.model.quantization import QUANTIZATION_TIER, judge_quantized
from accuracy.workflows.model.report import ModelReport, PortFacts, port_result
from accuracy.workflows.model.rows import AbsentPort, InputRow, PortResult
from accuracy.workflows.model.schedulers import JUDGE_THREADS, Envelope, InProcess, Scheduler, scheduler_for
from accuracy.workflows.model.trace import LayerCall, load_model, model_inputs, run_in, run_reference
from accuracy.workflows.model.unit import CauseFinding, IsolatedOutput, Unit, UnitJudgement
from accuracy.workflows.model.units import as_runtime_limit, judge_unit

FLOAT64 = FORMATS["float64"]


def _check_save_path(path: Path | str | None) -> None:
    if path is None:
        return
    path = Path(path)
    if path.suffix.lower() not in (".npz", ".safetensors"):
        raise OpbenchError(f"--save-activations {path}: use a .safetensors or .npz file")
    if path.exists():
        raise OpbenchError(f"--save-activations {path}: already exists")
    if no_parent(path):
        raise OpbenchError(f"--save-activations {path}: {no_parent(path)}")


@dataclass(frozen=True)
class ModelRun:
    """What `opbench model` is asked: the model's factory MODULE:FUNCTION and its inputs (a file,
    shapes to generate, or the arrays themselves: the census's token ids), the ports by name, the
    files that stand for ports of their own (`activations_files`: label -> an activations file;
    `onnx_files`: label -> (an ONNX model made elsewhere, its mapping file or None); `keras`: a
    Keras factory or what it returned), where to save the reference's activations, the mode, the
    file quantized ports calibrate on, and where the work runs: the Dask cluster `dask` names, a
    plugin's scheduler by name, or (neither) this process."""

    spec: str
    inputs: Path | str | dict[str, np.ndarray]
    ports: Sequence[str] | None = None
    activations_files: dict[str, str] = field(default_factory=dict)
    save_path: Path | str | None = None
    train: bool = False
    keras: Any = None
    dask: str | None = None
    onnx_files: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    calibration: str | None = None
    scheduler: str | None = None  # a scheduler a package adds (opbench.schedulers), by name


def run_model(run: ModelRun, progress=None) -> ModelReport:
    """The report `opbench model` prints. Every input is checked before anything is judged or
    written, and what names a port before the model is built (`_checked`): bad input is one
    OpbenchError. The ports are evaluated by one pipeline (`_sweep`) on the scheduler the run
    chooses: here, or each port and each unit one work item on a Dask cluster or a plugin's
    scheduler (`progress(done, total, port, seconds)` after each port, where the work runs
    elsewhere); the report is the same either way."""

    checked = _checked(run)
    model = load_model(run.spec, run.train)
    inputs = run.inputs
    given, source = (dict(inputs), "the inputs") if isinstance(inputs, dict) else (model_inputs(inputs), str(inputs))
    if run.calibration is not None:  # a bad file is one line before the reference runs
        read_calibration(run.calibration, given)
    calls, out = run_reference(model, given, source)
    jobs, scheduler = checked.jobs(run, calls), checked.scheduler
    check_model_memory(model, calls, [job.name for job in jobs], source)  # before any port is built
    subject = Subject(run.spec, run.train, model, given, calls)
    reports, absent, interrupted = _sweep(jobs, scheduler, subject, progress if scheduler.remote else None)
    finished = {r.port for r in reports} | {a.port for a in absent}
    not_run = [job.name for job in jobs if job.name not in finished]
    not_saved = None
    if run.save_path is not None:
        try:
            save_activations(run.save_path, activations(calls, out))
        except OpbenchError as exc:  # never overwritten, and the report is kept
            appeared = Path(run.save_path).exists()
            why = "a file appeared there during the run; not overwritten" if appeared else str(exc)
            not_saved = f"--save-activations {run.save_path}: {why}"
    shapes = {k: list(v.shape) for k, v in given.items()}
    mode = "train (as asked)" if run.train else "eval (the default; --train keeps train mode)"
    nonfinite = _nonfinite(given, model, out)
    return ModelReport(run.spec, mode, shapes, reports, absent, interrupted, not_run, not_saved, nonfinite)


@dataclass(frozen=True)
class _Checked:
    """A run's ports, checked before the model is built: where they run, their names, and the
    arrays of each activations file brought (read, to be matched to the reference's layers)."""

    scheduler: Scheduler
    names: list[str]
    files: dict[str, dict[str, np.ndarray]]

    def jobs(self, run: ModelRun, calls: list[LayerCall]) -> list[PortJob]:
        """The ports to evaluate, once each activations file matches the reference's layers."""
        files = [
            FilePort(label, checked_activations(run.activations_files[label], a, calls))
            for label, a in self.files.items()
        ]
        jobs = [
            PortJob(name, factory=run.spec, train=run.train, calibration=run.calibration)
            for name in dict.fromkeys(self.names)
        ]
        jobs += [PortJob(p.name, file=p) for p in files]
        jobs += [PortJob(label, onnx=onnx) for label, onnx in run.onnx_files.items()]
        return jobs + ([PortJob("keras", keras=run.keras)] if run.keras else [])


def _checked(run: ModelRun) -> _Checked:
    """Every input that names a port, checked before any work (the model is not built yet): the
    scheduler, the save path, the files brought (each read, a bad one one line), the port names
    and their labels. What needs the model is checked as soon as it exists: the calibration file
    against its inputs, each activations file against its layers."""
    import torch

    scheduler = scheduler_for(run.dask, run.scheduler)
    _check_save_path(run.save_path)
    files = {label: read_arrays(path) for label, path in run.activations_files.items()}
    if run.keras is not None and scheduler.remote and not isinstance(run.keras, str):
        raise OpbenchError("with --dask, give the Keras port as its factory MODULE:FUNCTION, which workers import")
    for label, (onnx_path, mapping) in run.onnx_files.items():
        read_onnx(label, onnx_path)
        if mapping is not None:
            read_mapping(label, mapping)
    brought = list(files) + list(run.onnx_files) + (["keras"] if run.keras else [])
    names = list(run.ports or ([] if brought else default_ports(torch.cuda.is_available())))
    clash = sorted(set(brought) & set(names))
    if clash:
        raise OpbenchError(f"the label {clash[0]!r} of a file you gave is also a --port: give it another label")
    if len(set(brought)) != len(brought):
        raise OpbenchError("two files you gave (--activations, --onnx) share a label: give each its own")
    for name in names:
        spec_for(name)
    return _Checked(scheduler, names, files)


def _nonfinite(given: dict, model: Any, out: Any) -> dict:
    """The inf and NaN the inputs and the model's weights hold, by name, and the reference's
    output: {} where neither holds any (inf weights gave an answer that never said so)."""
    import torch

    counts = {k: int(np.count_nonzero(~np.isfinite(v.astype(np.float64)))) for k, v in given.items() if is_floating(v)}
    held = [*model.named_parameters(), *model.named_buffers()]
    weights = {k: int((~torch.isfinite(t.detach())).sum()) for k, t in held if t.is_floating_point()}
    if not any(counts.values()) and not any(weights.values()):
        return {}
    return {
        "inputs": {k: n for k, n in counts.items() if n},
        "weights": {k: n for k, n in weights.items() if n},
        "output": int((~torch.isfinite(out)).sum()),
    }


@dataclass(frozen=True)
class PortJob:
    """One port to evaluate, built where it runs: a port of the table by name, an activations
    file's arrays, or a Keras port (its factory MODULE:FUNCTION, or the (model, mapping) it returned)."""

    name: str
    file: FilePort | None = None
    keras: object = None
    onnx: tuple[str, str | None] | None = None  # --onnx: the file and its mapping file
    factory: str | None = None  # the model's MODULE:FUNCTION, for a port that rebuilds it in another process
    train: bool = False
    calibration: str | None = None  # --calibration: the file quantized ports calibrate on
    built: Port | None = None  # a port its caller built and closes (the self-tests), run in this process

    @property
    def backends(self) -> tuple[str, ...]:
        """What the port runs on besides torch: a file's arrays need nothing more."""
        if self.file is not None or self.built is not None:
            return ()
        if self.onnx is not None:
            return ("onnxruntime",)
        return ("tensorflow",) if self.keras is not None else spec_for(self.name).backends

    def build(self, model, inputs: dict[str, np.ndarray], calls: list[LayerCall]) -> Port | str:
        if self.file is not None:
            return self.file
        if self.keras is not None:
            return keras_port(self.keras, calls)
        if self.onnx is not None:
            path, mapping = self.onnx
            return onnx_file_port(self.name, path, read_mapping(self.name, mapping) if mapping else {}, model, inputs)
        rebuild = Rebuild(self.factory, self.train, calls) if self.factory else None
        return build_port(self.name, model, inputs, rebuild, self.calibration)

    def build_or_why(self, model, inputs: dict[str, np.ndarray], calls: list[LayerCall]) -> Port | str:
        """The port, or why it is absent: a built-in port the model cannot be converted to (a
        decoder that does not export to ONNX) is absent with the converter's one line, and the
        other ports are still judged. What the user brought (a file, a Keras factory) is checked
        before anything runs: its problems stay bad input."""
        if self.file is not None or self.keras is not None or self.onnx is not None:
            return self.build(model, inputs, calls)
        try:
            return self.build(model, inputs, calls)
        except OpbenchError as exc:
            return str(exc)
        except Exception as exc:
            return f"it cannot be built for this model: {first_line(exc, typed=True)}"


@dataclass(frozen=True)
class Subject:
    """The model a sweep runs its ports on: its factory and mode (a remote scheduler rebuilds it
    from them), the model itself, its inputs and its reference calls."""

    spec: str | None
    train: bool
    model: Any
    given: dict[str, np.ndarray]
    calls: list[LayerCall]


def _sweep(
    jobs: list[PortJob], scheduler: Scheduler, subject: Subject, progress=None
) -> tuple[list[PortResult], list[AbsentPort], str | None]:
    """The one pipeline, whatever runs its work items (accuracy.workflows.model.schedulers): each
    port run (built, its units isolated, end to end), then each unit judged once for all the ports
    fed it the same inputs; then, here, the flagged units' causes and each port's rows. Returns the
    results, the absent ports, and why the sweep stopped early (`scheduler.stops`: Ctrl-C, a lost
    cluster) or None: then the ports finished so far, in the order of `jobs`. `progress(done,
    total, port, seconds)` after each port whose units are all judged."""
    import torch

    envelope = Envelope(torch.get_num_threads(), JUDGE_THREADS, scheduler.remote)
    runs: list[PortRun | str] = []  # in the order of jobs: the port's runs, or why it is absent
    verdicts: dict[tuple[str, str], UnitJudgement] = {}
    groups: dict[GroupKey, Group] = {}
    stopped, finished = None, _Finished(jobs, progress)
    with scheduler.opened(dict.fromkeys(name for job in jobs for name in job.backends)):
        try:
            runs = list(scheduler.run(*_port_work(scheduler, subject, jobs, envelope)))
            groups = _groups(_ran(runs), subject.calls)
            finished.expect(groups)
            items = [(scheduler.share(j, everywhere=False), envelope) for j in _judgings(groups, _runtimes(runs))]
            for ((covers, *_), (_, _, by_port)), judged in zip(
                groups.items(), scheduler.run(judge_task, items), strict=True
            ):
                if isinstance(judged, str):
                    runs = _not_compared(runs, covers, by_port, judged)
                    judged = {}
                for label, result in judged.items():
                    verdicts[(label, covers[0])] = result
                finished.judged(by_port)
        except scheduler.stops as stop:
            stopped = str(stop) if isinstance(stop, ClusterLost) else "interrupted"
    done = finished.done
    with thread_limits([get_backend("torch")], envelope.judge_threads):
        _explain_flagged(groups, verdicts, subject.model, subject.calls, _runtimes(runs))
        runs = _explain_mismatched(runs[:done], subject.model, subject.calls)
    with thread_limits([get_backend("torch")], envelope.port_threads):
        names = [job.name for job in jobs[:done]]
        reports, absent = _results(names, runs, verdicts, subject.model, subject.given, subject.calls)
    return reports, absent, stopped


class _Finished:
    """The ports finished, in order (their units all judged, or absent, or failed end to end),
    each told to `progress` as it finishes."""

    def __init__(self, jobs: list[PortJob], progress) -> None:
        self.jobs, self.progress, self.start = jobs, progress, time.perf_counter()
        self.done = 0
        self.waiting: dict[str, int] = {}  # port -> its groups not judged yet

    def expect(self, groups: dict[GroupKey, Group]) -> None:
        for _, _, by_port in groups.values():
            for label in by_port:
                self.waiting[label] = self.waiting.get(label, 0) + 1
        self._report()

    def judged(self, by_port: dict) -> None:
        for label in by_port:
            self.waiting[label] -= 1
        self._report()

    def _report(self) -> None:
        while self.done < len(self.jobs) and not self.waiting.get(self.jobs[self.done].name):
            self.done += 1
            if self.progress:
                seconds = time.perf_counter() - self.start
                self.progress(self.done, len(self.jobs), self.jobs[self.done - 1].name, seconds)


def _port_work(
    scheduler: Scheduler, subject: Subject, jobs: list[PortJob], envelope: Envelope
) -> tuple[Callable[..., PortRun | str], list[tuple]]:
    """The port work items: run here on the model itself, or, for a remote scheduler, on the model
    its worker rebuilds from the factory and this process's weights (bitwise the same model, even
    from a factory that draws unseeded weights)."""
    if not scheduler.remote:
        return port_here, [(job, subject, envelope) for job in jobs]
    state, given = scheduler.share(subject.model.state_dict()), scheduler.share(subject.given)
    return port_task, [(subject.spec, subject.train, state, given, job, envelope) for job in jobs]


def run_held(job: PortJob, model, given: dict, calls) -> PortRun | str:
    """One port built on its own copies of the inputs, run, and closed: nothing of it outlives
    this call but its runs (or why it is absent)."""
    port = job.build_or_why(model, own_copies(given), calls)
    if isinstance(port, str):
        return port
    with port:
        return run_or_why(port, given, calls)


def port_here(job: PortJob, subject: Subject, envelope: Envelope) -> PortRun | str:
    """One port in this process, on the envelope's thread count: a port its caller built (the
    self-tests) is run as it is, its failures raised; any other built, run and freed."""
    with thread_limits([get_backend("torch")], envelope.port_threads):
        if job.built is not None:
            return run_port(job.built, subject.given, subject.calls)
        run = run_held(job, subject.model, subject.given, subject.calls)
    gc.collect()  # an exported graph and its sessions hold cycles
    release_freed_memory()
    return run


def port_task(
    spec: str, train: bool, state: dict, given: dict[str, np.ndarray], job: PortJob, envelope: Envelope
) -> PortRun | str:
    """One port on a remote worker: its runs, to be judged, or why it is absent."""
    with thread_limits([get_backend("torch")], envelope.port_threads, for_life=envelope.remote):
        try:
            model = load_model(spec, train)
        except OpbenchError as exc:
            raise OpbenchError(f"on {worker_name()}: {exc}") from None
        model.load_state_dict(state)
        calls, _ = run_reference(model, given, "the inputs")
        return run_held(job, model, given, calls)


def judge_task(judging: Judging, envelope: Envelope) -> dict[str, UnitJudgement] | str:
    """One unit judged, on the envelope's judging thread count, wherever it runs."""
    with thread_limits([get_backend("torch")], envelope.judge_threads, for_life=envelope.remote):
        return judged_or_why(judging)


def judged_or_why(judging: Judging) -> dict[str, UnitJudgement] | str:
    """Each port's verdict on the unit, or why the judge could not give one: that unit is then not
    compared, visibly, and the rest of the run goes on."""
    try:
        return judging.judge()
    except Exception as exc:
        return f"the judge failed on it: {first_line(exc, typed=True)}"


def _ran(runs: Sequence[PortRun | str]) -> list[PortRun]:
    return [run for run in runs if isinstance(run, PortRun)]


def _not_compared(runs: list[PortRun | str], covers: tuple, labels: dict, reason: str) -> list[PortRun | str]:
    """The runs with the unit `covers` marked not compared, with `reason`, in the ports `labels` names."""
    return [
        replace(
            run,
            units=tuple(PlannedUnit(u.covers, reason) if tuple(u.covers) == tuple(covers) else u for u in run.units),
        )
        if isinstance(run, PortRun) and run.facts.name in labels
        else run
        for run in runs
    ]


def own_copies(given: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model inputs, copied: a forward that changes its input (`x.mul_(2)`) changes only the
    copy it was handed, never what another port, the export or the reference receives next."""
    return {name: np.array(value, copy=True) for name, value in given.items()}


def run_or_why(port: Port, given: dict, calls: list[LayerCall]) -> PortRun | str:
    """`run_port`, or why the port could not run at all (it is then absent, the others judged)."""
    try:
        return run_port(port, given, calls)
    except OpbenchError as exc:
        if port.brought:  # what the user brought (a file, a map) is bad input, not an absent port
            raise
        return str(exc)
    except Exception as exc:
        return f"the port failed: {first_line(exc, typed=True)}"


@dataclass(frozen=True)
class PlannedUnit:
    """A unit of a port's run: the calls it covers, and why it is not compared (empty: it is)."""

    covers: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class PortRun:
    """A port's runs before judging, as plain data (a worker sends it back): its units, each
    isolated output with the inputs it was fed, and the end-to-end run or why it failed.
    `mismatched`: the outputs of another shape than the layer's, kept for the causes that change
    a shape (ceil_mode); `explained`: the causes found for them, by unit key."""

    facts: PortFacts
    units: tuple[PlannedUnit, ...]
    outputs: tuple[IsolatedOutput, ...]
    run: EndToEnd | str
    seconds: float
    inputs: list[InputRow]  # the port's own first-layer inputs judged against the model's (preprocessing)
    mismatched: tuple[IsolatedOutput, ...] = ()
    explained: dict[str, CauseFinding] = field(default_factory=dict)


def run_port(port: Port, given: dict, calls: list[LayerCall]) -> PortRun:
    """Every unit of `port` run isolated on the inputs it is judged on, and the port end to end."""
    started = time.perf_counter() - port.built_seconds
    units = port.units(calls)
    outputs: list[IsolatedOutput] = []
    mismatched: list[IsolatedOutput] = []
    not_run: dict[int, str] = {}  # why a unit the port gives could not be compared, by its index
    for i, unit in enumerate(units):
        if unit.reason:
            continue
        try:
            feed = port.inputs_for(unit)
        except Exception as exc:  # inputs the port cannot give this unit: that unit is not compared
            feed = f"the port failed on its inputs: {first_line(exc, typed=True)}"
        if isinstance(feed, str):
            not_run[i] = feed
            continue
        took = [tuple(t.shape) for t in unit.calls[0].inputs]
        fed = [tuple(t.shape) for t in feed.tensors]
        if any(math.prod(f) != math.prod(t) for f, t in zip(fed, took, strict=False)):
            # its own inputs of another size (after a pool of another shape): the layer's output on
            # them is no reference for it
            not_run[i] = f"the port feeds it shape {', '.join(map(str, fed))}, the layer's {', '.join(map(str, took))}"
            continue
        try:
            output = port.isolated(unit, unit.calls[0].inputs)
        except Exception as exc:  # a port that fails on one layer: that layer is not compared, visibly
            why = str(exc) if isinstance(exc, OpbenchError) else f"{first_line(exc, typed=True)}"
            not_run[i] = f"the port failed on it: {why}"
            continue
        expected = tuple(unit.calls[-1].output.shape)
        if np.shape(output) != expected and np.size(output) != np.prod(expected):
            not_run[i] = f"the port's output has shape {np.shape(output)}, the layer's {expected}"
            mismatched.append(IsolatedOutput(i, feed.tensors, feed.source, output))
            continue
        outputs.append(IsolatedOutput(i, feed.tensors, feed.source, output))
    units = [replace(u, reason=not_run[i]) if i in not_run else u for i, u in enumerate(units)]
    run: EndToEnd | str
    try:
        run = port.end_to_end(own_copies(given), units)
    except Exception as exc:
        why = str(exc) if isinstance(exc, OpbenchError) else f"{first_line(exc, typed=True)}"
        run, outputs, mismatched = f"the end-to-end run failed: {why}", [], []
    described = tuple(PlannedUnit(tuple(u.covers), u.reason) for u in units)
    with get_backend("torch").thread_limit(JUDGE_THREADS):
        inputs = input_rows(port, calls, own_copies(given)) if not isinstance(run, str) else []
    seconds = time.perf_counter() - started
    return PortRun(PortFacts.of(port), described, tuple(outputs), run, seconds, inputs, tuple(mismatched))


def _units(run: PortRun, calls: list[LayerCall]) -> list[Unit]:
    by_key = {c.key: c for c in calls}
    return [Unit([by_key[k] for k in u.covers], u.reason) for u in run.units]


class GroupKey(NamedTuple):
    """What makes units one group: the layers, the dtype, the products' format, whose inputs."""

    covers: tuple[str, ...]
    fmt: FloatFormat
    products: FloatFormat | None
    source: str


class Group(NamedTuple):
    """Units fed the same inputs: the unit, those inputs, and each port's output of it."""

    unit: Unit
    tensors: list
    by_port: dict[str, np.ndarray]


def _groups(runs: list[PortRun], calls: list[LayerCall]) -> dict[GroupKey, Group]:
    """The units fed the same inputs, judged once for all their ports (a row depends on its port
    only through its output)."""
    groups: dict[GroupKey, Group] = {}
    for run in runs:
        units = _units(run, calls)
        for o in run.outputs:
            key = GroupKey(tuple(units[o.index].covers), run.facts.fmt, run.facts.products, o.source)
            groups.setdefault(key, Group(units[o.index], o.tensors, {})).by_port[run.facts.name] = o.output
    return groups


@dataclass
class Judging:
    """One unit to judge for every port fed `tensors` the same: one work item. A dataclass, so
    that Dask pickles it whole (its torch serializer refuses bfloat16 tensors in a tuple)."""

    unit: Unit
    tensors: list
    fmt: FloatFormat
    by_port: dict[str, np.ndarray]
    products: FloatFormat | None
    noises: dict[str, dict] = field(default_factory=dict)  # a quantized port's predicted noise, by label

    def __reduce__(self) -> tuple:
        # sent to a worker: torch warns (FutureWarning) on unpickling a call's pytree spec, and a
        # local worker's warnings reach the terminal
        state = (self.unit, self.tensors, self.fmt, self.by_port, self.products, self.noises)
        return _unpickled_quietly, (pickle.dumps(state),)

    def judge(self) -> dict[str, UnitJudgement]:
        """Each port's verdict (the causes of flagged ones are tried where the model is): a
        quantized port's against its quantization noise, the others' against rounding."""
        rounded = {label: out for label, out in self.by_port.items() if label not in self.noises}
        judged = judge_unit(self.unit, self.tensors, self.fmt, rounded, self.products) if rounded else {}
        return judged | {
            label: judge_quantized(self.unit, self.tensors, self.fmt, self.by_port[label], noise)
            for label, noise in self.noises.items()
        }


def _runtimes(runs: Sequence[PortRun | str]) -> dict[str, PortFacts]:
    """Each port's facts (its runtime, a quantized port's predicted noise), by label."""
    return {run.facts.name: run.facts for run in runs if isinstance(run, PortRun)}


def _explain_flagged(
    groups: dict[GroupKey, Group],
    verdicts: dict[tuple[str, str], UnitJudgement],
    model,
    calls,
    facts: dict[str, PortFacts],
) -> None:
    """Each flagged unit of a port judged against rounding, in this process: first its port's
    runtime's declared limits, then the known port bugs (some causes read the model around the
    unit: another layer's bias, the shape before a flatten, which no work item carries)."""
    modules = dict(model.named_modules())
    for (covers, fmt, products, _), (unit, tensors, by_port) in groups.items():
        for label, output in by_port.items():
            result = verdicts.get((label, covers[0]))
            if result is not None and result.judgement.verdict != WITHIN:
                if result.tier == QUANTIZATION_TIER:  # beyond its noise: no rounding cause explains it
                    continue
                runtime = facts[label].runtime if label in facts else "torch"
                limited = as_runtime_limit(result, unit, tensors, fmt, label, output, products, runtime)
                if limited is not None:
                    verdicts[(label, covers[0])] = limited
                    continue
                around = Context(modules, calls, unit.calls[0])
                verdicts[(label, covers[0])] = replace(
                    result, cause=explain(unit, tensors, fmt, label, output, products, around)
                )


def _explain_mismatched(runs: Sequence[PortRun | str], model, calls) -> list[PortRun | str]:
    """The known port bugs tried on each unit whose port output has another shape, in this process
    as for flagged units: one that explains it (a pool's ceil_mode) makes it a row beyond rounding."""
    modules = dict(model.named_modules())
    explained_runs: list[PortRun | str] = []
    for run in runs:
        if isinstance(run, str) or not run.mismatched:
            explained_runs.append(run)
            continue
        units, facts, explained = _units(run, calls), run.facts, dict(run.explained)
        for o in run.mismatched:
            unit = units[o.index]
            around = Context(modules, calls, unit.calls[0])
            cause = explain(unit, o.tensors, facts.fmt, facts.name, o.output, facts.products, around)
            if cause.explains:
                explained[unit.key] = cause
        explained_runs.append(replace(run, explained=explained))
    return explained_runs


def _unpickled_quietly(data: bytes) -> Judging:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning)
        return Judging(*pickle.loads(data))


def _judgings(groups: dict[GroupKey, Group], facts: dict[str, PortFacts]) -> list[Judging]:
    """One work item per group, with the predicted noise of the quantized ports' outputs in it."""
    judgings = []
    for (covers, fmt, products, _), (unit, feed, by_port) in groups.items():
        predicted = {label: (facts[label].noise or {}).get(covers[0]) for label in by_port}
        noises = {label: noise for label, noise in predicted.items() if noise is not None}
        judgings.append(Judging(unit, feed, fmt, by_port, products, noises))
    return judgings


def _results(
    names: list[str],
    runs: list[PortRun | str],
    verdicts: dict[tuple[str, str], UnitJudgement],
    model,
    given: dict,
    calls,
) -> tuple[list[PortResult], list[AbsentPort]]:
    """Each port's result from its runs and its units' verdicts, beside the float64 model and
    PyTorch's own run at the port's dtype; and the absent ports, with why."""
    reference64 = activations(*run_in(model, given, FLOAT64))
    own: dict[str, dict[str, np.ndarray]] = {}  # PyTorch's own activations at each port dtype
    results, absent = [], []
    for name, run in zip(names, runs, strict=True):
        if isinstance(run, str):
            absent.append(AbsentPort(name, run))
            continue
        if isinstance(run.run, str):
            absent.append(AbsentPort(name, run.run))
            continue
        fmt = run.facts.fmt
        if fmt.name not in own:
            own[fmt.name] = activations(*run_in(model, given, fmt))
        units = _units(run, calls)
        judged = {u.key: verdicts[(run.facts.name, u.key)] for u in units if (run.facts.name, u.key) in verdicts}
        result = port_result(
            run.facts, calls, reference64, own[fmt.name], judged, units, run.run, run.seconds, run.explained
        )
        length = sequence_length(given)
        # token sequences: each flagged unit's error at each position
        layers = result.layers if length is None else with_positions(result.layers, units, run.outputs, fmt, length)
        results.append(replace(result, layers=layers, inputs=run.inputs))
    return results, absent


def evaluate_ports(ports: list[Port], model, given: dict, calls) -> tuple[list[PortResult], list[AbsentPort]]:
    """Ports built by the caller (the self-tests), evaluated here through the one pipeline, under
    the same envelope: each port's result, and the ports whose end-to-end run failed, absent with
    its one line. A port's failure to run at all is raised; the caller closes its ports."""
    jobs = [PortJob(port.name, built=port) for port in ports]
    results, absent, _ = _sweep(jobs, InProcess(), Subject(None, False, model, given, calls))
    return results, absent
