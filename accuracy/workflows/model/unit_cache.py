"""A unit's typical tier through the reference cache: a rerun of `opbench model` with another
port judges each unit already judged on the same inputs without its Monte Carlo runs.

The entry (the TypicalModel's scale, compute format and roundings, from which its threshold and
worst case are rebuilt bit for bit, and the basis text) is keyed by everything its computation
reads: the unit's inputs, `fmt` and `products`, every parameter, buffer and attribute of its
modules and their submodules, the code of their classes (source and the code objects of their
methods), how each call was made (its non-tensor arguments), the code of the judge itself and the
versions it runs on, and the unit's float64 evaluation on those inputs (one forward: whatever
changes the unit's function, a helper in another file, a patched torch function, a torch function
mode, changes it). State the key cannot describe (a forward hook, an object of unknown kind, a
class without source) judges the unit afresh.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import inspect
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from accuracy.core.dtypes import FloatFormat
from accuracy.judge import typical
from accuracy.judge.typical import model_from_scale
from accuracy.judge.verdicts import Evidence, FunctionSubject
from accuracy.reference import cache as refcache
from accuracy.reference.exact import Exact
from accuracy.workflows.check import Stages, judged_errors, run_stages, settled

KEY_FORMAT = 1
DEPTH = 8  # nesting of attribute objects followed before a unit is judged afresh
# attributes of nn.Module that hold no state of the forward (hooks are checked on their own)
_MODULE_INTERNALS = frozenset({"_parameters", "_buffers", "_modules"})
_FORWARD_HOOKS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks_always_called",
)
_BACKWARD_OR_STATE = ("_backward", "_state_dict", "_load_state_dict", "_is_full_backward_hook")


_EMPTY_CELL = "<an empty closure cell>"


class Uncacheable(Exception):
    """State the key cannot describe: the unit is judged afresh, never from the cache."""


class _Key:
    """A sha256 over length-prefixed fields: no two different descriptions feed the same bytes."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256(f"unit-typical:{KEY_FORMAT}".encode())

    def put(self, tag: str, data: bytes | str | np.ndarray = b"") -> None:
        """`data` (a C-contiguous array is hashed in place, not copied: a model's weights)."""
        raw = (
            data.data if isinstance(data, np.ndarray) else memoryview(data.encode() if isinstance(data, str) else data)
        )
        self.hash.update(f"\0{tag}:{raw.nbytes}:".encode())
        self.hash.update(raw)


def _tensor(key: _Key, t: Any) -> None:
    import torch

    if t.layout != torch.strided or t.is_quantized or t.device.type == "meta":
        raise Uncacheable(f"a {t.layout} tensor")
    t = t.detach()
    key.put("tensor", f"{t.dtype}:{tuple(t.shape)}:{t.stride()}:{t.device.type}")
    key.put("bytes", t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy())


def _array(key: _Key, a: np.ndarray) -> None:
    if a.dtype.hasobject:
        raise Uncacheable("an object array")
    a = np.ascontiguousarray(a)
    key.put("array", f"{a.dtype.str}:{a.shape}")
    key.put("bytes", a.reshape(-1).view(np.uint8))


@functools.cache
def _code_digest(code: types.CodeType) -> str:
    """A code object (immutable) by what it runs: its bytecode, constants (nested code too) and names."""
    key = _Key()
    key.put("code", f"{code.co_qualname}:{code.co_names}:{code.co_varnames}:{code.co_freevars}")
    key.put("bytecode", code.co_code)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            key.put("const", _code_digest(const))
        elif isinstance(const, frozenset):  # `x in {"a", "b"}`: its order is the process's string hashing
            key.put("const", f"frozenset:{sorted(map(repr, const))}")
        else:
            key.put("const", f"{type(const).__name__}:{const!r}")
    return key.hash.hexdigest()


def _code(key: _Key, code: types.CodeType) -> None:
    key.put("code", _code_digest(code))


@functools.cache
def _source(cls: type) -> str:
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):
        raise Uncacheable(f"no source for {cls.__qualname__}") from None


def _class(key: _Key, cls: type) -> None:
    """A class by its name, its source and its methods' code, for it and each base but `object`
    (a method patched in this process shows in its code, an edit on disk in its source)."""
    for c in cls.__mro__[:-1]:
        key.put("class", f"{c.__module__}:{c.__qualname__}")
        key.put("source", _source(c))
        for name, member in vars(c).items():
            function = getattr(member, "__func__", member)  # staticmethod, classmethod
            if isinstance(function, types.FunctionType):
                key.put("method", name)
                _code(key, function.__code__)


def _value(key: _Key, value: Any, depth: int, seen: frozenset[int]) -> None:
    """An attribute or argument by its kind and content; what no rule here describes is Uncacheable."""
    import torch

    if depth > DEPTH:
        raise Uncacheable("attributes nested too deep")
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        key.put(type(value).__name__, repr(value))
        return
    if isinstance(value, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        key.put(type(value).__name__, str(value))
        return
    if isinstance(value, enum.Enum):
        key.put("enum", f"{type(value).__module__}:{type(value).__qualname__}:{value.name}")
        return
    if isinstance(value, torch.Tensor):
        _tensor(key, value)
        return
    if isinstance(value, (np.ndarray, np.generic)):
        _array(key, np.asarray(value))
        return
    if id(value) in seen:  # a cycle back to an object already described
        key.put("seen")
        return
    seen = seen | {id(value)}
    if isinstance(value, (tuple, list)):
        key.put(type(value).__name__, str(len(value)))
        for item in value:
            _value(key, item, depth + 1, seen)
    elif isinstance(value, (set, frozenset)):
        items = sorted(value, key=repr) if all(isinstance(v, (str, int)) for v in value) else None
        if items is None:
            raise Uncacheable("a set of objects")
        _value(key, items, depth + 1, seen)
    elif isinstance(value, dict):
        key.put("dict", str(len(value)))
        for k, v in value.items():
            _value(key, k, depth + 1, seen)
            _value(key, v, depth + 1, seen)
    elif isinstance(value, torch.nn.Module):
        _module(key, value, seen)
    elif isinstance(value, functools.partial):
        key.put("partial")
        _value(key, (value.func, value.args, value.keywords), depth + 1, seen)
    elif isinstance(value, types.MethodType):
        key.put("bound method")
        _value(key, (value.__func__, value.__self__), depth + 1, seen)
    elif isinstance(value, types.FunctionType):
        key.put("function", f"{value.__module__}:{value.__qualname__}")
        _code(key, value.__code__)
        cells = tuple(_cell(c) for c in value.__closure__ or ())
        _value(key, (value.__defaults__, value.__kwdefaults__, cells), depth + 1, seen)
    elif isinstance(value, types.BuiltinFunctionType):
        # a C function (torch.relu, math.sqrt): by name, its code is the installed library's
        key.put("builtin", f"{value.__module__}:{value.__qualname__}")
    elif isinstance(value, type):
        _class(key, value)
    elif hasattr(value, "__dict__") and not hasattr(type(value), "__slots__"):
        # a plain object (a transformers config, a dataclass): its class and its attributes
        _class(key, type(value))
        _value(key, dict(vars(value)), depth + 1, seen)
    else:
        raise Uncacheable(f"an attribute of type {type(value).__qualname__}")


def _cell(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a closure's variable not assigned yet
        return _EMPTY_CELL


def _module(key: _Key, module: Any, seen: frozenset[int] = frozenset()) -> None:
    """A module and every submodule: class and code, extra_repr, mode, attributes, parameters and
    buffers by name (None ones too); a forward hook on any of them makes the unit Uncacheable."""
    for path, m in module.named_modules():
        key.put("module", path)
        _class(key, type(m))
        key.put("extra_repr", m.extra_repr())
        state = vars(m)
        if any(state.get(name) for name in _FORWARD_HOOKS):
            raise Uncacheable(f"a forward hook on {path or type(m).__qualname__}")
        for group in ("_parameters", "_buffers"):
            for name, tensor in state[group].items():
                key.put(group, name)
                _value(key, tensor, 0, seen)
        for name, value in state.items():
            if name in _MODULE_INTERNALS or name in _FORWARD_HOOKS or name.startswith(_BACKWARD_OR_STATE):
                continue
            key.put("attribute", name)
            _value(key, value, 0, seen | {id(m)})


@functools.cache
def _judge_code() -> str:
    """The code that computes an entry (the typical tier, the torch emulation, the function model,
    the unit's evaluation): an edit of opbench itself misses, whatever MODEL_VERSION says."""
    from accuracy.judge import torch_emulation
    from accuracy.workflows import check
    from accuracy.workflows.model import trace, units

    h = hashlib.sha256()
    for module in (typical, torch_emulation, check, trace, units, sys.modules[__name__]):
        h.update(Path(inspect.getfile(module)).read_bytes())
    return h.hexdigest()


def _global_hooks() -> bool:
    from torch.nn.modules import module

    return any(
        getattr(module, name, None)
        for name in ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_forward_hooks_always_called")
    )


def unit_key(
    unit: Any, inputs: list, fmt: FloatFormat, products: FloatFormat | None, reference: np.ndarray
) -> str | None:
    """The key of `unit`'s typical tier on `inputs` (torch tensors in `fmt`) whose float64
    evaluation is `reference`; None where some state of it cannot be described."""
    import torch

    key = _Key()
    try:
        if _global_hooks():
            raise Uncacheable("a global forward hook")
        key.put("versions", f"{torch.__version__}:{np.__version__}:{sys.version}:{_judge_code()}")
        key.put("default dtype", str(torch.get_default_dtype()))
        key.put(
            "tier",
            f"{typical.MODEL_VERSION}:{typical.TYPICAL_Z!r}:{typical.RANDOM_RUNS}:{typical.SEED}:{typical.WORST_MARGIN!r}",
        )
        key.put("formats", f"{fmt.name}:{None if products is None else products.name}")
        key.put("inputs", str(len(inputs)))
        for t in inputs:
            _tensor(key, t)
        key.put("calls", str(len(unit.calls)))
        for call in unit.calls:
            template = call.template
            if template is None:
                key.put("template")
            else:  # the pytree's structure and its non-tensor leaves (flags, sizes, names)
                key.put("template", str(template.spec))
                key.put("slots", str(template.slots))
                _value(key, [None if i in template.slots else v for i, v in enumerate(template.leaves)], 0, frozenset())
            _module(key, call.module)
        _array(key, np.asarray(reference))
    except Uncacheable:
        return None
    return key.hash.hexdigest()


def _stored(stages: Stages) -> dict[str, np.ndarray]:
    """Each stage's model as kept: its scale (its threshold and worst case follow from it, the
    reference and the roundings: a third of the disk), compute format, roundings and basis text."""
    arrays: dict[str, np.ndarray] = {}
    for stage, (model, basis) in stages.items():
        assert model.roundings is not None  # a torch function's tier always counts them
        arrays |= {
            f"scale_{stage}": model.scale,
            f"compute_{stage}": np.array(model.compute),
            f"roundings_{stage}": np.array(model.roundings),
            f"basis_{stage}": np.array(basis),
        }
    return arrays


def _rebuilt(stored: dict[str, np.ndarray], exact: Exact, fmt: FloatFormat) -> Stages:
    stages: Stages = {}
    for name in stored:
        stage = int(name.removeprefix("scale_")) if name.startswith("scale_") else None
        if stage is None or stored[name].shape != exact.shape:
            continue
        model = model_from_scale(stored[name], exact, fmt, str(stored[f"compute_{stage}"]))
        model = model.with_worst_case(int(stored[f"roundings_{stage}"]), exact, fmt)
        stages[stage] = (model, str(stored[f"basis_{stage}"]))
    return stages


def _replayed(stages: Stages, judged: Sequence[np.ndarray], exact: Exact, fmt: FloatFormat):
    """The (model, basis) the derivation would end with for `judged`, from its stored stages
    (the same stages in the same order, stopping where it would); None where it would go on to a
    stage not stored (this port's outputs are not settled where another port's were)."""
    if 0 in stages:  # the first-order spread: no runs, the same tier for any output
        return stages[0]
    found = None
    errors = judged_errors(judged, exact, fmt)
    for stage in run_stages(judged):
        if stage not in stages:
            return None
        found = stages[stage]
        if settled(found[0], errors, stage):
            break
    return found


def cached_function_evidence(
    key: str | None,
    name: str,
    named: dict[str, np.ndarray],
    fmt: FloatFormat,
    exact: Exact,
    judged: Sequence[np.ndarray],
    compute: Callable[[Stages], Evidence],
) -> Evidence:
    """The evidence `compute(stages)` gives (filling `stages`), its typical tier at each stage
    derived stored under `key` (None: not cached) and replayed for `judged` on a later run:
    `name`, `named`, `fmt` and `exact` as `compute` would use them. A tier that could not be
    derived stores nothing (its failure may be this run's alone)."""
    stored = refcache.load_arrays(key) if key is not None else None
    if stored is not None:
        try:
            replayed = _replayed(_rebuilt(stored, exact, fmt), judged, exact, fmt)
        except (KeyError, ValueError):  # an entry of another layout
            replayed = None
        if replayed is not None:
            return Evidence(FunctionSubject(name, *replayed), named, fmt, exact)
    stages: Stages = {}
    evidence = compute(stages)
    if key is not None and evidence.op.model is not None and stages:
        refcache.store_arrays(key, _stored(stages))
    return evidence
