"""Deterministic inputs: PCG64 with a fixed seed per (op, size), rounded once to the target dtype.

The rounded arrays feed every implementation *and* the references, so a measured error is the
op's alone and never the cost of rounding its inputs.
"""

from __future__ import annotations

import zlib

import numpy as np

from accuracy.core.dtypes import FloatFormat
from accuracy.core.limits import GeneratedOp

DEFAULT_CONDITION = "random"  # the input regime every op has: its own `generate`


def seed_for(op_name: str, size: int, condition: str = DEFAULT_CONDITION) -> int:
    """A stable seed per (op, size, condition): crc32 does not change between runs, unlike hash()."""
    key = f"{op_name}:{size}" if condition == DEFAULT_CONDITION else f"{op_name}:{size}:{condition}"
    return zlib.crc32(key.encode())


def rng_for(op_name: str, size: int, condition: str = DEFAULT_CONDITION) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed_for(op_name, size, condition)))


def make_inputs(
    op: GeneratedOp, size: int, fmt: FloatFormat, condition: str = DEFAULT_CONDITION
) -> dict[str, np.ndarray]:
    """The op's inputs at `size` (and condition), generated in float64 and rounded once to `fmt`."""
    raw = op.generator(condition)(rng_for(op.name, size, condition), size)
    return {name: fmt.round(values) for name, values in raw.items()}


def as_float64(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Exact float64 copies of rounded inputs (every format here embeds exactly in float64)."""
    return {name: np.asarray(v).astype(np.float64) for name, v in inputs.items()}


# Generators: each returns float64 arrays; the op declaration picks shapes and ranges.


def normal(rng: np.random.Generator, shape: int | tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    return rng.standard_normal(shape) * scale


def uniform(rng: np.random.Generator, shape: int | tuple[int, ...], low: float, high: float) -> np.ndarray:
    return rng.uniform(low, high, shape)
