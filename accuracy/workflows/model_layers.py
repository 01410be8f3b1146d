"""`opbench model`: which layer of a port stops being rounding, and by how much.

Every port's unit (a leaf layer, or the leaves one fused port node covers) gets the reference
model's own activations as inputs, rounded to the port's dtype, and its output is judged against
the exact value of that unit on those inputs, with the judge of `opbench check`:
- a registry op (nn.Linear, an eval-mode BatchNorm or a LayerNorm with the registry's eps) by the
  op's bounds and tiers (`check_op`);
- anything else by the typical tier of `check --fn` (`check_function`): the unit evaluated in
  float64 with its parameters rounded to the port's dtype, and Monte Carlo runs of its torch ops.
That is the error a unit *introduces*. The whole port also runs end to end on the model input;
per layer, its normwise relative difference from the float64 reference model is the error it
*propagates*, and that of its input the error it *inherits*.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np

from accuracy.backends import get_backend
from accuracy.catalog.ops.common import LAYER_NORM_EPS
from accuracy.catalog.ops.norms import BN_EPS
from accuracy.catalog.registry import get_op
from accuracy.core.dtypes import FloatFormat
from accuracy.core.errors import OpbenchError
from accuracy.core.formatting import format_table
from accuracy.core.json_output import json_ready
from accuracy.judge.verdicts import UNDETERMINED, WITHIN
from accuracy.workflows.check import _first_line, _worst_text, check_function, check_op
from accuracy.workflows.cluster import ClusterLost, thread_limits, work_pool, worker_name
from accuracy.workflows.model_activations import (
    OUTPUT_KEY,
    LayerCall,
    activations,
    composed,
    converted,
    load_model,
    model_inputs,
    read_activations,
    record,
    run_reference,
    save_activations,
    to_numpy,
)
from accuracy.workflows.model_ports import (
    DEFAULT_PORTS,
    GPU_PORTS,
    FilePort,
    Port,
    Unit,
    build_port,
    check_port_name,
    keras_port,
    port_backends,
    port_inputs,
)

NOT_COMPARED = "not compared"
# The float64 references and Monte Carlo runs run on one thread: bitwise the same on any machine,
# and many small float64 kernels run far faster alone than fighting over shared cores.
JUDGE_THREADS = 1
TYPICAL_TIER = "typical tier of check --fn"


# --- the exact side of one unit --------------------------------------------------------------


def _torch_dtype(fmt: FloatFormat):
    import torch

    return getattr(torch, fmt.name)


def _param(tensor, fmt: FloatFormat) -> np.ndarray:
    return to_numpy(tensor.detach().to(_torch_dtype(fmt)))


def registry_case(unit: Unit, inputs: list[np.ndarray], fmt: FloatFormat) -> tuple[str, dict, tuple] | None:
    """(registry op, its named inputs, the shape the op's result has) where the unit is one."""
    import torch

    if len(unit.calls) != 1 or len(inputs) != 1:
        return None
    m, x = unit.calls[0].module, inputs[0]
    if isinstance(m, torch.nn.Linear) and m.bias is not None:
        named = {"x": x.reshape(-1, m.in_features), "W": _param(m.weight, fmt), "b": _param(m.bias, fmt)}
        return "linear", named, (named["x"].shape[0], m.out_features)
    norms = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)
    if isinstance(m, norms) and not m.training and m.affine and m.running_var is not None and m.eps == BN_EPS:
        shape = (x.shape[0], x.shape[1], -1)
        named = {
            "x": x.reshape(shape),
            "mean": _param(m.running_mean, fmt),
            "var": _param(m.running_var, fmt),
            "w": _param(m.weight, fmt),
            "b": _param(m.bias, fmt),
        }
        return "batch_norm", named, named["x"].shape
    if (
        isinstance(m, torch.nn.LayerNorm)
        and m.eps == LAYER_NORM_EPS
        and len(m.normalized_shape) == 1
        and m.weight is not None
        and m.bias is not None
    ):
        named = {"x": x.reshape(-1, m.normalized_shape[0]), "w": _param(m.weight, fmt), "b": _param(m.bias, fmt)}
        return "layer_norm", named, named["x"].shape
    return None


def unit_function(unit: Unit, fmt: FloatFormat, inputs: list):
    """The unit as a torch function of its floating inputs (in0, in1, ...), for check --fn: in
    the dtype it is called with, its parameters rounded to `fmt` (the port's own parameters)."""
    import torch

    cache: dict = {}

    def modules(dtype):
        if dtype not in cache:
            stored = [converted(c.module, _torch_dtype(fmt)) for c in unit.calls]
            cache[dtype] = [m if dtype == _torch_dtype(fmt) else converted(m, dtype) for m in stored]
        return cache[dtype]

    fixed = [None if t.is_floating_point() else t for t in inputs]

    def layer(**named):
        if any(not isinstance(v, torch.Tensor) for v in named.values()):
            raise TypeError("a layer takes torch tensors")
        floats = iter(named[f"in{i}"] for i in range(len(named)))
        args = [next(floats) if slot is None else slot for slot in fixed]
        dtype = next(a.dtype for a in args if a.is_floating_point())
        return composed(modules(dtype))(*args)

    layer.__qualname__ = unit.key
    return layer


def _relative(value, reference) -> float:
    """Normwise relative difference ||value - reference|| / ||reference|| (float64)."""
    v, r = np.asarray(value, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if v.shape != r.shape:
        return float("nan")
    diff, norm = float(np.linalg.norm((v - r).ravel())), float(np.linalg.norm(r.ravel()))
    if diff == 0:
        return 0.0
    return diff / norm if norm else float("inf")


def judge_unit(
    unit: Unit, inputs: list, fmt: FloatFormat, outputs: dict[str, np.ndarray], products: FloatFormat | None = None
) -> dict[str, dict]:
    """Each port's output of `unit` on `inputs` (torch tensors already in `fmt`) judged: label -> row.
    `products`: the format the ports' matmuls and convolutions round their inputs to (TF32)."""
    arrays = [to_numpy(t) for t in inputs]
    floats = [a for a, t in zip(arrays, inputs, strict=True) if t.is_floating_point()]
    case = registry_case(unit, floats, fmt) if len(floats) == len(arrays) else None
    if case is not None:
        op, named, shape = case
        compute = products if op == "linear" else None  # the one registry op here that is a matmul
        report = check_op(get_op(op), named, {k: v.reshape(shape) for k, v in outputs.items()}, compute=compute)
        tier = f"registry op {op}"
    elif floats:
        fn = unit_function(unit, fmt, inputs)
        report = check_function(fn, {f"in{i}": a for i, a in enumerate(floats)}, outputs, products)
        tier = TYPICAL_TIER
    else:
        return {k: _lookup_row(unit, inputs, fmt, v) for k, v in outputs.items()}
    reference = _float64_reference(unit, inputs, fmt)
    rows = {}
    for row in report.outputs:
        if row["label"] in outputs:
            rows[row["label"]] = row | {"tier": tier, "introduced": _relative(outputs[row["label"]], reference)}
    return rows


def _float64_reference(unit: Unit, inputs: list, fmt: FloatFormat) -> np.ndarray:
    """The unit in float64 with its parameters rounded to `fmt`, on `inputs`."""
    import torch

    modules = [converted(converted(c.module, _torch_dtype(fmt)), torch.float64) for c in unit.calls]
    with torch.no_grad():
        return to_numpy(composed(modules)(*[t.to(torch.float64) if t.is_floating_point() else t for t in inputs]))


def _lookup_row(unit: Unit, inputs: list, fmt: FloatFormat, output: np.ndarray) -> dict:
    """A unit with integer inputs only (an embedding lookup) has nothing to round: equal or not."""
    reference = _float64_reference(unit, inputs, fmt)
    equal = np.array_equal(np.asarray(output, dtype=np.float64), reference)
    return {
        "verdict": WITHIN if equal else UNDETERMINED,
        "reason": "integer inputs only: equals its float64 evaluation"
        if equal
        else "integer inputs only: differs from its float64 evaluation, and no typical tier models it",
        "tier": "exact (integer inputs)",
        "max_ulp": None,
        "typical_ratio": None,
        "bound_ratio": None,
        "worst": {},
        "introduced": _relative(output, reference),
    }


# --- the report ---------------------------------------------------------------------------------


@dataclass
class ModelReport:
    model: str
    mode: str
    inputs: dict[str, list[int]]
    ports: list[dict]
    absent: list[dict] = field(default_factory=list)
    # a sweep stopped early (Ctrl-C, a lost Dask scheduler): why, and the ports it never finished
    interrupted: str | None = None
    not_run: list[str] = field(default_factory=list)

    @property
    def within_rounding(self) -> bool:
        """Exit 0 only if every port compared some layer and every compared layer is within rounding."""
        return all(
            p["compared"] > 0 and all(r["verdict"] in (WITHIN, NOT_COMPARED) for r in p["layers"]) for p in self.ports
        )

    def as_dict(self) -> dict:
        return json_ready(
            {
                "model": self.model,
                "mode": self.mode,
                "inputs": self.inputs,
                "ports": self.ports,
                "absent_ports": self.absent,
                "interrupted": self.interrupted,
                "ports_not_run": self.not_run,
            }
        )

    def answers(self) -> list[str]:
        lines = []
        if self.interrupted:
            lines.append(f"partial: {self.interrupted}; not run: {', '.join(self.not_run)}")
        for p in self.ports:
            counts = f"{p['compared']} units compared, {p['not_compared']} not compared"
            if p["first_not_within"] is None:
                head = f"every compared layer within rounding ({counts})"
            else:
                first = next(r for r in p["layers"] if r["path"] == p["first_not_within"])
                head = (
                    f"first not within rounding: {first['path']} ({first['op']}): {first['verdict']}: "
                    f"{first['reason']}; worst element {_worst_text(first['worst'])} ({p['flagged']} flagged, {counts})"
                )
            out = p["output"]
            lines.append(
                f"{p['port']} [{p['dtype']}]: {head}; end to end, output differs from the float64 model by "
                f"{_num(out['relative_error'])} (PyTorch {p['dtype']} on the same input: "
                f"{_num(out['reference_relative_error'])})"
            )
        return lines

    def render(self) -> str:
        shapes = ", ".join(f"{k} {tuple(v)}" for k, v in self.inputs.items())
        lines = [f"{self.model} in {self.mode} mode on {shapes}", ""]
        lines += self.answers()
        lines += [f"{a['port']}: absent ({a['reason']})" for a in self.absent]
        for p in self.ports:
            lines += ["", f"{p['port']} [{p['dtype']}]: {p['description']}; layer by layer on identical inputs:"]
            lines += format_table(
                ["layer", "op", "verdict", "max ulp", "typical ratio", "introduced", "inherited", "propagated"],
                [
                    [
                        " + ".join(r["covers"]),
                        r["op"],
                        r["verdict"],
                        _num(r.get("max_ulp")),
                        _num(r.get("typical_ratio")),
                        _num(r.get("introduced")),
                        _num(r.get("inherited")),
                        _num(r.get("propagated")),
                    ]
                    for r in p["layers"]
                ],
            )
            reasons = [f"  {r['path']}: {r['reason']}" for r in p["layers"] if r["verdict"] != WITHIN]
            if reasons:
                lines += ["why:", *reasons]
        lines += [
            "",
            "introduced: the unit's normwise relative error on the reference's own inputs; inherited / propagated: "
            "the port's end-to-end difference from the float64 model at the unit's input / output",
        ]
        return "\n".join(lines)


def _num(v) -> str:
    return "-" if v is None or v != v else f"{v:.3g}"


# --- the run ------------------------------------------------------------------------------------


def _labelled_files(pairs: dict[str, str], calls: list[LayerCall]) -> list[FilePort]:
    return [FilePort(label, read_activations(path, calls)) for label, path in pairs.items()]


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


def _port_report(port: Port, calls, reference64: dict, inputs64_out, judged: dict, units, e2e, seconds) -> dict:
    outputs, received, output = e2e
    by_key = {c.key: c for c in calls}
    layers = []
    for unit in units:
        kinds = " + ".join(dict.fromkeys(c.kind for c in unit.calls))
        row = {"path": unit.key, "covers": unit.covers, "op": kinds}
        if unit.last in outputs:
            row["propagated"] = _relative(outputs[unit.last], reference64[unit.last])
        inherited = _inherited(unit, by_key, received, outputs, reference64)
        if inherited is not None:
            row["inherited"] = inherited
        if unit.reason or unit.key not in judged:
            reason = unit.reason or "no port output for it on identical inputs"
            if "propagated" in row:
                reason += "; its propagated difference is shown"
            layers.append(row | {"verdict": NOT_COMPARED, "reason": reason})
            continue
        result = judged[unit.key]
        if result.get("tier", "").startswith("registry op"):
            row["op"] = f"{kinds} ({result['tier'].removeprefix('registry op ')})"
        layers.append(row | {k: v for k, v in result.items() if k != "label"})
    compared = [r for r in layers if r["verdict"] != NOT_COMPARED]
    flagged = [r for r in compared if r["verdict"] != WITHIN]
    reference_out = reference64[OUTPUT_KEY]
    return {
        "port": port.name,
        "description": port.description,
        "dtype": port.fmt.name,
        "first_not_within": flagged[0]["path"] if flagged else None,
        "compared": len(compared),
        "flagged": len(flagged),
        "not_compared": len(layers) - len(compared),
        "worst_introduced": max((r.get("introduced") or 0.0 for r in compared), default=None),
        "layers": layers,
        "output": {
            "relative_error": _relative(output, reference_out),
            "max_abs_error": float(np.max(np.abs(np.asarray(output, np.float64) - reference_out)))
            if np.shape(output) == np.shape(reference_out)
            else None,
            "reference_relative_error": _relative(inputs64_out.get(port.fmt.name), reference_out),
        },
        "seconds": seconds,
    }


def _inherited(unit: Unit, by_key, received, outputs, reference64) -> float | None:
    """The port's end-to-end difference at the unit's inputs, where the port's run shows them."""
    call = unit.calls[0]
    errors = []
    if received.get(call.key):
        for i, value in enumerate(received[call.key]):
            ref = reference64.get(f"{call.key}/in{i}")
            if ref is not None and _floating(value):
                errors.append(_relative(value, ref))
    else:
        for producer in call.producers:
            if producer is None or producer not in outputs:
                return None
            errors.append(_relative(outputs[producer], reference64[producer]))
    return max(errors) if errors else None


def _floating(array) -> bool:
    return np.asarray(array).dtype.kind == "f" or np.asarray(array).dtype == ml_dtypes.bfloat16


def _reference_in(fmt: FloatFormat, model, inputs: dict, cache: dict) -> np.ndarray:
    """PyTorch's own output at `fmt` on the same input: the yardstick for a port's end-to-end error."""
    if fmt.name not in cache:
        import torch

        dtype = _torch_dtype(fmt)
        feeds = {k: (v.astype(np.float64) if np.issubdtype(v.dtype, np.floating) else v) for k, v in inputs.items()}
        typed = {
            k: (torch.as_tensor(v).to(dtype) if torch.as_tensor(v).is_floating_point() else torch.as_tensor(v))
            for k, v in feeds.items()
        }
        _, out = record(converted(model, dtype), typed)
        cache[fmt.name] = to_numpy(out)
    return cache[fmt.name]


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
) -> ModelReport:
    """The report `opbench model` prints. Every input is checked before anything is judged or
    written: bad input is one OpbenchError.

    The ports are evaluated here, or each as one work item on the Dask cluster `dask` names
    (`progress(done, total, port, seconds)` after each); the report is the same either way."""
    import torch

    model = load_model(spec, train)
    given = model_inputs(inputs)
    calls, out = run_reference(model, given, str(inputs))
    _check_save_path(save_path)
    file_ports = _labelled_files(activations_files or {}, calls)
    if keras is not None and dask is not None and not isinstance(keras, str):
        raise OpbenchError("with --dask, give the Keras port as its factory MODULE:FUNCTION, which workers import")
    brought = [p.name for p in file_ports] + (["keras"] if keras else [])
    names = list(ports or ([] if brought else [*DEFAULT_PORTS, *(GPU_PORTS if torch.cuda.is_available() else ())]))
    clash = sorted(set(brought) & set(names))
    if clash:
        raise OpbenchError(f"--activations label {clash[0]!r} is also a --port: give it another label")
    for name in names:
        check_port_name(name)
    jobs = [PortJob(name) for name in dict.fromkeys(names)] + [PortJob(p.name, file=p) for p in file_ports]
    jobs += [PortJob("keras", keras=keras)] if keras else []
    interrupted, not_run = None, []
    if dask is None:
        reports, absent = _ports_here(jobs, model, given, calls)
    else:
        reports, absent, interrupted = _ports_on_cluster(jobs, dask, spec, train, model, given, progress)
        finished = {r["port"] for r in reports} | {a["port"] for a in absent}
        not_run = [job.name for job in jobs if job.name not in finished]
    if save_path is not None:
        save_activations(save_path, activations(calls, out))
    shapes = {k: list(v.shape) for k, v in given.items()}
    mode = "train (as asked)" if train else "eval (the default; --train keeps train mode)"
    return ModelReport(spec, mode, shapes, reports, absent, interrupted, not_run)


@dataclass(frozen=True)
class PortJob:
    """One port to evaluate, built where it runs: a built-in port by name, an activations file's
    arrays, or a Keras port (its factory MODULE:FUNCTION, or the (model, mapping) it returned)."""

    name: str
    file: FilePort | None = None
    keras: object = None

    @property
    def backends(self) -> tuple[str, ...]:
        """What the port runs on besides torch: a file's arrays need nothing more."""
        if self.file is not None:
            return ()
        return ("tensorflow",) if self.keras is not None else port_backends(self.name)

    def build(self, model, inputs: dict[str, np.ndarray], calls: list[LayerCall]) -> Port | str:
        if self.file is not None:
            return self.file
        if self.keras is not None:
            return keras_port(self.keras, calls)
        return build_port(self.name, model, inputs)


def _ports_here(jobs: list[PortJob], model, given: dict, calls) -> tuple[list[dict], list[dict]]:
    """Every port in this process: (port reports, absent ports), under the thread limits a Dask
    worker's `port_task` holds (torch's count, and the BLAS libraries held to it too), so that a
    port gives the same bits here and on a cluster whatever limits this process had before."""
    import torch

    built, absent = [], []
    with thread_limits([get_backend("torch")], torch.get_num_threads()):
        for job in jobs:
            port = job.build(model, given, calls)
            (absent.append({"port": job.name, "reason": port}) if isinstance(port, str) else built.append(port))
        return _evaluate_ports(built, model, given, calls), absent


def _ports_on_cluster(
    jobs: list[PortJob], dask: str, spec: str, train: bool, model, given: dict, progress
) -> tuple[list[dict], list[dict], str | None]:
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
) -> tuple[dict | None, str | None]:
    """One port of `opbench model --dask` on a worker: (its report, None), or (None, why it is absent)."""
    with thread_limits([get_backend("torch")], threads, for_life=True):
        try:
            model = load_model(spec, train)
        except OpbenchError as exc:
            raise OpbenchError(f"on {worker_name()}: {exc}") from None
        model.load_state_dict(state)
        calls, _ = run_reference(model, given, "the inputs")
        port = job.build(model, given, calls)
        if isinstance(port, str):
            return None, port
        (report,) = _evaluate_ports([port], model, given, calls)
        return report, None


def _evaluate_ports(ports: list[Port], model, given: dict, calls) -> list[dict]:
    """Each port's report: every unit's isolated output and the end-to-end run, then the units
    judged, those fed the same inputs once for all their ports (a row depends on its port only)."""
    import torch

    reference64_calls, out64 = record(
        converted(model, torch.float64),
        {k: (v.astype(np.float64) if np.issubdtype(v.dtype, np.floating) else v) for k, v in given.items()},
    )
    reference64 = activations(reference64_calls, out64)
    own: dict = {}
    collected = []  # (port, its units, its end-to-end run, seconds)
    groups: dict[tuple, tuple] = {}  # units fed the same inputs: judged once for all their ports
    for port in ports:
        started = time.perf_counter()
        units = port.units(calls)
        for unit in units:
            if unit.reason:
                continue
            if isinstance(port, FilePort):
                given_in = port.given_inputs(unit)
                if given_in is None:
                    unit.reason = "the activations file has no inputs for it"
                    continue
                tensors = [_tensor(a) for a in given_in]
                group = (tuple(unit.covers), port.fmt, port.products, port.name)
            else:
                tensors = port_inputs(unit.calls[0].inputs, port.fmt)
                group = (tuple(unit.covers), port.fmt, port.products, "reference")
            try:
                output = port.isolated(unit, unit.calls[0].inputs)
            except OpbenchError:
                raise
            except Exception as exc:  # a port that fails on one layer: that layer is not compared, visibly
                unit.reason = f"the port failed on it: {type(exc).__name__}: {_first_line(exc)}"
                continue
            groups.setdefault(group, (unit, tensors, {}))[2][port.name] = output
        try:
            e2e = port.end_to_end(given, units)
        except OpbenchError:
            raise
        except Exception as exc:
            raise OpbenchError(
                f"{port.name}: the end-to-end run failed: {type(exc).__name__}: {_first_line(exc)}"
            ) from None
        _reference_in(port.fmt, model, given, own)
        collected.append((port, units, e2e, time.perf_counter() - started))
    verdicts: dict[tuple, dict] = {}
    with get_backend("torch").thread_limit(JUDGE_THREADS):
        for (covers, fmt, products, _), (unit, tensors, by_port) in groups.items():
            for label, row in judge_unit(unit, tensors, fmt, by_port, products).items():
                verdicts[(label, covers[0])] = row
    reports = []
    for port, units, e2e, seconds in collected:
        judged = {u.key: verdicts[(port.name, u.key)] for u in units if (port.name, u.key) in verdicts}
        reports.append(_port_report(port, calls, reference64, own, judged, units, e2e, seconds))
    return reports


def _tensor(array: np.ndarray):
    from accuracy.backends import get_backend

    return get_backend("torch").to_native(array)
