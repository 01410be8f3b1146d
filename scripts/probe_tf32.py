"""How CUDA's TF32 mode rounds float32 operands, for cuBLAS matmuls and cuDNN convolutions (the
model of accuracy.judge.torch_emulation and docs/gpu.md). Needs a CUDA device.

    python scripts/probe_tf32.py

Each product is computed on the GPU with TF32 off and on, and in float64 on the CPU from operands
rounded to TF32 three ways: to nearest even, to nearest with ties away, and truncated. The way whose
float64 product lies closest to the GPU's result (within float32 accumulation error) is the one
the GPU applies.
"""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F

DROPPED = 13  # float32 keeps 23 fraction bits, TF32 10


def to_tf32(t: torch.Tensor, how: str) -> torch.Tensor:
    bits = t.contiguous().view(torch.int32).to(torch.int64)
    half, mask = 1 << (DROPPED - 1), ~((1 << DROPPED) - 1)
    if how == "nearest even":
        bits = (bits + half - 1 + ((bits >> DROPPED) & 1)) & mask
    elif how == "nearest, ties away":
        bits = (bits + half) & mask
    elif how == "truncated":
        bits = bits & mask
    return bits.to(torch.int32).view(torch.float32)


def main() -> None:
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 1024, generator=generator), torch.randn(1024, 256, generator=generator)
    x, w = torch.randn(4, 64, 16, 16, generator=generator), torch.randn(32, 64, 3, 3, generator=generator)
    products = {"cuBLAS matmul": (lambda p, q: p @ q, a, b), "cuDNN conv2d": (F.conv2d, x, w)}
    found = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for name, (product, p, q) in products.items():
        for tf32 in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
            gpu = product(p.cuda(), q.cuda()).cpu().double()
            found[f"{name}, TF32 {'on' if tf32 else 'off'}: max |GPU - float64 product|"] = {
                how: float((gpu - product(to_tf32(p, how).double(), to_tf32(q, how).double())).abs().max())
                for how in ("not rounded", "nearest even", "nearest, ties away", "truncated")
            }
    print(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
