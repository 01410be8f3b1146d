"""Backends: how numpy arrays become a library's native arrays and back, and whether it is here.

An implementation in the registry is `fn(ns, **inputs)`, where `ns` is the backend's namespace
(the numpy, scipy or torch module): declarations stay one line and import nothing eagerly.
"""

from __future__ import annotations

import importlib
from contextlib import ExitStack, contextmanager
from functools import cache, cached_property, partial

import ml_dtypes
import numpy as np

from accuracy.dtypes import FloatFormat
from accuracy.errors import OpbenchError
from accuracy.threads import thread_limit


class Backend:
    """numpy: arrays pass through unchanged; results are cast back to the target dtype."""

    name = "numpy"
    device = "cpu"
    module = "numpy"

    def available(self) -> bool:
        try:
            self.namespace
        except ImportError:
            return False
        return True

    @cached_property
    def namespace(self):
        return importlib.import_module(self.module)

    def to_native(self, array: np.ndarray):
        return np.array(array, copy=True)

    def call(self, fn, inputs: dict):
        """Run an implementation `fn(ns, **inputs)` on native inputs."""
        return fn(self.namespace, **inputs)

    def to_numpy(self, value, fmt: FloatFormat) -> np.ndarray:
        return np.asarray(value).astype(fmt.np_dtype, copy=False)

    def synchronize(self) -> None:
        """Wait for queued device work; a no-op on the CPU."""

    def thread_limit(self, n: int):
        """A context that runs the block with `n` threads in every pool this backend uses."""
        return thread_limit(n)


class ScipyBackend(Backend):
    name = "scipy"
    module = "scipy"

    @cached_property
    def namespace(self):
        scipy = importlib.import_module("scipy")
        for sub in ("special", "linalg", "linalg.blas", "signal", "fft"):
            importlib.import_module(f"scipy.{sub}")
        return scipy


class TorchBackend(Backend):
    """torch on a device; bfloat16 crosses the boundary bit for bit through an int16 view."""

    module = "torch"

    def __init__(self, device: str = "cpu"):
        self.device = device
        self.name = "torch" if device == "cpu" else f"torch-{device}"

    def available(self) -> bool:
        if not super().available():
            return False
        return self.device == "cpu" or self.namespace.cuda.is_available()

    def to_native(self, array: np.ndarray):
        torch = self.namespace
        if array.dtype == ml_dtypes.bfloat16:
            tensor = torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
        else:
            tensor = torch.from_numpy(np.array(array, copy=True))
        return tensor.to(self.device)

    def to_numpy(self, value, fmt: FloatFormat) -> np.ndarray:
        torch = self.namespace
        tensor = torch.as_tensor(value).detach().to("cpu").to(getattr(torch, fmt.name))
        if fmt.name == "bfloat16":
            return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return tensor.numpy()

    def synchronize(self) -> None:
        if self.device != "cpu":
            self.namespace.cuda.synchronize()


class TorchCompileBackend(TorchBackend):
    """torch.compile (inductor) on the CPU: each implementation is compiled once per process.

    The first call compiles; every timing warms up first (asv's warmup for time_op, an explicit
    call in track_gflops), so compile time never enters a timing.
    """

    def __init__(self):
        super().__init__("cpu")
        self.name = "torch-compile"
        self._compiled: dict = {}

    def call(self, fn, inputs: dict):
        if fn not in self._compiled:
            config = importlib.import_module("torch._dynamo.config")
            # one process may see an op at many dtypes, sizes and thread counts (explain, tests);
            # past dynamo's limit it would silently run eager, so allow more and fail loudly after
            config.recompile_limit = max(config.recompile_limit, 64)
            config.fail_on_recompile_limit_hit = True
            self._compiled[fn] = self.namespace.compile(partial(fn, self.namespace), dynamic=False)
        return self._compiled[fn](**inputs)


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


class BlasBackend(Backend):
    """One CBLAS library loaded by path (accuracy.blas); its namespace is the Provider itself."""

    def __init__(self, provider):
        self.provider = provider
        self.name = f"blas-{provider.name}"

    def available(self) -> bool:
        return True

    @property
    def namespace(self):
        return self.provider

    def thread_limit(self, n: int):
        @contextmanager
        def both():
            with ExitStack() as stack:
                stack.enter_context(thread_limit(n))
                stack.enter_context(self.provider.threads(n))
                yield

        return both()


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend(),
        ScipyBackend(),
        TorchBackend("cpu"),
        TorchBackend("cuda"),
        TorchCompileBackend(),
        TorchCudaModeBackend("torch-cuda-tf32", {"cuda.matmul.allow_tf32": True, "cudnn.allow_tf32": True}),
        TorchCudaModeBackend("torch-cuda-reduced-reduction", {
            "cuda.matmul.allow_fp16_reduced_precision_reduction": True,
            "cuda.matmul.allow_bf16_reduced_precision_reduction": True,
        }),
    )
}
# Extra backends a torch implementation may opt into with Impl(also=...): compiled, and the
# tensor-core math modes (TF32 for float32, reduced-precision reductions for float16/bfloat16).
TORCH_VARIANTS = ("torch-compile", "torch-cuda-tf32", "torch-cuda-reduced-reduction")


@cache
def blas_discovery():
    """Every BLAS library found on this machine (loaded once per process); failures are listed."""
    from accuracy.blas import discover_providers

    return discover_providers()


@cache
def blas_backends() -> dict[str, BlasBackend]:
    backends = (BlasBackend(p) for p in blas_discovery().providers.values())
    return {b.name: b for b in backends}


def backends_for(name: str) -> list[str]:
    """A declared backend's concrete instances: 'blas' is one per BLAS provider, 'torch' is
    the CPU and (where present) CUDA."""
    if name == "blas":
        return sorted(blas_backends())
    return ["torch", "torch-cuda"] if name == "torch" else [name]


def get_backend(name: str) -> Backend:
    if name in BACKENDS:
        return BACKENDS[name]
    if name.startswith("blas-") and name in blas_backends():
        return blas_backends()[name]
    known = ", ".join([*BACKENDS, *blas_backends()])
    raise OpbenchError(f"unknown backend {name!r}; choose from {known}")
