"""Backends: how numpy arrays become a library's native arrays and back, and whether it is here.

An implementation in the registry is `fn(ns, **inputs)`, where `ns` is the backend's namespace
(the numpy, scipy or torch module): declarations stay one line and import nothing eagerly.
"""

from __future__ import annotations

import importlib
from functools import cached_property

import ml_dtypes
import numpy as np

from accuracy.dtypes import FloatFormat
from accuracy.errors import OpbenchError


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


BACKENDS: dict[str, Backend] = {
    b.name: b for b in (Backend(), ScipyBackend(), TorchBackend("cpu"), TorchBackend("cuda"))
}


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise OpbenchError(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}") from None
