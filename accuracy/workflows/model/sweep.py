"""Every port of one model evaluated: here, or each port as one work item on a Dask cluster.

Each port's units run isolated on the reference's inputs and the whole port runs end to end;
then each unit is judged once per set of identical inputs, for all the ports fed them (a row
depends on its port only through its output).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from accuracy.backends import get_backend
from accuracy.core.dtypes import FORMATS, is_floating
from accuracy.core.errors import OpbenchError, first_line
from accuracy.judge.verdicts import WITHIN
from accuracy.workflows.cluster import ClusterLost, thread_limits, work_pool, worker_name
from accuracy.workflows.model.activations_file import activations, read_activations, save_activations
from accuracy.workflows.model.causes import explain
from accuracy.workflows.model.causes.cause import Context
from accuracy.workflows.model.ports import build_port, default_ports, spec_for
from accuracy.workflows.model.ports.activations import FilePort
from accuracy.workflows.model.ports.base import Port
from accuracy.workflows.model.ports.keras_layers import keras_port
from accuracy.workflows.model.ports.onnx_file import OnnxFilePort, read_mapping, read_onnx
from accuracy.workflows.model.preprocessing import input_rows
from accuracy.workflows.model.report import ModelReport, PortResult, port_result
from accuracy.workflows.model.trace import LayerCall, load_model, model_inputs, run_in, run_reference
from accuracy.workflows.model.units import UnitJudgement, judge_unit

# The float64 references and Monte Carlo runs run on one thread: bitwise the same on any machine,
# and many small float64 kernels run far faster alone than fighting over shared cores.
JUDGE_THREADS = 1
FLOAT64 = FORMATS["float64"]


def _check_save_path(path: Path | str | None) -> None:
    if path is None:
        return
    path = Path(path)
    if path.suffix.lower() not in (".npz", ".safetensors"):
        raise OpbenchError(f"--save-activations {path}: use a .safetensors or .npz file")
    if path.exists():
        raise OpbenchError(f"--save-activations {path}: already exists")
    if not path.parent.is_dir():
        raise OpbenchError(f"--save-activations {path}: directory {path.parent} does not exist")


def run_model(
    spec: str,
    inputs: Path | str,
    ports: list[str] | None = None,
    activations_files: dict[str, str] | None = None,
    save_path: Path | str | None = None,
    train: bool = False,
    keras=None,
    dask: str | None = None,
    progress=None,
    onnx_files: dict[str, tuple[str, str | None]] | None = None,
) -> ModelReport:
    """The report `opbench model` prints. Every input is checked before anything is judged or
    written: bad input is one OpbenchError.

    The ports are evaluated here, or each as one work item on the Dask cluster `dask` names
    (`progress(done, total, port, seconds)` after each); the report is the same either way.
    `onnx_files`: label -> (an ONNX model made elsewhere, its mapping file or None)."""
    import torch

    model = load_model(spec, train)
    given = model_inputs(inputs)
    calls, out = run_reference(model, given, str(inputs))
    _check_save_path(save_path)
    file_ports = [FilePort(label, read_activations(path, calls)) for label, path in (activations_files or {}).items()]
    if keras is not None and dask is not None and not isinstance(keras, str):
        raise OpbenchError("with --dask, give the Keras port as its factory MODULE:FUNCTION, which workers import")
    onnx_files = onnx_files or {}
    for label, (onnx_path, mapping) in onnx_files.items():  # bad files are one line before anything runs
        read_onnx(label, onnx_path)
        if mapping is not None:
            read_mapping(label, mapping)
    brought = [p.name for p in file_ports] + list(onnx_files) + (["keras"] if keras else [])
    names = list(ports or ([] if brought else default_ports(torch.cuda.is_available())))
    clash = sorted(set(brought) & set(names))
    if clash:
        raise OpbenchError(f"the label {clash[0]!r} of a file you gave is also a --port: give it another label")
    if len(set(brought)) != len(brought):
        raise OpbenchError("two files you gave (--activations, --onnx) share a label: give each its own")
    for name in names:
        spec_for(name)
    jobs = [PortJob(name) for name in dict.fromkeys(names)] + [PortJob(p.name, file=p) for p in file_ports]
    jobs += [PortJob(label, onnx=files) for label, files in onnx_files.items()]
    jobs += [PortJob("keras", keras=keras)] if keras else []
    interrupted, not_run = None, []
    if dask is None:
        reports, absent = _ports_here(jobs, model, given, calls)
    else:
        reports, absent, interrupted = _ports_on_cluster(jobs, dask, spec, train, model, given, progress)
        finished = {r["port"] for r in reports} | {a["port"] for a in absent}
        not_run = [job.name for job in jobs if job.name not in finished]
    not_saved = None
    if save_path is not None:
        try:
            save_activations(save_path, activations(calls, out))
        except OpbenchError as exc:  # never overwritten, and the report is kept
            why = "a file appeared there during the run; not overwritten" if Path(save_path).exists() else str(exc)
            not_saved = f"--save-activations {save_path}: {why}"
    shapes = {k: list(v.shape) for k, v in given.items()}
    mode = "train (as asked)" if train else "eval (the default; --train keeps train mode)"
    counts = {k: int(np.count_nonzero(~np.isfinite(v.astype(np.float64)))) for k, v in given.items() if is_floating(v)}
    nonfinite = (
        {"inputs": {k: n for k, n in counts.items() if n}, "output": int((~torch.isfinite(out)).sum())}
        if any(counts.values())
        else {}
    )
    return ModelReport(spec, mode, shapes, reports, absent, interrupted, not_run, not_saved, nonfinite)


@dataclass(frozen=True)
class PortJob:
    """One port to evaluate, built where it runs: a port of the table by name, an activations
    file's arrays, or a Keras port (its factory MODULE:FUNCTION, or the (model, mapping) it returned)."""

    name: str
    file: FilePort | None = None
    keras: object = None
    onnx: tuple[str, str | None] | None = None  # --onnx: the file and its mapping file

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
            return OnnxFilePort(self.name, path, read_mapping(self.name, mapping) if mapping else {}, model, inputs)
        return build_port(self.name, model, inputs)

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


def _ports_here(jobs: list[PortJob], model, given: dict, calls) -> tuple[list[PortResult], list[dict]]:
    """Every port in this process: (port results, absent ports), under the thread limits a Dask
    worker's `port_task` holds (torch's count, and the BLAS libraries held to it too), so that a
    port gives the same bits here and on a cluster whatever limits this process had before."""
    import torch

    built, absent = [], []
    with thread_limits([get_backend("torch")], torch.get_num_threads()):
        for job in jobs:
            port = job.build_or_why(model, given, calls)
            (absent.append({"port": job.name, "reason": port}) if isinstance(port, str) else built.append(port))
        results, failed = evaluate_ports(built, model, given, calls)
        return results, absent + failed


def _ports_on_cluster(
    jobs: list[PortJob], dask: str, spec: str, train: bool, model, given: dict, progress
) -> tuple[list[PortResult], list[dict], str | None]:
    """Each port as one work item on a Dask cluster, collected in the order of `jobs`, and why the
    sweep stopped early (Ctrl-C, a lost scheduler) or None: then the ports finished so far.

    Workers build the model from its factory and take this process's weights (bitwise the same
    model, even from a factory that draws unseeded weights), and run on this process's torch
    thread count, so each port's numbers are the ones this process would get."""
    import torch

    reports, absent, start, stopped = [], [], time.perf_counter(), None
    with work_pool(dask, preload=["torch", *(name for job in jobs for name in job.backends)]) as pool:
        state, shared = pool.share(model.state_dict()), pool.share(given)
        futures = [pool.submit(port_task, spec, train, state, shared, job, torch.get_num_threads()) for job in jobs]
        try:
            for i, (job, future) in enumerate(zip(jobs, futures, strict=True)):
                report, reason = future.result()
                (absent.append({"port": job.name, "reason": reason}) if report is None else reports.append(report))
                if progress:
                    progress(i + 1, len(jobs), job.name, time.perf_counter() - start)
        except (KeyboardInterrupt, ClusterLost) as stop:
            stopped = str(stop) if isinstance(stop, ClusterLost) else "interrupted"
        finally:
            for future in futures:
                future.cancel()
    return reports, absent, stopped


def port_task(
    spec: str, train: bool, state: dict, given: dict[str, np.ndarray], job: PortJob, threads: int
) -> tuple[PortResult | None, str | None]:
    """One port of `opbench model --dask` on a worker: (its result, None), or (None, why it is absent)."""
    with thread_limits([get_backend("torch")], threads, for_life=True):
        try:
            model = load_model(spec, train)
        except OpbenchError as exc:
            raise OpbenchError(f"on {worker_name()}: {exc}") from None
        model.load_state_dict(state)
        calls, _ = run_reference(model, given, "the inputs")
        port = job.build_or_why(model, given, calls)
        if isinstance(port, str):
            return None, port
        results, failed = evaluate_ports([port], model, given, calls)
        return (results[0], None) if results else (None, failed[0]["reason"])


def evaluate_ports(ports: list[Port], model, given: dict, calls) -> tuple[list[PortResult], list[dict]]:
    """Each port's result: every unit's isolated output and the end-to-end run, then the units
    judged, those fed the same inputs once for all their ports; and the ports whose end-to-end
    run failed, absent with its one line."""
    reference64_calls, out64 = run_in(model, given, FLOAT64)
    reference64 = activations(reference64_calls, out64)
    own: dict[str, dict[str, np.ndarray]] = {}  # PyTorch's own activations at each port dtype
    collected = []  # (port, its units, its end-to-end run, seconds)
    groups: dict[tuple, tuple] = {}  # units fed the same inputs: judged once for all their ports
    failed: list[dict] = []
    for port in ports:
        started = time.perf_counter()
        units = port.units(calls)
        for unit in units:
            if unit.reason:
                continue
            feed = port.inputs_for(unit)
            if isinstance(feed, str):
                unit.reason = feed
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
                continue
            group = (tuple(unit.covers), port.fmt, port.products, feed.source)
            groups.setdefault(group, (unit, feed.tensors, {}))[2][port.name] = output
        try:
            run = port.end_to_end(given, units)
        except Exception as exc:
            why = str(exc) if isinstance(exc, OpbenchError) else f"{first_line(exc, typed=True)}"
            failed.append({"port": port.name, "reason": f"the end-to-end run failed: {why}"})
            for outputs in (by_port for _, _, by_port in groups.values()):
                outputs.pop(port.name, None)
            continue
        if port.fmt.name not in own:
            own[port.fmt.name] = activations(*run_in(model, given, port.fmt))
        collected.append((port, units, run, time.perf_counter() - started))
    verdicts: dict[tuple[str, str], UnitJudgement] = {}
    modules = dict(model.named_modules())  # the model around a flagged unit, for the causes that read it
    with get_backend("torch").thread_limit(JUDGE_THREADS):
        for (covers, fmt, products, _), (unit, tensors, by_port) in groups.items():
            if not by_port:
                continue
            for label, result in judge_unit(unit, tensors, fmt, by_port, products).items():
                if result.judgement.verdict != WITHIN:  # why: the known port bugs, tried on flagged units only
                    around = Context(modules, calls, unit.calls[0])
                    cause = explain(unit, tensors, fmt, label, by_port[label], products, around)
                    result = replace(result, cause=cause)
                verdicts[(label, covers[0])] = result
    results = []
    for port, units, run, seconds in collected:
        judged = {u.key: verdicts[(port.name, u.key)] for u in units if (port.name, u.key) in verdicts}
        port_row = port_result(port, calls, reference64, own[port.fmt.name], judged, units, run, seconds)
        with get_backend("torch").thread_limit(JUDGE_THREADS):
            port_row["inputs"] = input_rows(port, calls, given)  # a port's own preprocessing, where it shows it
        results.append(port_row)
    return results, failed
