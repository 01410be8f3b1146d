"""The numpy backend, which every other backend extends, and scipy.

An implementation in the registry is `fn(ns, **inputs)`, where `ns` is the backend's namespace
(the numpy, scipy or torch module): declarations stay one line and import nothing eagerly.
"""

from __future__ import annotations

import importlib
import importlib.util
from contextlib import contextmanager
from functools import cached_property
from typing import Any

import numpy as np

from accuracy.core.dtypes import ALL_DTYPES, FloatFormat
from accuracy.core.threads import thread_limit


class Backend:
    """numpy: arrays pass through unchanged; results are cast back to the target dtype."""

    name = "numpy"
    device = "cpu"
    module = "numpy"
    threads_note = ""  # how another thread count is reached, where it is not set in this process
    # The facts the catalog and the fingerprint read from a backend (lists of frameworks, dtypes per
    # framework) are attributes here, so each is stated once and every list is derived from them.
    framework = ""  # the ML framework whose own kernels this is, beside torch (e.g. "onnxruntime")
    dtypes: tuple[str, ...] = ALL_DTYPES  # the dtypes its kernels run on the CPU
    # the float32 matmul/conv precision it defaults to on an NVIDIA GPU (Ampere or newer); data for
    # the reader, since every framework here runs on the CPU, where it computes in the storage dtype
    gpu_float32: str = ""

    def info(self) -> dict[str, Any]:
        """What the environment fingerprint records of the framework (versions, devices, ...)."""
        return {}

    def available(self) -> bool:
        """Whether the library is installed, found without importing it: `opbench list` and the
        suite's discovery ask every backend, and importing torch alone takes seconds."""
        return importlib.util.find_spec(self.module) is not None

    @cached_property
    def namespace(self):
        return importlib.import_module(self.module)

    def preload(self) -> None:
        """Import, before asv's forkserver forks the benchmark processes, what each of them would
        otherwise import for itself; only what is safe to fork (modules, never thread pools).
        `asv run --quick` times one call, so a first call that imports would be timed."""
        self.namespace  # noqa: B018 - importing is the point

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


class ThreadsPerCall(Backend):
    """A backend that sizes its threads where it runs (an ONNX Runtime session, a runtime's start),
    not through a process-wide knob: `thread_limit` records the count its calls then read."""

    requested_threads: int | None = None  # None: every core

    @contextmanager
    def thread_limit(self, n: int):
        previous, self.requested_threads = self.requested_threads, n
        try:
            yield
        finally:
            self.requested_threads = previous


class ScipyBackend(Backend):
    name = "scipy"
    module = "scipy"

    @cached_property
    def namespace(self):
        """scipy with the submodules the catalog's implementations call. Not scipy.signal, which
        none calls and which imports scipy.stats and parses hundreds of docstrings (0.8 CPU-s of
        every asv forkserver that preloads scipy, and of every process that runs a scipy op)."""
        scipy = importlib.import_module("scipy")
        for sub in ("special", "linalg", "linalg.blas", "fft"):
            importlib.import_module(f"scipy.{sub}")
        return scipy


BACKENDS = [Backend(), ScipyBackend()]
