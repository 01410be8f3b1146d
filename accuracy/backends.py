"""Backends: how numpy arrays become a library's native arrays and back, and whether it is here.

An implementation in the registry is `fn(ns, **inputs)`, where `ns` is the backend's namespace
(the numpy, scipy or torch module): declarations stay one line and import nothing eagerly.
"""

from __future__ import annotations

import importlib
from contextlib import ExitStack, contextmanager
from functools import cache, cached_property

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
    b.name: b for b in (Backend(), ScipyBackend(), TorchBackend("cpu"), TorchBackend("cuda"))
}


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
    """A declared backend's concrete instances: 'blas' means one backend per BLAS provider."""
    return sorted(blas_backends()) if name == "blas" else [name]


def get_backend(name: str) -> Backend:
    if name in BACKENDS:
        return BACKENDS[name]
    if name.startswith("blas-") and name in blas_backends():
        return blas_backends()[name]
    known = ", ".join([*BACKENDS, *blas_backends()])
    raise OpbenchError(f"unknown backend {name!r}; choose from {known}")
