"""The x86 instruction levels PyTorch dispatches its CPU kernels to, and whether this CPU has each.

ATen picks one kernel build per process (`torch.backends.cpu.get_cpu_capability()`): DEFAULT,
AVX2 or AVX512. `ATEN_CPU_CAPABILITY` lowers it, oneDNN's `ONEDNN_MAX_CPU_ISA` and MKL's
`MKL_ENABLE_INSTRUCTIONS` cap their own kernels, each read once when the library loads. Asked
for a level the CPU lacks, ATen takes it anyway (`ATEN_CPU_CAPABILITY=avx512` on an AVX2 host
reports AVX512, measured here) and its first AVX-512 kernel dies of an illegal instruction: so
the CPU's own flags decide, never torch's answer.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class Level:
    """One dispatch level: ATen's name, the CPU flags ATen checks for it (its cpu_capability test),
    and the knobs that select it before the libraries load."""

    name: str
    flags: tuple[str, ...]
    knobs: dict[str, str]


LEVELS = {
    level.name: level
    for level in (
        Level(
            "default",
            (),
            {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
        ),
        Level(
            "avx2",
            ("avx2", "fma"),
            {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
        ),
        Level(
            "avx512",
            ("avx512f", "avx512bw", "avx512vl", "avx512dq"),
            {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "MKL_ENABLE_INSTRUCTIONS": "AVX512"},
        ),
    )
}


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str] | None:
    """The CPU's feature flags as Linux lists them, or None where there is no such list."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            return frozenset(value.split())
    return None


def lacks(name: str, flags: frozenset[str] | None = None) -> str | None:
    """Why this CPU cannot run level `name`, or None where it can."""
    level = LEVELS[name]
    if not level.flags:
        return None
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"{name} is an x86 level; this CPU is {platform.machine()}"
    flags = cpu_flags() if flags is None else flags
    if flags is None:
        return f"{CPUINFO} lists no CPU flags here, so {name} cannot be told apart from a crash"
    missing = [f for f in level.flags if f not in flags]
    if missing:
        return f"this CPU lacks {', '.join(missing)} (ATen's {name} kernels need {', '.join(level.flags)})"
    return None
