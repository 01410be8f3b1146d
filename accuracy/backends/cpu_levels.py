"""The x86 instruction levels PyTorch dispatches its CPU kernels to, and whether this CPU has each.

ATen picks one kernel build per process (`torch.backends.cpu.get_cpu_capability()`): DEFAULT,
AVX2 or AVX512. `ATEN_CPU_CAPABILITY` lowers it, oneDNN's `ONEDNN_MAX_CPU_ISA` and MKL's
`MKL_ENABLE_INSTRUCTIONS` cap their own kernels, each read once when the library loads. Asked
for a level the CPU lacks, ATen takes it anyway (`ATEN_CPU_CAPABILITY=avx512` on an AVX2 host
reports AVX512, measured here) and its first AVX-512 kernel dies of an illegal instruction: so
the CPU's own flags decide, never torch's answer.
"""

from __future__ import annotations

import os
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


# The CPU flags each ONEDNN_MAX_CPU_ISA lets oneDNN's kernels use, of those ONEDNN_FEATURES asks
# about (oneDNN's cpu_isa_t names; a name not here, ALL and DEFAULT cap none of them)
_VNNI_BF16_FP16 = ("avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "avx_ne_convert")
ONEDNN_ISA_FLAGS: dict[str, frozenset[str]] = {
    name: frozenset(flags)
    for name, flags in {
        "SSE41": (),
        "AVX": (),
        "AVX2": (),
        "AVX2_VNNI": ("avx_vnni",),
        "AVX2_VNNI_2": ("avx_vnni", "avx_ne_convert"),
        "AVX512_CORE": ("avx512f",),
        "AVX512_CORE_VNNI": ("avx512f", "avx512_vnni"),
        "AVX512_CORE_BF16": ("avx512f", "avx512_vnni", "avx512_bf16"),
        "AVX512_CORE_FP16": _VNNI_BF16_FP16,
        "AVX10_1_512": _VNNI_BF16_FP16,
    }.items()
}
# a feature: (the CPU flags that give it, the flags oneDNN needs of them to run it)
ONEDNN_FEATURES = {
    "int8": (("avx512_vnni", "avx_vnni", "amx_int8"), ("avx512_vnni", "avx_vnni", "amx_int8")),
    "bf16": (("avx512_bf16", "amx_bf16"), ("avx512f",)),  # oneDNN computes bf16 from avx512_core up
    "f16": (("avx512_fp16", "amx_fp16"), ("avx512f",)),  # by analogy with bf16: not measured
}


def onednn_capped(feature: str, flags: frozenset[str] | None = None, environ=os.environ) -> str | None:
    """Why oneDNN's kernels here cannot run this CPU's `feature` (int8, bf16, f16), or None.

    `ONEDNN_MAX_CPU_ISA` caps oneDNN, but the frameworks above it (PyTorch, OpenVINO's CPU plugin)
    plan int8 ranges and bf16 graphs by the CPU itself. Measured on a Zen 4 (avx512_vnni,
    avx512_bf16): capped below its VNNI (AVX2, AVX2_VNNI, AVX512_CORE), torch._int_mm's int8
    products saturate (42,944 off) and OpenVINO's int8 convolutions are 21x their noise; capped below
    AVX512_CORE, OpenVINO's bf16 primitives fail to build. A CPU without those instructions gives
    neither: the frameworks see that it lacks them."""
    cap = environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    allowed = ONEDNN_ISA_FLAGS.get(cap)
    flags = cpu_flags() if flags is None else flags
    if allowed is None or not flags:
        return None
    gives, needs = ONEDNN_FEATURES[feature]
    has = [f for f in gives if f in flags]
    if not has or allowed & {f for f in needs if f in flags}:
        return None
    return (
        f"ONEDNN_MAX_CPU_ISA={cap} keeps oneDNN from this CPU's {feature} ({', '.join(has)}), which the runtime "
        f"still plans by: its {feature} kernels compute wrong or fail (unset it to judge this port)"
    )
