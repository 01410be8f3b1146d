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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from accuracy.backends import get_backend
from accuracy.core.dtypes import FORMATS, FloatFormat, is_floating
from accuracy.core.errors import OpbenchError, first_line
from accuracy.core.files import no_parent
from accuracy.core.heap import release_freed_memory
from accuracy.judge.verdicts import WITHIN
from accuracy.workflows.array_files import byte_size, check_memory
from accuracy.workflows.cluster import ClusterLost, thread_limits, work_pool, worker_name
from accuracy.workflows.model.activations_file import activations, read_activations, save_activations
from accuracy.workflows.model.causes import explain
from accuracy.workflows.model.causes.cause import Context
from accuracy.workflows.model.ports import build_port, default_ports, spec_for
from accuracy.workflows.model.ports.base import EndToEnd, Port
from accuracy.workflows.model.ports.child_process import Rebuild
from accuracy.workflows.model.ports.file_port import FilePort
from accuracy.workflows.model.ports.keras_layers import keras_port
from accuracy.workflows.model.ports.onnx_file import read_mapping, read_onnx
from accuracy.workflows.model.ports.onnx_quantized import onnx_file_port, read_calibration
from accuracy.workflows.model.positions import add_positions, sequence_length
from accuracy.workflows.model.preprocessing import input_rows
from accuracy.workflows.model.quantization import QUANTIZATION_TIER, judge_quantized
from accuracy.workflows.model.report import ModelReport, PortFacts, PortResult, port_result
from accuracy.workflows.model.trace import LayerCall, load_model, model_inputs, run_in, run_reference
from accuracy.workflows.model.unit import CauseFinding, Unit, UnitJudgement
from accuracy.workflows.model.units import as_runtime_limit, judge_unit

# The float64 references and Monte Carlo runs run on one thread: bitwise the same on any machine,
# and many small float64 kernels run far faster alone than fighting over shared cores.
JUDGE_THREADS = 1
# Peak memory per byte of the reference run's activations (every layer's inputs and output),
# measured as the growth of peak RSS between small_cnn on 128 and 512 images: 48 with the
# torchscript port (nested units), 57 with the three default ports. An upper estimate: a
# transformer holds less per activation byte (BERT-base, 128 tokens, default ports: 8.9 GB peak
# for 265 MiB of activations, 34), so the model is refused only past all the memory available
# now, not half of it (half refused BERT-base on 22 GB).
MODEL_MEMORY_FACTOR = 60
MODEL_MEMORY_FRACTION = 1.0
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
    file quantized ports calibrate on, and the Dask cluster to run on (None: here)."""

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


def run_model(run: ModelRun, progress=None) -> ModelReport:
    """The report `opbench model` prints. Every input is checked before anything is judged or
    written (`_checked_jobs`): bad input is one OpbenchError. The ports are evaluated here, or
    each as one work item on the Dask cluster `run.dask` names (`progress(done, total, port,
    seconds)` after each); the report is the same either way."""
    import torch

    model = load_model(run.spec, run.train)
    inputs = run.inputs
    given, source = (dict(inputs), "the inputs") if isinstance(inputs, dict) else (model_inputs(inputs), str(inputs))
    calls, out = run_reference(model, given, source)
    held = sum(t.nbytes for c in calls for t in (*c.inputs, c.output) if isinstance(t, torch.Tensor))
    check_memory(
        MODEL_MEMORY_FACTOR * held, f"the model's activations on {source} ({byte_size(held)})", MODEL_MEMORY_FRACTION
    )
    jobs = _checked_jobs(run, given, calls)
    interrupted, not_run = None, []
    if run.dask is None:
        reports, absent = _ports_here(jobs, model, given, calls)
    else:
        reports, absent, interrupted = _ports_on_cluster(
            jobs, run.dask, run.spec, run.train, model, given, calls, progress
        )
        finished = {r["port"] for r in reports} | {a["port"] for a in absent}
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


def _checked_jobs(run: ModelRun, given: dict, calls: list[LayerCall]) -> list[PortJob]:
    """The ports to evaluate, once every input naming them is checked: the save path, the files
    brought (each read, a bad one one line), the port names, their labels, the calibration file."""
    import torch

    _check_save_path(run.save_path)
    file_ports = [FilePort(label, read_activations(path, calls)) for label, path in run.activations_files.items()]
    if run.keras is not None and run.dask is not None and not isinstance(run.keras, str):
        raise OpbenchError("with --dask, give the Keras port as its factory MODULE:FUNCTION, which workers import")
    for label, (onnx_path, mapping) in run.onnx_files.items():  # bad files are one line before anything runs
        read_onnx(label, onnx_path)
        if mapping is not None:
            read_mapping(label, mapping)
    brought = [p.name for p in file_ports] + list(run.onnx_files) + (["keras"] if run.keras else [])
    names = list(run.ports or ([] if brought else default_ports(torch.cuda.is_available())))
    clash = sorted(set(brought) & set(names))
    if clash:
        raise OpbenchError(f"the label {clash[0]!r} of a file you gave is also a --port: give it another label")
    if len(set(brought)) != len(brought):
        raise OpbenchError("two files you gave (--activations, --onnx) share a label: give each its own")
    for name in names:
        spec_for(name)
    if run.calibration is not None:  # a bad file is one line before anything runs
        read_calibration(run.calibration, given)
    jobs = [
        PortJob(name, factory=run.spec, train=run.train, calibration=run.calibration) for name in dict.fromkeys(names)
    ]
    jobs += [PortJob(p.name, file=p) for p in file_ports]
    jobs += [PortJob(label, onnx=files) for label, files in run.onnx_files.items()]
    return jobs + ([PortJob("keras", keras=run.keras)] if run.keras else [])


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

    @property
    def backends(self) -> tuple[str, ...]:
        """What the port runs on besides torch: a file's arrays need nothing more."""
        if self.file is not None:
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


def run_held(job: PortJob, model, given: dict, calls) -> PortRun | str:
    """One port built on its own copies of the inputs, run, and closed: nothing of it outlives
    this call but its runs (or why it is absent)."""
    port = job.build_or_why(model, own_copies(given), calls)
    if isinstance(port, str):
        return port
    with port:
        return run_or_why(port, given, calls)


def _ports_here(jobs: list[PortJob], model, given: dict, calls) -> tuple[list[PortResult], list[dict]]:
    """Every port in this process: (port results, absent ports), under the thread limits a Dask
    worker's `port_task` holds (torch's count, and the BLAS libraries held to it too), so that a
    port gives the same bits here and on a cluster whatever limits this process had before."""
    import torch

    names, runs, absent = [], [], []
    # What exists now (the frameworks, the model, its reference calls) outlives the ports: frozen,
    # the collections below and the interpreter's own visit only what the ports make. With torch
    # and transformers loaded a full collection took 0.4 s, a fifth of the model tests' time.
    gc.freeze()
    try:
        with thread_limits([get_backend("torch")], torch.get_num_threads()):
            for job in jobs:  # one port held at a time: an exported BERT-base and its sessions are GBs
                run = run_held(job, model, given, calls)
                gc.collect()  # an exported graph and its sessions hold cycles
                release_freed_memory()
                if isinstance(run, str):
                    absent.append({"port": job.name, "reason": run})
                    continue
                names.append(run.facts.name)
                runs.append(run)
            results, failed = judge_runs(names, runs, model, given, calls)
            return results, absent + failed
    finally:
        gc.unfreeze()


def _ports_on_cluster(
    jobs: list[PortJob], dask: str, spec: str, train: bool, model, given: dict, calls, progress
) -> tuple[list[PortResult], list[dict], str | None]:
    """The ports on a Dask cluster, and why the sweep stopped early (Ctrl-C, a lost scheduler) or
    None: then the ports finished so far, in the order of `jobs`.

    Two rounds of work items: each port run (built, its units isolated, end to end), then each
    unit judged once for all the ports fed it the same inputs, as here: the judging, most of the
    time, is spread over the workers unit by unit, not port by port. Workers build the model from
    its factory and take this process's weights (bitwise the same model, even from a factory that
    draws unseeded weights); ports run on this process's torch thread count and judging on
    JUDGE_THREADS, as here, so the report is the one this process would give."""
    import torch

    runs: list[PortRun | str] = []  # in the order of jobs: the port's runs, or why it is absent
    verdicts: dict[tuple[str, str], UnitJudgement] = {}
    start, stopped, futures = time.perf_counter(), None, []
    groups: dict[tuple, tuple] = {}
    done = 0  # ports finished, in order: their units all judged (or absent, or failed end to end)
    waiting: dict[str, int] = {}  # port -> its groups not judged yet

    def report_finished() -> None:
        nonlocal done
        while done < len(runs) and not waiting.get(jobs[done].name):
            done += 1
            if progress:
                progress(done, len(jobs), jobs[done - 1].name, time.perf_counter() - start)

    with work_pool(dask, preload=["torch", *(name for job in jobs for name in job.backends)]) as pool:
        try:
            state, shared = pool.share(model.state_dict()), pool.share(given)
            threads = torch.get_num_threads()
            futures = [pool.submit(port_task, spec, train, state, shared, job, threads) for job in jobs]
            runs = [future.result() for future in futures]
            groups = _groups([r for r in runs if isinstance(r, PortRun)], calls)
            for _, _, by_port in groups.values():
                for label in by_port:
                    waiting[label] = waiting.get(label, 0) + 1
            futures = [
                pool.submit(judge_task, pool.share(item, everywhere=False))
                for item in _judgings(groups, _runtimes(runs))
            ]
            report_finished()
            for ((covers, *_), (_, _, by_port)), future in zip(groups.items(), futures, strict=True):
                judged = future.result()
                if isinstance(judged, str):
                    _not_compared([r for r in runs if isinstance(r, PortRun)], covers, by_port, judged)
                    judged = {}
                for label, result in judged.items():
                    verdicts[(label, covers[0])] = result
                for label in by_port:
                    waiting[label] -= 1
                report_finished()
        except (KeyboardInterrupt, ClusterLost) as stop:
            stopped = str(stop) if isinstance(stop, ClusterLost) else "interrupted"
        finally:
            for future in futures:
                future.cancel()
    with thread_limits([get_backend("torch")], JUDGE_THREADS):
        _explain_flagged(groups, verdicts, model, calls, _runtimes(runs))
        _explain_mismatched(runs[:done], model, calls)
    with thread_limits([get_backend("torch")], torch.get_num_threads()):
        reports, absent = _results([job.name for job in jobs[:done]], runs[:done], verdicts, model, given, calls)
    return reports, absent, stopped


def port_task(
    spec: str, train: bool, state: dict, given: dict[str, np.ndarray], job: PortJob, threads: int
) -> PortRun | str:
    """One port of `opbench model --dask` on a worker: its runs, to be judged, or why it is absent."""
    with thread_limits([get_backend("torch")], threads, for_life=True):
        try:
            model = load_model(spec, train)
        except OpbenchError as exc:
            raise OpbenchError(f"on {worker_name()}: {exc}") from None
        model.load_state_dict(state)
        calls, _ = run_reference(model, given, "the inputs")
        return run_held(job, model, given, calls)


def judge_task(judging: Judging) -> dict[str, UnitJudgement] | str:
    """One unit judged on a Dask worker, on the thread count it is judged on here."""
    with thread_limits([get_backend("torch")], JUDGE_THREADS, for_life=True):
        return judged_or_why(judging)


def judged_or_why(judging: Judging) -> dict[str, UnitJudgement] | str:
    """Each port's verdict on the unit, or why the judge could not give one: that unit is then not
    compared, visibly, and the rest of the run goes on."""
    try:
        return judging.judge()
    except Exception as exc:
        return f"the judge failed on it: {first_line(exc, typed=True)}"


def _not_compared(runs: list[PortRun], covers: tuple, labels: dict, reason: str) -> None:
    """The unit `covers` marked not compared, with `reason`, in the runs of the ports `labels` names."""
    for run in runs:
        if run.facts.name in labels:
            run.units = [(c, reason if tuple(c) == tuple(covers) else why) for c, why in run.units]


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


@dataclass
class PortRun:
    """A port's runs before judging, as plain data (a worker sends it back): each unit's layers
    and why it is not compared, each isolated output with the inputs it was fed (unit index,
    tensors, whose they are, output), and the end-to-end run or why it failed. `mismatched`: the
    outputs of another shape than the layer's, kept for the causes that change a shape (ceil_mode);
    `explained`: the causes found for them, by unit key."""

    facts: PortFacts
    units: list[tuple[list[str], str]]
    outputs: list[tuple[int, list, str, np.ndarray]]
    run: EndToEnd | str
    seconds: float
    inputs: list[dict]  # the port's own first-layer inputs judged against the model's (preprocessing)
    mismatched: list[tuple[int, list, str, np.ndarray]] = field(default_factory=list)
    explained: dict[str, CauseFinding] = field(default_factory=dict)


def run_port(port: Port, given: dict, calls: list[LayerCall]) -> PortRun:
    """Every unit of `port` run isolated on the inputs it is judged on, and the port end to end."""
    started = time.perf_counter() - port.built_seconds
    units = port.units(calls)
    outputs, mismatched = [], []
    for i, unit in enumerate(units):
        if unit.reason:
            continue
        try:
            feed = port.inputs_for(unit)
        except Exception as exc:  # inputs the port cannot give this unit: that unit is not compared
            feed = f"the port failed on its inputs: {first_line(exc, typed=True)}"
        if isinstance(feed, str):
            unit.reason = feed
            continue
        took = [tuple(t.shape) for t in unit.calls[0].inputs]
        fed = [tuple(t.shape) for t in feed.tensors]
        if any(math.prod(f) != math.prod(t) for f, t in zip(fed, took, strict=False)):
            # its own inputs of another size (after a pool of another shape): the layer's output on
            # them is no reference for it
            unit.reason = f"the port feeds it shape {', '.join(map(str, fed))}, the layer's {', '.join(map(str, took))}"
            continue
        try:
            output = port.isolated(unit, unit.calls[0].inputs)
        except Exception as exc:  # a port that fails on one layer: that layer is not compared, visibly
            why = str(exc) if isinstance(exc, OpbenchError) else f"{first_line(exc, typed=True)}"
            unit.reason = f"the port failed on it: {why}"
            continue
        expected = tuple(unit.calls[-1].output.shape)
        if np.shape(output) != expected and np.size(output) != np.prod(expected):
            unit.reason = f"the port's output has shape {np.shape(output)}, the layer's {expected}"
            mismatched.append((i, feed.tensors, feed.source, output))
            continue
        outputs.append((i, feed.tensors, feed.source, output))
    run: EndToEnd | str
    try:
        run = port.end_to_end(own_copies(given), units)
    except Exception as exc:
        why = str(exc) if isinstance(exc, OpbenchError) else f"{first_line(exc, typed=True)}"
        run, outputs, mismatched = f"the end-to-end run failed: {why}", [], []
    described = [(u.covers, u.reason) for u in units]
    with get_backend("torch").thread_limit(JUDGE_THREADS):
        inputs = input_rows(port, calls, own_copies(given)) if not isinstance(run, str) else []
    return PortRun(PortFacts.of(port), described, outputs, run, time.perf_counter() - started, inputs, mismatched)


def _units(run: PortRun, calls: list[LayerCall]) -> list[Unit]:
    by_key = {c.key: c for c in calls}
    return [Unit([by_key[k] for k in covers], reason) for covers, reason in run.units]


def _groups(runs: list[PortRun], calls: list[LayerCall]) -> dict[tuple, tuple]:
    """The units fed the same inputs, judged once for all their ports (a row depends on its port
    only through its output): (layers, dtype, products, whose inputs) -> (unit, inputs, outputs by port)."""
    groups: dict[tuple, tuple] = {}
    for run in runs:
        units = _units(run, calls)
        for i, tensors, source, output in run.outputs:
            group = (tuple(units[i].covers), run.facts.fmt, run.facts.products, source)
            groups.setdefault(group, (units[i], tensors, {}))[2][run.facts.name] = output
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
    groups: dict[tuple, tuple],
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


def _explain_mismatched(runs: Sequence[PortRun | str], model, calls) -> None:
    """The known port bugs tried on each unit whose port output has another shape, in this process
    as for flagged units: one that explains it (a pool's ceil_mode) makes it a row beyond rounding."""
    modules = dict(model.named_modules())
    for run in runs:
        if isinstance(run, str) or not run.mismatched:
            continue
        units = _units(run, calls)
        for i, tensors, _, output in run.mismatched:
            unit, facts = units[i], run.facts
            around = Context(modules, calls, unit.calls[0])
            cause = explain(unit, tensors, facts.fmt, facts.name, output, facts.products, around)
            if cause.explains:
                run.explained[unit.key] = cause


def _unpickled_quietly(data: bytes) -> Judging:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning)
        return Judging(*pickle.loads(data))


def _judgings(groups: dict[tuple, tuple], facts: dict[str, PortFacts]) -> list[Judging]:
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
) -> tuple[list[PortResult], list[dict]]:
    """Each port's result from its runs and its units' verdicts, beside the float64 model and
    PyTorch's own run at the port's dtype; and the absent ports, with why."""
    reference64 = activations(*run_in(model, given, FLOAT64))
    own: dict[str, dict[str, np.ndarray]] = {}  # PyTorch's own activations at each port dtype
    results, absent = [], []
    for name, run in zip(names, runs, strict=True):
        if isinstance(run, str):
            absent.append({"port": name, "reason": run})
            continue
        if isinstance(run.run, str):
            absent.append({"port": name, "reason": run.run})
            continue
        fmt = run.facts.fmt
        if fmt.name not in own:
            own[fmt.name] = activations(*run_in(model, given, fmt))
        units = _units(run, calls)
        judged = {u.key: verdicts[(run.facts.name, u.key)] for u in units if (run.facts.name, u.key) in verdicts}
        row = port_result(
            run.facts, calls, reference64, own[fmt.name], judged, units, run.run, run.seconds, run.explained
        )
        row["inputs"] = run.inputs
        length = sequence_length(given)
        if length is not None:  # token sequences: each flagged unit's error at each position
            add_positions(row["layers"], units, run.outputs, fmt, length)  # type: ignore[arg-type]
        results.append(row)
    return results, absent


def evaluate_ports(ports: list[Port], model, given: dict, calls) -> tuple[list[PortResult], list[dict]]:
    """Each port's result: every unit's isolated output and the end-to-end run, then the units
    judged, those fed the same inputs once for all their ports; and the ports whose end-to-end
    run failed, absent with its one line."""
    return judge_runs(
        [port.name for port in ports], [run_port(port, given, calls) for port in ports], model, given, calls
    )


def judge_runs(names: list[str], runs: list[PortRun], model, given: dict, calls) -> tuple[list[PortResult], list[dict]]:
    """The ports' results from their runs (`names`: their labels, in order), as `evaluate_ports`."""
    verdicts: dict[tuple[str, str], UnitJudgement] = {}
    with get_backend("torch").thread_limit(JUDGE_THREADS):
        groups = _groups(runs, calls)
        for (covers, *_), judging in zip(groups, _judgings(groups, _runtimes(runs)), strict=True):
            judged = judged_or_why(judging)
            if isinstance(judged, str):
                _not_compared(runs, covers, judging.by_port, judged)
                judged = {}
            for label, result in judged.items():
                verdicts[(label, covers[0])] = result
        _explain_flagged(groups, verdicts, model, calls, _runtimes(runs))
        _explain_mismatched(runs, model, calls)
    return _results(names, list(runs), verdicts, model, given, calls)
