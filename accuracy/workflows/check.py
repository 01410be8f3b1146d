"""Bring your own case: judge outputs computed anywhere, on inputs the user holds.

Someone has ported a layer to TensorFlow, LibTorch, Java or their own kernel and holds outputs
that differ from PyTorch's. `check` answers "rounding or bug?" for those very arrays:

- for a registry op, each output against the op's exact reference and bounds on these inputs,
  with the same verdicts `opbench explain` gives (accuracy.judge.verdicts). An output from an unknown
  implementation is held to the op's generic contract: the loosest ulp contract any of the op's
  implementations publishes for the dtype (IEEE 754's correctly rounded sqrt, numpy's tables),
  else the worst-case bound and typical tier of a computation in the output's own precision;
- for a user's function, which has no worst-case bound, against the function evaluated in
  float64 on the same inputs, by the typical tier (see `_function_model`).

Every problem with the files or arrays is found before anything is judged and is one
OpbenchError naming the file, so a bad input writes nothing and prints one line.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from accuracy.backends import get_backend
from accuracy.catalog.registry import OpInfo, get_op
from accuracy.core.dtypes import FORMATS, FloatFormat, format_of
from accuracy.core.errors import OpbenchError, first_line
from accuracy.core.formatting import format_number, printable
from accuracy.core.json_output import json_ready
from accuracy.judge import contracts
from accuracy.judge.error_metrics import rounding_error, ulp_error
from accuracy.judge.precision import compute_format
from accuracy.judge.typical import (
    RANDOM_RUNS,
    RUN_STAGES,
    SEED,
    TYPICAL_Z,
    TypicalModel,
    model_from_rms,
    model_from_runs,
    typical_model,
)
from accuracy.judge.verdicts import WITHIN, Evidence, FunctionSubject, Judgement
from accuracy.reference.exact import Exact
from accuracy.workflows.array_files import as_array, read_array, read_arrays
from accuracy.workflows.explain import pairwise

CHECK_COLUMNS = ("max_ulp", "typical_ratio", "bound_ratio")  # from the metric table, as explain's
OWN_RESULT = "{}@{}"  # the label of a user function's own result: name@dtype
FLOAT64 = FORMATS["float64"]


@dataclass(frozen=True)
class CheckReport:
    """What `opbench check` prints: one row per output, then the pairs between them."""

    op: str
    dtype: str
    inputs: dict[str, list[int]]
    outputs: list[dict]
    pairs: list[dict]

    @property
    def within_rounding(self) -> bool:
        return all(o["verdict"] == WITHIN for o in self.outputs)

    def as_dict(self) -> dict:
        """Strict JSON: a ratio that does not apply (NaN) or an infinite error is null, with its reason."""
        return json_ready(
            {"op": self.op, "dtype": self.dtype, "inputs": self.inputs, "outputs": self.outputs, "pairs": self.pairs}
        )

    def explanation(self) -> str:
        """Every output that is not within rounding, with its reason and worst element."""
        return "\n".join(
            f"{printable(o['label'])}: {o['verdict']}: {cause_text(o.get('cause'))}{o['reason']}; "
            f"worst element {worst_text(o['worst'])}"
            for o in self.outputs
            if o["verdict"] != WITHIN
        )


def worst_text(worst: dict) -> str:
    """The element that decided, as the answer lines print it."""
    if not worst:
        return "-"
    return (
        f"[{', '.join(map(str, worst['index']))}] {worst['result']:.9g} vs exact {worst['exact']:.9g} "
        f"({format_number(worst['error_ulp'])} ulp)"
    )


def cause_text(cause: dict | None) -> str:
    """The answer's cause: what explains the unit, or the nearest known cause and how far it remains."""
    if not cause:
        return ""
    if cause["words"] is None:
        return "no known cause explains it (none in the catalogue applies to it); "
    if cause["explains"]:
        also = f" (also: {'; '.join(a['words'] for a in cause['alternatives'])})" if cause["alternatives"] else ""
        return f"explained by {cause['words']}{also}; "
    ratio = "-" if cause["ratio"] is None or cause["ratio"] != cause["ratio"] else f"{cause['ratio']:.3g}"
    # the nearest entry is no cause: it is named as what was tried, never worded as what happened
    return (
        f"no known cause explains it: nothing in the catalogue does (the nearest entry tried, {cause['name']}, "
        f"leaves it at {ratio}x its tier's limit); "
    )


def judged_row(label: str, output: np.ndarray, exact: Exact, judgement: Judgement) -> dict:
    """One output's row of a report: its verdict and the numbers behind it."""
    ulps = ulp_error(output, exact)
    finite = ulps[np.isfinite(ulps)]
    return {
        "label": label,
        "verdict": judgement.verdict,
        "reason": judgement.reason,
        "compute": judgement.compute,
        "contract": judgement.contract,
        "max_ulp": float(finite.max()) if finite.size else 0.0,
        "typical_ratio": judgement.typical_ratio,
        "bound_ratio": judgement.bound_ratio,
        "threshold_ulp": judgement.threshold_ulp,
        "lapack_ratio": judgement.lapack_ratio,
        "worst": judgement.worst,
    }


# --- reading and validating what the user brings -------------------------------------------


def _named_arrays(inputs, source: str) -> dict[str, np.ndarray]:
    if isinstance(inputs, (str, Path)):
        return read_arrays(inputs)
    return {str(k): as_array(v, f"{source} {k!r}") for k, v in dict(inputs).items()}


def _outputs(outputs) -> dict[str, tuple[np.ndarray, str]]:
    """label -> (array, where it came from)."""
    found = {}
    for label, value in dict(outputs or {}).items():
        if isinstance(value, (str, Path)):
            found[str(label)] = (read_array(value), str(value))
        else:
            found[str(label)] = (as_array(value, f"output {label!r}"), f"output {label!r}")
    return found


def _format_of(array: np.ndarray, where: str) -> FloatFormat:
    try:
        return format_of(array)
    except OpbenchError:
        raise OpbenchError(f"{where}: unsupported dtype {array.dtype}; opbench judges {', '.join(FORMATS)}") from None


def _decide_format(inputs: dict, outputs: dict, source: str) -> FloatFormat:
    """The outputs' dtype (the inputs' where there are none): it decides the format judged."""
    for name, a in inputs.items():
        _format_of(a, f"{source}: input {name!r}")
    empty = [f"input {n!r}" for n, a in inputs.items() if a.size == 0] + [w for a, w in outputs.values() if a.size == 0]
    if empty:  # no element to judge: a verdict on nothing would read as a pass
        raise OpbenchError(f"{source}: no elements in {', '.join(empty)}; nothing to judge")
    formats = {_format_of(a, where).name: where for a, where in outputs.values()}
    if len(formats) > 1:
        raise OpbenchError(
            f"{', '.join(formats.values())}: outputs in several dtypes ({', '.join(formats)}); "
            "check each dtype on its own"
        )
    if formats:
        return FORMATS[next(iter(formats))]
    named = {format_of(a).name for a in inputs.values()}
    if len(named) != 1:
        raise OpbenchError(
            f"{source}: inputs in several dtypes ({', '.join(sorted(named))}); give an output "
            "to say which format to judge"
        )
    return FORMATS[named.pop()]


def _rounded_inputs(inputs: dict, fmt: FloatFormat, source: str) -> dict[str, np.ndarray]:
    """The inputs in `fmt`: each value must already be a number of that format, or the
    reference would be computed on other inputs than the outputs were."""
    rounded = {}
    for name, a in inputs.items():
        wide = a.astype(np.float64)
        r = fmt.round(wide)
        same = (r.astype(np.float64) == wide) | (np.isnan(wide))
        if not np.all(same):
            raise OpbenchError(
                f"{source}: input {name!r} holds {a.dtype} values that are not {fmt.name} numbers; "
                f"round the inputs to {fmt.name}, the outputs' dtype (opbench inputs --dtype "
                f"{fmt.name})"
            )
        rounded[name] = r
    return rounded


def _check_names(op: OpInfo, inputs: dict, source: str) -> None:
    expected = list(op.generate(np.random.default_rng(0), op.test_size))
    missing = [n for n in expected if n not in inputs]
    extra = [n for n in inputs if n not in expected]
    if missing or extra:
        problems = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unexpected {', '.join(extra)}"] if extra else []
        )
        raise OpbenchError(f"{source}: {'; '.join(problems)}: {op.name} takes inputs {', '.join(expected)}")


def _shapes(inputs: dict) -> str:
    return ", ".join(f"{k} {a.shape}" for k, a in inputs.items())


def _check_shapes(outputs: dict, shape: tuple, what: str) -> None:
    for array, where in outputs.values():
        if array.shape != shape:
            raise OpbenchError(f"{where}: output has shape {array.shape}, but {what} gives {shape}")


# --- registry ops --------------------------------------------------------------------------


def generic_contract(op: OpInfo, fmt: FloatFormat) -> contracts.Contract | None:
    """The loosest ulp contract any of the op's implementations publishes for `fmt`: what an
    output of unknown origin may claim (None where no library publishes one)."""
    published = [
        c
        for impl in op.impls
        if fmt.name in impl.dtypes
        if (c := contracts.contract_for(op.name, impl, fmt, compute_format(impl, fmt, op.family)))
    ]
    if not published:
        return None
    loosest = max(published, key=lambda c: c.max_ulp)
    return replace(loosest, source=f"generic contract for any {op.name}: {loosest.source}")


def _op_fp64_shape(op: OpInfo, inputs: dict, source: str) -> tuple:
    """The result shape, from the float64 formula: an input the op cannot take fails here."""
    try:
        with np.errstate(all="ignore"):
            return np.shape(op.fp64(**{k: a.astype(np.float64) for k, a in inputs.items()}))
    except Exception as exc:
        raise OpbenchError(
            f"{source}: {op.name} cannot take inputs of shapes {_shapes(inputs)} "
            f"({first_line(exc) or type(exc).__name__})"
        ) from None


def check_op(
    op: OpInfo | str, inputs, outputs, contract_ulps: int | None = None, compute: FloatFormat | None = None
) -> CheckReport:
    """Judge `outputs` of the registry op on `inputs`; `compute` is the precision they were
    computed in where it is known and not the outputs' own (TF32 for a CUDA port with TF32 on)."""
    op = get_op(op) if isinstance(op, str) else op
    source = str(inputs) if isinstance(inputs, (str, Path)) else "inputs"
    raw = _named_arrays(inputs, source)
    given = _outputs(outputs)
    if not given:
        raise OpbenchError(f"give at least one output to check against {op.name}")
    fmt = _decide_format(raw, given, source)
    _check_names(op, raw, source)
    rounded = _rounded_inputs(raw, fmt, source)
    op.check_min_size(rounded, source)
    _check_shapes(given, _op_fp64_shape(op, rounded, source), f"{op.name} on {source}")
    if contract_ulps is not None and contract_ulps < 0:
        raise OpbenchError(f"--contract must be a number of ulps >= 0, got {contract_ulps}")
    contract = (
        contracts.Contract(contract_ulps, "--contract") if contract_ulps is not None else generic_contract(op, fmt)
    )
    evidence = Evidence(op, rounded, fmt)
    arrays = {label: a for label, (a, _) in given.items()}
    judgements = {label: evidence.judge(a, None, contract, compute) for label, a in arrays.items()}
    rows = [judged_row(label, arrays[label], evidence.exact, j) for label, j in judgements.items()]
    from accuracy.workflows.model.op_causes import with_cause  # the catalogue imports this module

    for row in rows:
        with_cause(row, op.name, rounded, fmt, arrays[row["label"]], compute)
    return CheckReport(
        op.name, fmt.name, {k: list(a.shape) for k, a in rounded.items()}, rows, pairwise(arrays, judgements)
    )


# --- user functions ------------------------------------------------------------------------


def load_function(spec: str, what: str = "--fn") -> Callable:
    """MODULE:FUNCTION, importable from the current directory as `python -m` would; `what`
    names the argument in errors."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise OpbenchError(f"{what} {spec!r}: expected MODULE:FUNCTION, e.g. mylayers:block")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    # the module sees a command line of its own name only: one that parses sys.argv at import
    # (argparse) read opbench's arguments, printed "usage: opbench [-h] [--lr LR]" and exited
    argv, sys.argv = sys.argv, [module_name]
    try:
        module = importlib.import_module(module_name)
    except SystemExit as exc:  # user code must not end opbench silently, with its exit status
        raise OpbenchError(f"{what} {spec!r}: importing {module_name} called sys.exit({exc.code!r})") from None
    except Exception as exc:
        raise OpbenchError(f"{what} {spec!r}: cannot import {module_name}: {exc}") from None
    finally:
        sys.argv = argv
    fn = getattr(module, name, None)
    if not callable(fn):
        raise OpbenchError(f"{what} {spec!r}: {module_name} has no function {name!r}")
    return fn


FUNCTION_BACKENDS = ("numpy", "torch")  # what a user's function is tried with, in this order


def _call(fn: Callable, inputs: dict, fmt: FloatFormat, backend_name: str) -> np.ndarray:
    backend = get_backend(backend_name)
    with np.errstate(all="ignore"):
        return backend.to_numpy(fn(**{k: backend.to_native(a) for k, a in inputs.items()}), fmt)


def _first_run(fn: Callable, name: str, inputs: dict, fmt: FloatFormat) -> tuple[str, np.ndarray]:
    """The function's result at `fmt` and the array kind it computes with: torch tensors where
    it runs torch ops (whether it takes tensors or converts numpy arrays itself), else numpy."""
    failures = []
    for backend_name in FUNCTION_BACKENDS:
        try:
            result = _call(fn, inputs, fmt, backend_name)
        except Exception as exc:
            failures.append(f"with {backend_name} arrays: {first_line(exc, typed=True)}")
            continue
        if backend_name == "numpy" and "torch" in sys.modules and _computes_with_torch(fn, inputs):
            return "torch", _call(fn, inputs, fmt, "torch")
        return backend_name, result
    raise OpbenchError(f"{name} fails on {_shapes(inputs)} in {fmt.name} " + "; ".join(failures))


def _computes_with_torch(fn: Callable, inputs: dict) -> bool:
    """Whether `fn`, handed numpy arrays, computes with torch ops (torch is loaded only where the
    user's module loaded it: a numpy function never pays for it)."""
    from accuracy.judge.torch_emulation import torch_ops_computed

    try:
        return bool(torch_ops_computed(fn, inputs))
    except Exception:
        return False


def _evaluate(fn: Callable, name: str, inputs: dict, fmt: FloatFormat, backend_name: str) -> np.ndarray:
    try:
        return _call(fn, inputs, fmt, backend_name)
    except Exception as exc:
        raise OpbenchError(f"{name} failed on {_shapes(inputs)} in {fmt.name}: {first_line(exc, typed=True)}") from None


def run_stages(judged: Sequence[np.ndarray]) -> tuple[int, ...]:
    """The Monte Carlo runs taken in turn: in stages where the outputs to judge are known."""
    return RUN_STAGES if len(judged) else (RANDOM_RUNS,)


def judged_errors(judged: Sequence[np.ndarray], exact: Exact, fmt: FloatFormat) -> list[np.ndarray]:
    """The rounding errors of the outputs to judge, computed once for every stage's `settled`."""
    return [rounding_error(o, exact, fmt) for o in judged]


def settled(model: TypicalModel, errors: Sequence[np.ndarray], runs: int) -> bool:
    """Whether every output whose rounding errors are `errors` (judged_errors) is within rounding
    by the model of `runs` runs as the 64 runs would judge it: below sqrt(runs/64) of its
    threshold (RUN_STAGES)."""
    return all(model.ratio(err) < np.sqrt(runs / RANDOM_RUNS) for err in errors)


# a function's typical tier at each stage derived (0: the first-order spread's), with its basis
Stages = dict[int, tuple[TypicalModel, str]]


def _function_model(
    fn,
    backend_name,
    inputs64,
    exact,
    fmt,
    own,
    products: FloatFormat | None = None,
    judged: Sequence[np.ndarray] = (),
    stages: Stages | None = None,
) -> tuple[TypicalModel | None, str]:
    """The typical tier for a function, derived as typical.py derives it for registry ops: the
    scale per element is the larger of the RMS error of RANDOM_RUNS Monte Carlo runs of the
    function in `fmt` arithmetic and the error of one deterministic `fmt` run, against its
    float64 evaluation; TYPICAL_Z of it plus one ulp is flagged. A numpy function's runs are its
    formula emulated (accuracy.judge.emulation, deterministic run: round-to-nearest recursive sums); a
    torch function's are its ATen ops with sampled roundings (accuracy.judge.torch_emulation,
    deterministic run: its own `fmt` result; `products`: the format its contractions round their
    products' inputs to, TF32 for CUDA with TF32 on). None where the formula cannot be followed.
    `stages`, where given, receives a torch function's tier at each stage derived: what a cache
    keeps to give other outputs the tier this would give them (accuracy/workflows/model/unit_cache.py)."""

    def how(runs: str, deterministic: str, sampled: str = f"RMS error of {RANDOM_RUNS} Monte Carlo runs") -> str:
        return (
            f"typical tier, derived as for registry ops: {runs} in {fmt.name}; scale = max({sampled}, "
            f"{deterministic}'s error) against its float64 evaluation, flagged above {TYPICAL_Z:g}x scale + 1 ulp"
        )

    if backend_name == "numpy":
        try:
            model = typical_model(fn, inputs64, exact, fmt, fmt)
        except Exception:
            model = None
        return model, (
            how("its formula emulated", "a round-to-nearest recursive run")
            if model
            else "the emulation cannot follow this numpy formula (it leaves numpy's ufuncs)"
        )
    from accuracy.judge.torch_emulation import MonteCarloRuns, first_order_spread  # torch only where needed

    def finished(stage: int, model: TypicalModel, sampled: str, unmodelled, contracted, roundings: int):
        rounded_once = f"; modelled as one rounding each: {', '.join(sorted(unmodelled))}" if unmodelled else ""
        inputs_rounded = (
            f"; the products of {', '.join(sorted(contracted))} from inputs rounded to {products.name}"
            if products is not None and contracted
            else ""
        )
        tier = (
            model.with_worst_case(roundings, exact, fmt),
            how("its torch ops with sampled roundings", f"its own {fmt.name} result", sampled)
            + inputs_rounded
            + rounded_once,
        )
        if stages is not None:  # kept only where asked: each stage's arrays are the output's size
            stages[stage] = tier
        return tier

    failed = "torch's Monte Carlo mode cannot run this function"
    try:  # exact where each rounding reaches the output along one linear path: no runs needed
        rms, unmodelled, contracted, roundings = first_order_spread(fn, inputs64, fmt, products)
        model = model_from_rms(rms, own, exact, fmt, fmt.name) if np.shape(rms) == exact.shape else None
    except Exception:  # NotFirstOrder, or an op the propagation cannot follow: the runs can
        model = None
    if model is not None:
        sampled = f"first-order RMS error of its sampled roundings (what {RANDOM_RUNS} Monte Carlo runs estimate)"
        return finished(0, model, sampled, unmodelled, contracted, roundings)
    runs = MonteCarloRuns(fn, inputs64, fmt, products)
    errors = judged_errors(judged, exact, fmt)
    done = 0
    for stage in run_stages(judged):
        try:
            runs.extend([[SEED, i] for i in range(done, stage)])
        except Exception:
            return None, failed
        done = stage
        if any(np.shape(run) != exact.shape for run in runs.results):
            return None, failed
        model = model_from_runs(runs.results, own, exact, fmt, fmt.name)
        sampled = f"RMS error of {done} Monte Carlo runs"
        result = finished(stage, model, sampled, set(runs.unmodelled), set(runs.contracted), runs.roundings)
        if settled(model, errors, stage):
            break  # settled: every output within rounding, as the 64 runs would judge it
    return result


def check_function(fn: Callable | str, inputs, outputs=None, products: FloatFormat | None = None) -> CheckReport:
    name = fn if isinstance(fn, str) else f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', fn)}"
    fn = load_function(fn) if isinstance(fn, str) else fn
    source = str(inputs) if isinstance(inputs, (str, Path)) else "inputs"
    raw = _named_arrays(inputs, source)
    given = _outputs(outputs)
    fmt = _decide_format(raw, given, source)
    rounded = _rounded_inputs(raw, fmt, source)
    backend_name, own = _first_run(fn, name, rounded, fmt)
    reference = _evaluate(fn, name, {k: a.astype(np.float64) for k, a in rounded.items()}, FLOAT64, backend_name)
    _check_shapes(given, reference.shape, f"{name} on {source}")
    arrays = {OWN_RESULT.format(name.rpartition(":")[2], fmt.name): own} | {k: a for k, (a, _) in given.items()}
    judged = [np.asarray(a).reshape(reference.shape) for a in arrays.values()]
    evidence = function_evidence(fn, name, backend_name, rounded, fmt, own, reference, products, judged)
    judgements = {label: evidence.judge(a) for label, a in arrays.items()}
    return CheckReport(
        name,
        fmt.name,
        {k: list(a.shape) for k, a in rounded.items()},
        [judged_row(label, arrays[label], evidence.exact, j) for label, j in judgements.items()],
        pairwise(arrays, judgements),
    )


def function_evidence(
    fn: Callable,
    name: str,
    backend_name: str,
    rounded: dict[str, np.ndarray],
    fmt: FloatFormat,
    own: np.ndarray,
    reference: np.ndarray,
    products: FloatFormat | None = None,
    judged: Sequence[np.ndarray] = (),
    stages: Stages | None = None,
) -> Evidence:
    """The evidence to judge outputs of `fn` on `rounded` by: its float64 evaluation `reference`
    as the exact value, and the typical tier of its runs (`own`: its result at `fmt`). `judged`:
    the outputs it will judge, where known, so that the Monte Carlo runs stop as soon as their
    verdicts are settled (RUN_STAGES); `stages`: as `_function_model` fills it."""
    exact = Exact.from_float64(reference)
    inputs64 = {k: np.asarray(v).astype(np.float64) for k, v in rounded.items()}
    model, basis = _function_model(fn, backend_name, inputs64, exact, fmt, own, products, judged, stages)
    return Evidence(FunctionSubject(name, model, basis), rounded, fmt, exact)


def check(
    *,
    op: OpInfo | str | None = None,
    fn: Callable | str | None = None,
    inputs: Mapping | str | Path,
    outputs: Mapping | None = None,
    contract: int | None = None,
) -> CheckReport:
    """Judge `outputs` (label -> array or file) of `op` or of the function `fn` on `inputs`
    (name -> array, or a file): the report `opbench check` prints."""
    if (op is None) == (fn is None):
        raise OpbenchError("check needs exactly one of op= or fn=")
    if fn is not None:
        if contract is not None:
            raise OpbenchError("--contract applies to registry ops; a function is judged by the typical tier")
        return check_function(fn, inputs, outputs)
    assert op is not None  # exactly one of op and fn, checked above
    return check_op(op, inputs, outputs, contract)
