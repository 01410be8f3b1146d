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


def _kernels(product, p: torch.Tensor, q: torch.Tensor) -> list[str]:
    """The CUDA kernels one product launches: cuDNN's algorithm shows in their names (winograd, fft)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        product(p, q)
        torch.cuda.synchronize()
    return sorted({event.name[:90] for event in profile.events() if event.device_type.name == "CUDA"})


def main() -> None:
    generator = torch.Generator().manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    def same(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return F.conv2d(p, q, padding=1)

    products = {
        "cuBLAS matmul": (lambda p, q: p @ q, randn(256, 1024), randn(1024, 256)),
        "cuDNN conv2d": (F.conv2d, randn(4, 64, 16, 16), randn(32, 64, 3, 3)),
        # resnet18's own convolutions at 1x3x224x224: its stem, and layer1's and layer2's 3x3s
        "resnet18 conv1": (lambda p, q: F.conv2d(p, q, stride=2, padding=3), randn(1, 3, 224, 224), randn(64, 3, 7, 7)),
        "resnet18 layer1 3x3": (same, randn(1, 64, 56, 56), randn(64, 64, 3, 3) / 24),
        "resnet18 layer2 3x3": (same, randn(1, 128, 28, 28), randn(128, 128, 3, 3) / 34),
    }
    found: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for name, (product, p, q) in products.items():
        for tf32 in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
            gpu = product(p.cuda(), q.cuda()).cpu().double()
            mode = f"{name}, TF32 {'on' if tf32 else 'off'}"
            errors = {
                how: gpu - product(to_tf32(p, how).double(), to_tf32(q, how).double())
                for how in ("not rounded", "nearest even", "nearest, ties away", "truncated")
            }
            found[f"{mode}: max |GPU - float64 product|"] = {how: float(e.abs().max()) for how, e in errors.items()}
            found[f"{mode}: RMS"] = {how: float(e.square().mean().sqrt()) for how, e in errors.items()}
            found[f"{mode}: kernels"] = _kernels(product, p.cuda(), q.cuda())
    found["resnet18 forward, TF32 on: kernels"] = _resnet18_kernels()
    print(json.dumps(found, indent=1))


def _resnet18_kernels() -> list[str]:
    """The kernels of the zoo's resnet18 forward with TF32 on: which convolution algorithms cuDNN chose."""
    from accuracy.workflows.model.zoo import example_inputs, resnet18

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    model = resnet18().eval().cuda()
    x = torch.from_numpy(example_inputs("resnet18")["x"]).cuda()
    with torch.no_grad():
        model(x)
        return _kernels(lambda p, _: model(p), x, x)


if __name__ == "__main__":
    main()
