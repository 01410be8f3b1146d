"""The op registry: one declarative record per op, the single source of truth.

The registry is plain data. Each module `accuracy/catalog/ops/<subject>.py` exports `OPS`, a list
of `OpInfo` records; `all_ops()` concatenates them, so the catalog is complete whichever module is
imported first. Installed packages extend it through entry points: `opbench.ops` (new ops) and
`opbench.impls` (`ImplsFor` records: implementations added to an op declared elsewhere, a built-in
one included). The CLI, the asv suite and most tests are views generated from it.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache

import numpy as np
from numpy.typing import ArrayLike

from accuracy.backends import backends_for, get_backend
from accuracy.backends.startup_threads import add_function_namer
from accuracy.core.dtypes import ALL_DTYPES, FloatFormat
from accuracy.core.errors import OpbenchError, warn
from accuracy.core.plugins import load_plugins
from accuracy.reference.exact import Exact
from accuracy.reference.inputs import DEFAULT_CONDITION

# The op modules, by subject; an op's family is the subject of the module that declares it.
OP_MODULES = (
    "products",
    "reductions",
    "elementwise",
    "activations",
    "norms",
    "conv",
    "attention",
    "losses",
    "linalg",
    "fft",
    "grads",
)
PLUGIN_GROUP = "opbench.ops"  # entry points naming a module with OPS, or a list of OpInfo
IMPLS_GROUP = "opbench.impls"  # entry points naming a module with IMPLS, or a list of ImplsFor
PER_DTYPE_FIELDS = ("semantics", "stable", "finding")  # what an Impl may declare for some dtypes only
PLUGIN_FAMILY = "plugins"  # the family of a plugin op that declares none


@dataclass(frozen=True)
class Impl:
    """One way to compute an op: `fn(ns, **inputs)` with `ns` the backend's namespace."""

    backend: str
    variant: str
    fn: Callable
    dtypes: tuple[str, ...]
    note: str = ""  # say why a variant exists, e.g. a different default that users trip over
    also: tuple[str, ...] = ()  # extra backends this fn also runs on (e.g. backends.TORCH_VARIANTS)
    # a deliberate difference in what is computed (e.g. "ddof=0"): never a rounding difference
    semantics: str = ""
    # storage dtype -> the precision it computes in there (e.g. {"float16": "float32"} for a
    # float16 op that upcasts); empty: its backend's policy (accuracy.judge.precision)
    compute: Mapping[str, str] = field(default_factory=dict)
    # False for a textbook formula known to lose accuracy (no max shift, explicit inverse, ...):
    # it may leave the bound or overflow, and tests expect nothing of it
    stable: bool = True
    # a measured defect of this library on these inputs (a finding: measured in docs/frameworks.md,
    # listed in docs/findings.md): it is not counted as a correct implementation, and no test
    # expects it within rounding
    finding: str = ""
    # why its bits change from call to call on the same inputs and thread count (measured): the
    # op is declared non-reproducible there. It is still judged on every call, but the self-test's
    # least accurate correct error, which sets which mutants must be caught, leaves it out
    varies_run_to_run: str = ""
    # semantics, stable or finding where they hold at some dtypes only: dtype -> {field: value},
    # e.g. {"float16": {"finding": "..."}}; `at(dtype)` is the implementation as declared there
    per_dtype: Mapping[str, Mapping[str, object]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for dtype, fields in self.per_dtype.items():
            unknown = set(fields) - set(PER_DTYPE_FIELDS)
            if dtype not in self.dtypes or unknown:
                raise ValueError(
                    f"{self.name}: per_dtype declares {sorted(unknown) or dtype!r}; it takes dtypes of the "
                    f"implementation ({', '.join(self.dtypes)}) and the fields {', '.join(PER_DTYPE_FIELDS)}"
                )

    @property
    def name(self) -> str:
        return f"{self.backend}:{self.variant}"

    def at(self, dtype: str) -> Impl:
        """This implementation as declared at `dtype`: its per-dtype semantics, stability and
        finding in place of the ones declared for every dtype."""
        overrides = self.per_dtype.get(dtype)
        return replace(self, **overrides) if overrides else self  # type: ignore[arg-type]  # keys checked in __post_init__


@dataclass(frozen=True)
class ImplsFor:
    """Implementations a plugin package adds to an op it did not declare (`opbench.impls`)."""

    op: str
    impls: tuple[Impl, ...]


@dataclass(frozen=True)
class OpInfo:
    """An op: how to make its inputs, its exact and fp64 references, and its error bound.

    generate(rng, size) -> float64 inputs; exact(inputs64, fmt) -> Exact;
    fp64(**inputs64) -> float64 result; bound(inputs64, exact, fmt) -> per-element absolute bound;
    oracle(inputs64) -> the exact result as a flat sequence of mpmath numbers, written
    independently of `exact` (another formula) and checked against it at `test_size`.
    """

    name: str
    doc: str
    generate: Callable[[np.random.Generator, int], dict[str, np.ndarray]]
    exact: Callable[[dict, FloatFormat], Exact]
    fp64: Callable[..., ArrayLike]
    bound: Callable[[dict, Exact, FloatFormat], ArrayLike]
    bound_doc: str
    impls: tuple[Impl, ...]
    default_size: int
    bench_sizes: tuple[int, ...]
    oracle: Callable[[dict], Sequence] | None = None
    test_size: int = 8  # small enough for the oracle at 200 bits in well under a second
    flops: Callable[[int], float] | None = None
    version: int = 1  # bump when inputs, references or bounds change meaning
    # other input regimes by name (e.g. {"ill": ill-conditioned matrices}): a parameter of the
    # op, so the bound ratio, not the raw error, tells rounding from bug on hard inputs
    conditions: dict[str, Callable[[np.random.Generator, int], dict[str, np.ndarray]]] = field(default_factory=dict)
    family: str = ""  # set by the registry: the subject module that declares the op
    # the op as a plain working-precision algorithm in numpy ufuncs, where fp64 leaves them (np.fft):
    # what the typical tier and the self-test emulate (accuracy.judge.emulation); None: fp64 is that formula
    working: Callable[..., np.ndarray] | None = None
    # output axes over which the op's error analysis is normwise (an FFT's bins): a correct algorithm's
    # error spreads over them, so the typical tier pools its error scale there (RMS)
    normwise_axes: tuple[int, ...] = ()
    # the fewest elements along the inputs' last axis the op is defined for (var and std: ddof + 1);
    # smaller sizes are bad input, refused before any reference divides by zero
    min_size: int = 1

    def check_min_size(self, inputs: dict[str, np.ndarray], where: str) -> None:
        """One line, exit 2, where a row is too short for the op (std of one element with ddof=1)."""
        for name, a in inputs.items():
            if np.ndim(a) and np.shape(a)[-1] < self.min_size:
                raise OpbenchError(
                    f"{where}: {self.name} needs rows of at least {self.min_size} elements, input {name!r} has "
                    f"{np.shape(a)[-1]} ({self.doc})"
                )

    @property
    def working_formula(self) -> Callable[..., ArrayLike]:
        return self.working or self.fp64

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

    def impl(self, name: str, dtype: str | None = None) -> Impl:
        """The implementation named `name`; at `dtype`, as declared there (`Impl.at`)."""
        impls = self.concrete_impls()
        for impl in impls:
            if impl.name == name:
                return impl if dtype is None else impl.at(dtype)
        raise OpbenchError(
            f"op {self.name!r} has no implementation {name!r}; choose from {', '.join(i.name for i in impls)}"
        )

    def dtypes(self) -> tuple[str, ...]:
        seen = {d for i in self.impls for d in i.dtypes}
        return tuple(d for d in ALL_DTYPES if d in seen)

    def available_impls(self, dtype: str) -> list[Impl]:
        """Implementations that exist for `dtype` on this machine; others are simply absent."""
        return [i.at(dtype) for i in self.concrete_impls() if dtype in i.dtypes and get_backend(i.backend).available()]


@cache
def _catalog() -> dict[str, OpInfo]:
    catalog: dict[str, OpInfo] = {}
    for subject in OP_MODULES:
        for op in importlib.import_module(f"accuracy.catalog.ops.{subject}").OPS:
            if op.name in catalog:
                raise ValueError(f"op {op.name!r} is declared twice ({catalog[op.name].family} and {subject})")
            catalog[op.name] = replace(op, family=subject)
    for op in load_plugins(PLUGIN_GROUP, "OPS", OpInfo):
        if op.name in catalog:
            warn(f"plugin op {op.name!r} left out: opbench already has an op of that name")
            continue
        catalog[op.name] = replace(op, family=op.family or PLUGIN_FAMILY)
    for added in load_plugins(IMPLS_GROUP, "IMPLS", ImplsFor):
        _add_impls(catalog, added)
    return catalog


def _add_impls(catalog: dict[str, OpInfo], added: ImplsFor) -> None:
    """A plugin's implementations join their op; one for an unknown op, or one whose name the op
    already has, is left out with a warning (a plugin never replaces what is declared)."""
    if added.op not in catalog:
        warn(f"plugin implementations for op {added.op!r} left out: there is no op of that name")
        return
    op = catalog[added.op]
    names = {i.name for i in op.impls}
    fresh = []
    for impl in added.impls:
        if impl.name in names:
            warn(f"plugin implementation {impl.name!r} of op {op.name!r} left out: the op already has one of that name")
            continue
        names.add(impl.name)
        fresh.append(impl)
    catalog[added.op] = replace(op, impls=(*op.impls, *fresh))


def all_ops() -> list[OpInfo]:
    return list(_catalog().values())


def impl_function(op_name: str, backend: str, variant: str) -> Callable:
    """The function of one implementation, found by name (how a worker process gets a registry lambda)."""
    return next(i.fn for i in get_op(op_name).impls if (i.backend, i.variant) == (backend, variant))


def _name_impl_function(fn: Callable) -> tuple[Callable, tuple[str, str, str]] | None:
    for op in all_ops():
        for impl in op.impls:
            if impl.fn is fn:
                return impl_function, (op.name, impl.backend, impl.variant)
    return None


add_function_namer(_name_impl_function)


def families() -> tuple[str, ...]:
    """Every family in the catalog, the subjects first, in declaration order."""
    return tuple(dict.fromkeys(op.family for op in all_ops()))


def get_op(name: str) -> OpInfo:
    catalog = _catalog()
    try:
        return catalog[name]
    except KeyError:
        close = difflib.get_close_matches(name, catalog, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise OpbenchError(f"unknown op {name!r}{hint}; `opbench list` shows them all") from None
