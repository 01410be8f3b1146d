"""The CPU dispatch levels: which vector level this CPU has, and the knobs that make each library
run a lower one.

PyTorch (ATen), oneDNN and MKL pick their kernels once, when they load, from the CPU's features; a
result (and a verdict) can hold on one host and not another. Each library has a documented knob
that caps the level it dispatches to, read only before it loads: so another host's kernels run
here in a child process started with `knobs(level)`. Tests that depend on a level ask `missing`,
which says what the CPU lacks.
"""

from __future__ import annotations

from accuracy.backends.environment import first_core_cpuinfo


# each level: the CPU flags it needs (as /proc/cpuinfo names them) and each library's knob for it
def _knobs(aten: str, onednn: str, mkl: str) -> dict[str, str]:
    return {"ATEN_CPU_CAPABILITY": aten, "ONEDNN_MAX_CPU_ISA": onednn, "MKL_ENABLE_INSTRUCTIONS": mkl}


LEVELS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "default": ((), _knobs("default", "SSE41", "SSE4_2")),
    "avx2": (("avx2", "fma"), _knobs("avx2", "AVX2", "AVX2")),
    "avx512": (("avx512f", "avx512bw", "avx512vl", "avx512dq"), _knobs("avx512", "AVX512_CORE", "AVX512")),
}


def cpu_flags() -> frozenset[str]:
    """The first core's feature flags; empty where /proc/cpuinfo cannot be read."""
    return frozenset(first_core_cpuinfo().get("flags", "").split())


def missing(level: str) -> str:
    """Why this CPU cannot run `level`'s kernels ('' where it can)."""
    needs, _ = LEVELS[level]
    flags = cpu_flags()
    if needs and not flags:
        return "this machine's CPU flags cannot be read (/proc/cpuinfo)"
    lacking = [f for f in needs if f not in flags]
    return f"this CPU lacks {', '.join(lacking)}" if lacking else ""


def knobs(level: str) -> dict[str, str]:
    """The environment that caps PyTorch, oneDNN and MKL at `level`, for a process not yet started."""
    return dict(LEVELS[level][1])


def levels_here() -> list[str]:
    """The levels this CPU can run, lowest first."""
    return [level for level in LEVELS if not missing(level)]
