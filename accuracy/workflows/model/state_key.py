"""A model's state as a cache key: everything a computation on it reads that Python can see.

A module is described by its classes (name, source, and the code objects of their methods), its
parameters, buffers and attributes, and its submodules'; values by their kind and content. State
that no rule here describes (a forward hook, an object of unknown kind, a class without source)
raises Uncacheable: the computation is then done afresh, never read from a cache. The unit cache
(unit_cache) and the export cache (export_cache) key their entries with it.
"""

from __future__ import annotations

import ast
import enum
import functools
import hashlib
import inspect
import linecache
import types
from pathlib import Path
from typing import Any

import numpy as np

from accuracy.core.private_apis import (
    TORCH_BACKWARD_OR_STATE,
    TORCH_FORWARD_HOOKS,
    TORCH_MODULE_INTERNALS,
    own_tensors,
)

DEPTH = 8  # nesting of attribute objects followed before a unit is judged afresh


_EMPTY_CELL = "<an empty closure cell>"


class Uncacheable(Exception):
    """State the key cannot describe: the unit is judged afresh, never from the cache."""


class Key:
    """A sha256 over length-prefixed fields: no two different descriptions feed the same bytes."""

    def __init__(self, purpose: str) -> None:
        self.hash = hashlib.sha256(purpose.encode())

    def put(self, tag: str, data: bytes | str | np.ndarray = b"") -> None:
        """`data` (a C-contiguous array is hashed in place, not copied: a model's weights)."""
        raw = (
            data.data if isinstance(data, np.ndarray) else memoryview(data.encode() if isinstance(data, str) else data)
        )
        self.hash.update(f"\0{tag}:{raw.nbytes}:".encode())
        self.hash.update(raw)


def put_tensor(key: Key, t: Any) -> None:
    import torch

    if t.layout != torch.strided or t.is_quantized or t.device.type == "meta":
        raise Uncacheable(f"a {t.layout} tensor")
    t = t.detach()
    key.put("tensor", f"{t.dtype}:{tuple(t.shape)}:{t.stride()}:{t.device.type}")
    key.put("bytes", t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy())


def put_array(key: Key, a: np.ndarray) -> None:
    if a.dtype.hasobject:
        raise Uncacheable("an object array")
    a = np.ascontiguousarray(a)
    key.put("array", f"{a.dtype.str}:{a.shape}")
    key.put("bytes", a.reshape(-1).view(np.uint8))


@functools.cache
def code_digest(code: types.CodeType) -> str:
    """A code object (immutable) by what it runs: its bytecode, constants (nested code too) and names."""
    key = Key("code")
    key.put("code", f"{code.co_qualname}:{code.co_names}:{code.co_varnames}:{code.co_freevars}")
    key.put("bytecode", code.co_code)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            key.put("const", code_digest(const))
        elif isinstance(const, frozenset):  # `x in {"a", "b"}`: its order is the process's string hashing
            key.put("const", f"frozenset:{sorted(map(repr, const))}")
        else:
            key.put("const", f"{type(const).__name__}:{const!r}")
    return key.hash.hexdigest()


def _code(key: Key, code: types.CodeType) -> None:
    key.put("code", code_digest(code))


@functools.cache
def _source(cls: type) -> str:
    """inspect.getsource(cls), found in its file's one parse: inspect parses the whole file again
    for each class (transformers' modeling files: a tenth of a second each, every process)."""
    try:
        file = inspect.getsourcefile(cls)
        module = inspect.getmodule(cls, file)
        if file:
            linecache.checkcache(file)  # as inspect does: a file edited since it was read (a reloaded module)
        lines = linecache.getlines(file, module.__dict__) if file and module else []
        start = _class_starts(file, tuple(lines)).get(cls.__qualname__) if lines else None
        if start is None or inspect.unwrap(cls) is not cls:  # inspect's own way, where it differs
            return inspect.getsource(cls)
        return "".join(inspect.getblock(lines[start:]))
    except (OSError, TypeError, SyntaxError):
        raise Uncacheable(f"no source for {cls.__qualname__}") from None


# the nodes a class statement can be inside: statements, and the bodies of `except` and `case`
BODIES = (ast.stmt, ast.excepthandler, ast.match_case)


@functools.lru_cache(maxsize=64)
def _class_starts(file: str, lines: tuple[str, ...]) -> dict[str, int]:
    """The first line (its first decorator's) of each class in a source file by qualname, the
    first in the order inspect's own search meets them, as inspect.findsource numbers them."""
    starts: dict[str, int] = {}

    def visit(node: ast.AST, stack: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, (*stack, child.name, "<locals>"))
            elif isinstance(child, ast.ClassDef):
                first = child.decorator_list[0].lineno if child.decorator_list else child.lineno
                starts.setdefault(".".join((*stack, child.name)), first - 1)
                visit(child, (*stack, child.name))
            elif isinstance(child, BODIES):  # an expression holds no class: its nodes are not walked
                visit(child, stack)

    visit(ast.parse("".join(lines)), ())
    return starts


# each class's digest by the identity of the class and of its methods' code objects, which the
# entry keeps alive (so no other object takes their ids): nn.Module's hundred methods are hashed
# once per process, not once per module of every unit (a tenth of judging a MobileNet)
_CLASS_DIGESTS: dict[tuple, tuple[str, list]] = {}


def _class(key: Key, cls: type) -> None:
    """A class by its name, its source and its methods' code, for it and each base but `object`
    (a method patched in this process shows in its code, an edit on disk in its source)."""
    for c in cls.__mro__[:-1]:
        methods = [
            (name, function.__code__)
            for name, member in vars(c).items()
            # staticmethod, classmethod: the function they wrap
            if isinstance(function := getattr(member, "__func__", member), types.FunctionType)
        ]
        memo = (c, tuple((name, id(code)) for name, code in methods))
        if memo not in _CLASS_DIGESTS:
            _CLASS_DIGESTS[memo] = (_class_digest(c, methods), methods)
        key.put("class", _CLASS_DIGESTS[memo][0])


def _class_digest(c: type, methods: list[tuple[str, types.CodeType]]) -> str:
    key = Key("class")
    key.put("class", f"{c.__module__}:{c.__qualname__}")
    key.put("source", _source(c))
    for name, code in methods:
        key.put("method", name)
        _code(key, code)
    return key.hash.hexdigest()


def put_value(key: Key, value: Any, depth: int, seen: frozenset[int]) -> None:
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
    if isinstance(value, np.dtype):  # a format's storage (FloatFormat.np_dtype): by name and layout
        key.put("numpy dtype", f"{value.name}:{value.str}")
        return
    if isinstance(value, enum.Enum):
        key.put("enum", f"{type(value).__module__}:{type(value).__qualname__}:{value.name}")
        return
    if isinstance(value, torch.Tensor):
        put_tensor(key, value)
        return
    if isinstance(value, (np.ndarray, np.generic)):
        put_array(key, np.asarray(value))
        return
    if id(value) in seen:  # a cycle back to an object already described
        key.put("seen")
        return
    seen = seen | {id(value)}
    if isinstance(value, (tuple, list)):
        key.put(type(value).__name__, str(len(value)))
        for item in value:
            put_value(key, item, depth + 1, seen)
    elif isinstance(value, (set, frozenset)):
        items = sorted(value, key=repr) if all(isinstance(v, (str, int)) for v in value) else None
        if items is None:
            raise Uncacheable("a set of objects")
        put_value(key, items, depth + 1, seen)
    elif isinstance(value, dict):
        key.put("dict", str(len(value)))
        for k, v in value.items():
            put_value(key, k, depth + 1, seen)
            put_value(key, v, depth + 1, seen)
    elif isinstance(value, torch.nn.Module):
        put_module(key, value, seen)
    elif isinstance(value, functools.partial):
        key.put("partial")
        put_value(key, (value.func, value.args, value.keywords), depth + 1, seen)
    elif isinstance(value, types.MethodType):
        key.put("bound method")
        put_value(key, (value.__func__, value.__self__), depth + 1, seen)
    elif isinstance(value, types.FunctionType):
        key.put("function", f"{value.__module__}:{value.__qualname__}")
        _code(key, value.__code__)
        cells = tuple(_cell(c) for c in value.__closure__ or ())
        put_value(key, (value.__defaults__, value.__kwdefaults__, cells), depth + 1, seen)
    elif isinstance(value, types.BuiltinFunctionType):
        # a C function (torch.relu, math.sqrt): by name, its code is the installed library's
        key.put("builtin", f"{value.__module__}:{value.__qualname__}")
    elif isinstance(value, type):
        _class(key, value)
    elif hasattr(value, "__dict__") and not hasattr(type(value), "__slots__"):
        # a plain object (a transformers config, a dataclass): its class and its attributes
        _class(key, type(value))
        put_value(key, dict(vars(value)), depth + 1, seen)
    else:
        raise Uncacheable(f"an attribute of type {type(value).__qualname__}")


def _cell(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a closure's variable not assigned yet
        return _EMPTY_CELL


def put_module(key: Key, module: Any, seen: frozenset[int] = frozenset()) -> None:
    """A module and every submodule: class and code, extra_repr, mode, attributes, parameters and
    buffers by name (None ones too); a forward hook on any of them makes the unit Uncacheable."""
    for path, m in module.named_modules():
        key.put("module", path)
        _class(key, type(m))
        key.put("extra_repr", m.extra_repr())
        state = vars(m)
        if any(state.get(name) for name in TORCH_FORWARD_HOOKS):
            raise Uncacheable(f"a forward hook on {path or type(m).__qualname__}")
        for group, tensors in zip(("_parameters", "_buffers"), own_tensors(m), strict=True):
            for name, tensor in tensors.items():
                key.put(group, name)
                put_value(key, tensor, 0, seen)
        for name, value in state.items():
            if (
                name in TORCH_MODULE_INTERNALS
                or name in TORCH_FORWARD_HOOKS
                or name.startswith(TORCH_BACKWARD_OR_STATE)
            ):
                continue
            key.put("attribute", name)
            put_value(key, value, 0, seen | {id(m)})


def source_digest(*modules: types.ModuleType) -> str:
    """The source files of `modules`, in order, as one digest: an edit of the code that computes an
    entry misses, whatever its format number says."""
    h = hashlib.sha256()
    for module in modules:
        h.update(Path(inspect.getfile(module)).read_bytes())
    return h.hexdigest()


def global_hooks() -> bool:
    from torch.nn.modules import module

    return any(
        getattr(module, name, None)
        for name in ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_forward_hooks_always_called")
    )
