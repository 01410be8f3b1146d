"""torch on the CPU, torch.compile, and torch on CUDA with its math modes (TF32, reduced-precision
reductions) as backends of their own, so each shows its own error against the same bound.
"""

from __future__ import annotations

import importlib
import os
import threading
from contextlib import contextmanager
from functools import partial

import ml_dtypes
import numpy as np

from accuracy.backends.base import Backend
from accuracy.core.dtypes import FloatFormat

GPU_DRIVERS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/kfd")  # where a CUDA (or ROCm) device can exist


def torch_dtype(fmt: FloatFormat):
    """torch's dtype of a float format (torch names them as opbench does: torch.bfloat16, ...)."""
    import torch

    return getattr(torch, fmt.name)


def tensor_to_numpy(tensor) -> np.ndarray:
    """A torch tensor's values on the CPU as numpy holds them, bit for bit: numpy has no bfloat16,
    so a bfloat16 tensor's bits cross as int16 and come back as ml_dtypes' bfloat16."""
    import torch

    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


class TorchBackend(Backend):
    """torch on a device; bfloat16 crosses the boundary bit for bit through an int16 view."""

    module = "torch"

    def __init__(self, device: str = "cpu"):
        self.device = device
        self.name = "torch" if device == "cpu" else f"torch-{device}"

    def available(self) -> bool:
        if not super().available():
            return False
        # torch is imported to ask for a GPU only where a GPU driver is loaded (NVIDIA's, or ROCm's)
        return self.device == "cpu" or (any(map(os.path.exists, GPU_DRIVERS)) and self.namespace.cuda.is_available())

    def to_native(self, array: np.ndarray):
        torch = self.namespace
        if array.dtype == ml_dtypes.bfloat16:
            tensor = torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
        else:
            tensor = torch.from_numpy(np.array(array, copy=True))
        return tensor.to(self.device)

    def to_numpy(self, value, fmt: FloatFormat) -> np.ndarray:
        return tensor_to_numpy(self.namespace.as_tensor(value).detach().cpu().to(torch_dtype(fmt)))

    def synchronize(self) -> None:
        if self.device != "cpu":
            self.namespace.cuda.synchronize()

    @contextmanager
    def thread_limit(self, n: int):
        """threadpoolctl's pools and torch's own intra-op pool, which threadpoolctl cannot see."""
        torch = self.namespace
        previous = torch.get_num_threads()
        with super().thread_limit(n):
            torch.set_num_threads(n)
            try:
                yield
            finally:
                torch.set_num_threads(previous)


class TorchCompileBackend(TorchBackend):
    """torch.compile (inductor) on the CPU: each implementation is compiled once per process.

    The first call compiles; every timing warms up first (asv's warmup for time_op, an explicit
    call in track_gflops), so compile time never enters a timing.

    Inductor's FX graph cache (on disk, shared by every process of the user) keys a compiled
    kernel without ATen's dispatch level: a graph compiled at AVX-512 and loaded again under
    `ATEN_CPU_CAPABILITY=avx2` summed 1000 floats to 17.19, not 28.92 (torch 2.13, Zen 4). Each
    call tags the cache key with the level (torch.compiler.config.cache_key_tag, kept after the
    user's own tag and restored after the call).
    """

    def __init__(self):
        super().__init__("cpu")
        self.name = "torch-compile"
        self._compiled: dict = {}
        # A scan calls from two threads at once: dynamo's first import then deadlocked on its module
        # lock, and its compile caches are not documented thread-safe. One call at a time.
        self._one_at_a_time = threading.Lock()

    def call(self, fn, inputs: dict):
        with self._one_at_a_time:
            if fn not in self._compiled:
                config = importlib.import_module("torch._dynamo.config")
                # one process may see an op at many dtypes, sizes and thread counts (explain, tests);
                # past dynamo's limit it would silently run eager, so allow more and fail loudly after.
                # The count is per code object, and every compiled partial shares dynamo's wrapper
                # (external_utils `inner`): the limit covers all ops of the process together
                config.recompile_limit = max(config.recompile_limit, 512)  # type: ignore[attr-defined]  # torch._dynamo.config sets its attributes at import
                config.fail_on_recompile_limit_hit = True  # type: ignore[attr-defined]
                self._compiled[fn] = self.namespace.compile(partial(fn, self.namespace), dynamic=False)
            with _cache_keyed_by_dispatch_level():
                return self._compiled[fn](**inputs)


def _cache_keyed_by_dispatch_level():
    import torch

    config = torch.compiler.config
    return config.patch(cache_key_tag=f"{config.cache_key_tag}opbench-aten-{torch.backends.cpu.get_cpu_capability()}")


class TorchCudaModeBackend(TorchBackend):
    """torch on CUDA with global math-mode flags set around each call (TF32, reduced reductions).

    These modes trade accuracy for speed on tensor cores; as their own backends they show up
    as separate implementations with their own error against the same bound.
    """

    def __init__(self, name: str, flags: dict[str, bool]):
        super().__init__("cuda")
        self.name = name
        self.flags = flags  # "module.attr" under torch.backends -> value

    @contextmanager
    def math_mode(self):
        targets = []
        for path, value in self.flags.items():
            owner_path, attr = path.rsplit(".", 1)
            owner = self.namespace.backends
            for part in owner_path.split("."):
                owner = getattr(owner, part)
            targets.append((owner, attr, getattr(owner, attr)))
            setattr(owner, attr, value)
        try:
            yield
        finally:
            for owner, attr, previous in targets:
                setattr(owner, attr, previous)

    def call(self, fn, inputs: dict):
        with self.math_mode():
            return super().call(fn, inputs)


BACKENDS = [
    TorchBackend("cpu"),
    TorchBackend("cuda"),
    TorchCompileBackend(),
    TorchCudaModeBackend("torch-cuda-tf32", {"cuda.matmul.allow_tf32": True, "cudnn.allow_tf32": True}),
    TorchCudaModeBackend(
        "torch-cuda-reduced-reduction",
        {
            "cuda.matmul.allow_fp16_reduced_precision_reduction": True,
            "cuda.matmul.allow_bf16_reduced_precision_reduction": True,
        },
    ),
]
# Extra backends a torch implementation may opt into with Impl(also=...): compiled, and the
# tensor-core math modes (TF32 for float32, reduced-precision reductions for float16/bfloat16).
TORCH_VARIANTS = ("torch-compile", "torch-cuda-tf32", "torch-cuda-reduced-reduction")
