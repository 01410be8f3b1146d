"""Limits checked before any work starts: thread counts and problem sizes this machine can take.

Both used to fail late and badly: `explain matmul --threads 4` on a 2-core machine crashed the
process inside OpenBLAS (exit 139), and a large `--size` allocated gigabytes before failing.
Each command calls these once, before it allocates or spawns anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

import numpy as np

from accuracy.core.errors import OpbenchError
from accuracy.core.threads import all_cores

# What a case holds besides its float64 inputs: the inputs rounded to the dtype, each
# implementation's copy and output, the fp64 result and the exact reference (several
# float64 words per element). Measured with `explain matmul` at sizes 200 and 1500: peak
# memory grew by about 10x the growth of the float64 inputs.
CASE_MEMORY_FACTOR = 10
MEMORY_BUDGET_FRACTION = 0.5  # of the memory available now: leave room for the rest of the system


def check_threads(threads: int | None) -> None:
    """Refuse thread counts outside 1..all cores this process may use.

    The BLAS libraries size their thread pools for the cores they see when loaded; asking
    for more crashed OpenBLAS (segfault) instead of raising an error.
    """
    if threads is None:
        return
    limit = all_cores()
    if threads < 1:
        raise OpbenchError(f"--threads must be at least 1, got {threads}")
    if threads > limit:
        raise OpbenchError(f"--threads {threads} is more than the maximum {limit} (the cores this process may use)")


def available_memory() -> int:
    """Bytes this process can allocate now: what the kernel says can be allocated without swapping
    (MemAvailable), and no more than its address-space limit (`ulimit -v`, RLIMIT_AS) leaves beside
    what it maps already, nor its cgroup's memory limit beside the cgroup's use (a container, a
    job scheduler): past either, numpy's allocation fails (a MemoryError traceback) or the kernel
    kills the process, whatever the machine has free."""
    with open("/proc/meminfo", encoding="ascii") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) * 1024
                return min(free, _address_space_left(), _cgroup_left())
    raise OpbenchError("cannot read MemAvailable from /proc/meminfo to check --size")


def _address_space_left() -> int:
    """RLIMIT_AS less the address space the process maps now (VmSize); unlimited: no bound."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return NO_LIMIT
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            mapped = next((int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:")), 0)
    except OSError:
        mapped = 0
    return max(0, soft - mapped)


NO_LIMIT = 1 << 62
CGROUP_ROOT = "/sys/fs/cgroup"  # where the cgroup file systems are mounted
PROC_CGROUP = "/proc/self/cgroup"


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def _cgroup_left() -> int:
    """The least headroom (limit less use) of this process's memory cgroup and its ancestors:
    cgroup v2 (`memory.max`, `memory.current`) or v1 (`memory.limit_in_bytes`, `memory.usage_in_bytes`);
    a cgroup path not visible from here (a container's namespace) is read at the mount's root."""
    try:
        with open(PROC_CGROUP, encoding="ascii") as handle:
            lines = [line.strip().split(":", 2) for line in handle if line.count(":") >= 2]
    except OSError:
        return NO_LIMIT
    left = NO_LIMIT
    for _, controllers, path in lines:
        if controllers == "":
            mount, files = CGROUP_ROOT, ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            mount, files = f"{CGROUP_ROOT}/memory", ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):
            folder = "/".join([mount, *parts[:depth]])
            limit, used = _read_int(f"{folder}/{files[0]}"), _read_int(f"{folder}/{files[1]}")
            if limit is not None and used is not None and limit < NO_LIMIT:
                left = min(left, max(0, limit - used + _inactive_file(folder)))
    return left


def _inactive_file(folder: str) -> int:
    """The cgroup's page cache the kernel reclaims first (memory.stat's inactive_file), counted
    free as `docker stats` counts it: a cgroup that read large files is not full."""
    try:
        with open(f"{folder}/memory.stat", encoding="ascii") as stat:
            for line in stat:
                name, _, value = line.partition(" ")
                if name in ("inactive_file", "total_inactive_file") and value.strip().isdigit():
                    return int(value)
    except OSError:
        pass
    return 0


class GeneratedOp(Protocol):
    """What sizing and generating a case needs of an op (the catalog's OpInfo, a layer above)."""

    @property
    def name(self) -> str: ...

    @property
    def test_size(self) -> int: ...

    def generator(self, condition: str) -> Callable[[np.random.Generator, int], Mapping[str, np.ndarray]]: ...


def estimate_case_bytes(op: GeneratedOp, size: int, condition: str) -> int:
    """Bytes a case of `size` needs, extrapolated from the inputs of two small sizes.

    Inputs grow as a power of the size (n for vectors, n^2 for matrices, ...); generating
    them at small sizes is cheap and needs no per-op declaration.
    """
    generate = op.generator(condition)
    small = max(op.test_size, 4)

    def input_bytes(n: int) -> int:
        return sum(np.asarray(a).nbytes for a in generate(np.random.default_rng(0), n).values())

    a, b = input_bytes(small), input_bytes(2 * small)
    if size <= 2 * small or a == 0:
        return CASE_MEMORY_FACTOR * max(a, b)
    exponent = max(np.log2(b / a), 0.0)
    return int(CASE_MEMORY_FACTOR * b * (size / (2 * small)) ** exponent)


def check_size(op: GeneratedOp, size: int | None, condition: str) -> None:
    """Refuse a --size whose inputs and references would not fit the memory budget."""
    if size is None:
        return
    needed = estimate_case_bytes(op, size, condition)
    budget = int(available_memory() * MEMORY_BUDGET_FRACTION)
    if needed > budget:
        raise OpbenchError(
            f"--size {size} for {op.name} needs about {_gb(needed)} for inputs and references, more than "
            f"the budget of {_gb(budget)} (half the memory available now); choose a smaller --size"
        )


SAMPLE_BYTES_PER_INPUT = 48  # `scan --sample`: the float64 sample plus the uint64 bit fields it is drawn from


def check_sample(sample: int) -> None:
    """Refuse a float64 `scan --sample` that would not fit the memory budget (it is drawn at once)."""
    needed = sample * SAMPLE_BYTES_PER_INPUT
    budget = int(available_memory() * MEMORY_BUDGET_FRACTION)
    if needed > budget:
        raise OpbenchError(
            f"--sample {sample} needs about {_gb(needed)} to draw, more than the budget of {_gb(budget)} "
            f"(half the memory available now, {SAMPLE_BYTES_PER_INPUT} bytes per input); choose a smaller --sample"
        )


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"
