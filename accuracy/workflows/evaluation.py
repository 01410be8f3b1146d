"""Run implementations on one shared input set and measure them against the references.

A `Case` is (op, dtype, size) with its rounded inputs, both references and the error bound:
built once, then every implementation is measured on exactly the same bits.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from accuracy.backends import get_backend
from accuracy.catalog.registry import Impl, OpInfo, get_op
from accuracy.core import interrupts
from accuracy.core.dtypes import FloatFormat, get_format
from accuracy.core.errors import OpbenchError
from accuracy.core.limits import check_size
from accuracy.judge.error_metrics import ErrorSummary, summarize
from accuracy.judge.verdicts import Evidence, Judgement
from accuracy.reference import cache as refcache
from accuracy.reference.exact import Exact
from accuracy.reference.inputs import DEFAULT_CONDITION, as_float64, make_inputs


@dataclass
class Case:
    op: OpInfo
    fmt: FloatFormat
    size: int
    condition: str = DEFAULT_CONDITION

    @cached_property
    def inputs(self) -> dict[str, np.ndarray]:
        return make_inputs(self.op, self.size, self.fmt, self.condition)

    @cached_property
    def inputs64(self) -> dict[str, np.ndarray]:
        return as_float64(self.inputs)

    @cached_property
    def exact(self) -> Exact:
        key = refcache.cache_key(self.op.name, self.op.version, self.fmt.name, self.inputs)
        return refcache.cached(key, lambda: self.op.exact(self.inputs64, self.fmt))

    @cached_property
    def fp64(self) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(self.op.fp64(**self.inputs64), dtype=np.float64)

    def run(self, impl: Impl, threads: int | None = None, inputs: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """The implementation's output on this case's inputs (or `inputs` in the case's dtype,
        e.g. a self-test's mutated ones), in the case's dtype.

        With `threads`, every pool the backend uses is limited to that many threads.
        """
        backend = get_backend(impl.backend)
        with interrupts.held():  # Ctrl-C inside a framework's C++ callback aborted the process
            native = {name: backend.to_native(v) for name, v in (self.inputs if inputs is None else inputs).items()}
            with np.errstate(all="ignore"), backend.thread_limit(threads) if threads else nullcontext():
                out = backend.call(impl.fn, native)
                backend.synchronize()
            return backend.to_numpy(out, self.fmt)

    @cached_property
    def evidence(self) -> Evidence:
        """What verdicts on this case need, computed once for all its implementations."""
        return Evidence(self.op, self.inputs, self.fmt, self.exact)

    def judge(self, impl: Impl, result: np.ndarray | None = None) -> Judgement:
        """The verdict on the implementation's result (run now if not given)."""
        return self.evidence.judge(self.run(impl) if result is None else result, impl)

    def measure(self, impl: Impl, result: np.ndarray | None = None) -> ErrorSummary:
        """The error metrics; the bound ratio is the verdict's (at the implementation's compute precision)."""
        result = self.run(impl) if result is None else result
        if result.shape != self.exact.shape:  # metrics would broadcast and measure nonsense
            raise ValueError(
                f"{impl.name} returned shape {result.shape} but the {self.op.name} reference has "
                f"{self.exact.shape} (a changed reference needs a new op version)"
            )
        return summarize(result, self.exact, self.fp64, self.evidence.bound_for(impl)[1])


def make_case(op_name: str, dtype: str, size: int | None = None, condition: str = DEFAULT_CONDITION) -> Case:
    """A case from user-facing names, validated with one-line errors."""
    op = get_op(op_name)
    fmt = get_format(dtype)
    if dtype not in op.dtypes():
        raise OpbenchError(f"op {op.name!r} has no implementation for {dtype}; it has {', '.join(op.dtypes())}")
    if size is not None and size < 1:
        raise OpbenchError(f"size must be a positive integer, got {size}")
    op.generator(condition)  # validates the condition name
    if size is not None and size < op.min_size:
        raise OpbenchError(
            f"--size {size} is too small: {op.name} needs rows of at least {op.min_size} elements ({op.doc})"
        )
    check_size(op, size, condition)
    return Case(op, fmt, size or op.default_size, condition)
