"""oneDNN's cap below the CPU's int8 and bf16 instructions.

ONEDNN_MAX_CPU_ISA lowers oneDNN alone: PyTorch and OpenVINO above it still plan int8 and bf16 by
the CPU. The probe says where that leaves a runtime wrong; the last test measures it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from accuracy.backends import cpu_levels

ZEN3 = frozenset({"avx2", "fma"})
ZEN4 = frozenset({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16"})
SAPPHIRE_RAPIDS = ZEN4 | {"avx512_fp16", "avx_vnni", "amx_int8", "amx_bf16", "amx_tile"}


@pytest.mark.parametrize(
    ("flags", "cap", "capped"),
    [
        (ZEN4, None, set()),
        (ZEN4, "ALL", set()),
        (ZEN4, "AVX2", {"int8", "bf16"}),  # measured: torch._int_mm saturates, OpenVINO bf16 fails to build
        (ZEN4, "avx2", {"int8", "bf16"}),  # oneDNN reads the name in any case
        (ZEN4, "AVX2_VNNI", {"int8", "bf16"}),  # a Zen 4 has no VEX VNNI: oneDNN runs AVX2
        (ZEN4, "AVX512_CORE", {"int8"}),  # measured: OpenVINO bf16 builds, int8 saturates
        (ZEN4, "AVX512_CORE_VNNI", set()),  # measured: both right
        (ZEN3, "AVX2", set()),  # a CPU without VNNI or bf16 loses nothing
        (ZEN3, "SSE41", set()),
        (SAPPHIRE_RAPIDS, "AVX2_VNNI", {"bf16", "f16"}),  # its VEX VNNI stays
        (SAPPHIRE_RAPIDS, "AVX512_CORE", {"int8"}),
        (SAPPHIRE_RAPIDS, "AVX10_1_512", set()),
        (ZEN4, "A_NAME_ONEDNN_DOES_NOT_KNOW", set()),  # no claim on what is not known
    ],
)
def test_onednn_capped_below_the_cpu_names_what_it_takes_away(flags, cap, capped):
    environ = {} if cap is None else {"ONEDNN_MAX_CPU_ISA": cap}
    found = {f for f in ("int8", "bf16", "f16") if cpu_levels.onednn_capped(f, flags, environ)}
    assert found == capped
    for feature in found:
        reason = cpu_levels.onednn_capped(feature, flags, environ)
        assert reason is not None and f"ONEDNN_MAX_CPU_ISA={cap.upper()}" in reason and feature in reason


INT_MM = """
import torch
g = torch.Generator().manual_seed(60)
a = torch.randint(-128, 128, (32, 64), dtype=torch.int8, generator=g)
b = torch.randint(-128, 128, (64, 32), dtype=torch.int8, generator=g)
print(int((torch._int_mm(a, b).long() - a.long() @ b.long()).abs().max()))
"""


@pytest.mark.slow
def test_torch_int8_products_are_wrong_exactly_where_the_probe_says_onednn_is_capped():
    """On a CPU with VNNI: capped to AVX2, torch._int_mm's products saturate (42,944 off on a Zen 4);
    capped at the CPU's VNNI level, or not at all, they are exact."""
    flags = cpu_levels.cpu_flags() or frozenset()
    if not flags & {"avx512_vnni", "avx_vnni", "amx_int8"}:
        pytest.skip("needs a CPU with VNNI (avx512_vnni, avx_vnni or amx_int8): without it nothing is capped away")
    vnni_level = "AVX512_CORE_VNNI" if "avx512_vnni" in flags else "AVX2_VNNI"
    for cap in ("AVX2", vnni_level, None):
        env = {k: v for k, v in os.environ.items() if k != "ONEDNN_MAX_CPU_ISA"}
        env |= {"ONEDNN_MAX_CPU_ISA": cap} if cap else {}
        done = subprocess.run([sys.executable, "-c", INT_MM], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        capped = cpu_levels.onednn_capped("int8", flags, env)
        assert (int(done.stdout) > 1000) == (capped is not None), (cap, int(done.stdout))
