"""The op registry: one declarative record per op, the single source of truth.

The CLI, the asv suite and most tests are generated from `all_ops()`. Adding an op is one
`register(OpInfo(...))` call in a module under `accuracy/ops/`; adding an implementation is one
`Impl(...)` line in that op's record.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from accuracy.backends import backends_for, get_backend
from accuracy.dtypes import FloatFormat
from accuracy.errors import OpbenchError
from accuracy.exact import Exact

DEFAULT_CONDITION = "random"  # the input regime every op has: its own `generate`

OP_MODULES = ("elementwise", "reductions", "linalg", "nn", "elementwise_more", "lapack", "nn_more", "reductions_more", "fft", "grad")


@dataclass(frozen=True)
class Impl:
    """One way to compute an op: `fn(ns, **inputs)` with `ns` the backend's namespace."""

    backend: str
    variant: str
    fn: Callable
    dtypes: tuple[str, ...]
    note: str = ""  # say why a variant exists, e.g. a different default that users trip over
    also: tuple[str, ...] = ()  # extra backends this fn also runs on (e.g. backends.TORCH_VARIANTS)

    @property
    def name(self) -> str:
        return f"{self.backend}:{self.variant}"


@dataclass(frozen=True)
class OpInfo:
    """An op: how to make its inputs, its exact and fp64 references, and its error bound.

    generate(rng, size) -> float64 inputs; exact(inputs64, fmt) -> Exact;
    fp64(inputs64) -> float64 result; bound(inputs64, exact, fmt) -> per-element absolute bound.
    """

    name: str
    family: str
    doc: str
    generate: Callable[[np.random.Generator, int], dict[str, np.ndarray]]
    exact: Callable[[dict, FloatFormat], Exact]
    fp64: Callable[..., np.ndarray]
    bound: Callable[[dict, Exact, FloatFormat], np.ndarray]
    bound_doc: str
    impls: tuple[Impl, ...]
    default_size: int
    bench_sizes: tuple[int, ...]
    flops: Callable[[int], float] | None = None
    version: int = 1  # bump when inputs, references or bounds change meaning
    # other input regimes by name (e.g. {"ill": ill-conditioned matrices}): a parameter of the
    # op, so the bound ratio, not the raw error, tells rounding from bug on hard inputs
    conditions: dict[str, Callable[[np.random.Generator, int], dict[str, np.ndarray]]] = field(default_factory=dict)

    def condition_names(self) -> tuple[str, ...]:
        return (DEFAULT_CONDITION, *self.conditions)

    def generator(self, condition: str = DEFAULT_CONDITION):
        if condition == DEFAULT_CONDITION:
            return self.generate
        try:
            return self.conditions[condition]
        except KeyError:
            raise OpbenchError(
                f"op {self.name!r} has no condition {condition!r}; choose from {', '.join(self.condition_names())}"
            ) from None

    def concrete_impls(self) -> list[Impl]:
        """Declared impls with backend families expanded ('blas' -> one per BLAS provider) and
        the extra backends each opted into."""
        return [replace(i, backend=b) for i in self.impls for b in [*backends_for(i.backend), *i.also]]

    def impl(self, name: str) -> Impl:
        impls = self.concrete_impls()
        for impl in impls:
            if impl.name == name:
                return impl
        raise OpbenchError(
            f"op {self.name!r} has no implementation {name!r}; choose from {', '.join(i.name for i in impls)}"
        )

    def dtypes(self) -> tuple[str, ...]:
        seen = {d for i in self.impls for d in i.dtypes}
        return tuple(d for d in ("float16", "bfloat16", "float32", "float64") if d in seen)

    def available_impls(self, dtype: str) -> list[Impl]:
        """Implementations that exist for `dtype` on this machine; others are simply absent."""
        return [i for i in self.concrete_impls() if dtype in i.dtypes and get_backend(i.backend).available()]


_REGISTRY: dict[str, OpInfo] = {}


def register(op: OpInfo) -> OpInfo:
    if op.name in _REGISTRY:
        raise ValueError(f"op {op.name!r} registered twice")
    _REGISTRY[op.name] = op
    return op


def _load() -> None:
    if not _REGISTRY:
        for module in OP_MODULES:
            importlib.import_module(f"accuracy.ops.{module}")


def all_ops() -> list[OpInfo]:
    _load()
    return list(_REGISTRY.values())


def get_op(name: str) -> OpInfo:
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(name, _REGISTRY, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise OpbenchError(f"unknown op {name!r}{hint}; `opbench list` shows them all") from None
