"""Bring your own case: judge outputs computed anywhere, on inputs the user holds.

Someone has ported a layer to TensorFlow, LibTorch, Java or their own kernel and holds outputs
that differ from PyTorch's. `check` answers "rounding or bug?" for those very arrays:

- for a registry op, each output against the op's exact reference and bounds on these inputs,
  with the same verdicts `opbench explain` gives (accuracy.judge.verdicts). An output from an unknown
  implementation is held to the op's generic contract: the loosest ulp contract any of the op's
  implementations publishes for the dtype (IEEE 754's correctly rounded sqrt, numpy's tables),
  else the worst-case bound and typical tier of a computation in the output's own precision;
- for a user's function, which has no worst-case bound, against the function evaluated in
  float64 on the same inputs, by the typical tier (accuracy.judge.function_tier).

Every problem with the files or arrays is found before anything is judged and is one
OpbenchError naming the file, so a bad input writes nothing and prints one line.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from accuracy.backends import get_backend
from accuracy.catalog.registry import OpInfo, get_op
from accuracy.core.dtypes import FORMATS, FloatFormat, format_of
from accuracy.core.errors import OpbenchError, first_line
from accuracy.core.formatting import printable
from accuracy.core.json_output import json_ready
from accuracy.core.loading import load_function
from accuracy.judge import contracts
from accuracy.judge.function_tier import function_evidence, judged_row
from accuracy.judge.verdicts import WITHIN, Evidence
from accuracy.workflows.array_files import as_array, read_array, read_arrays
from accuracy.workflows.explain import pairwise
from accuracy.workflows.model.answer import explanation, worst_text

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
            f"{printable(o['label'])}: {o['verdict']}: {explanation(o.get('cause'), o['reason'])}; "
            f"worst element {worst_text(o['worst'])}"
            for o in self.outputs
            if o["verdict"] != WITHIN
        )


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
        contracts.Contract(contract_ulps, "--contract")
        if contract_ulps is not None
        else contracts.generic_contract(op, fmt)
    )
    evidence = Evidence(op, rounded, fmt)
    arrays = {label: a for label, (a, _) in given.items()}
    judgements = {label: evidence.judge(a, None, contract, compute) for label, a in arrays.items()}
    rows = [judged_row(label, arrays[label], evidence.exact, j) for label, j in judgements.items()]
    for row in rows:
        if row["verdict"] != WITHIN:  # the cause catalogue imports torch (seconds): only for an output it may explain
            from accuracy.workflows.model.op_causes import with_cause

            with_cause(row, op.name, rounded, fmt, arrays[row["label"]], compute)
    return CheckReport(
        op.name, fmt.name, {k: list(a.shape) for k, a in rounded.items()}, rows, pairwise(arrays, judgements)
    )


# --- user functions ------------------------------------------------------------------------


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
