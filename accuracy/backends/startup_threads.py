"""Frameworks whose thread pools are sized once, when their runtime starts (TensorFlow, XLA).

Such a backend starts its runtime in this process at the first thread count it is asked for.
A call at another count runs in a worker: a fresh interpreter started at that count (one per
count, kept while this process lives) that gets the same rounded inputs through a pipe and
sends the framework's output back. The asv suite asks each benchmark process for one count, so
its timings always run in-process; `opbench explain`'s 1-vs-all-threads check uses a worker.

Importing the framework starts no runtime (no thread pool, no XLA client), so the modules may
be imported before asv's forkserver forks; only the first call starts the runtime, in the child.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import os
import pickle
import subprocess
import sys
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path

import numpy as np

from accuracy.backends.base import Backend
from accuracy.threads import all_cores

THREADS_VAR = "OPBENCH_STARTUP_THREADS"  # a worker's thread count, read before its runtime starts


class Deferred:
    """A rounded input whose framework tensor is made on first use, after the runtime started."""

    __slots__ = ("array", "tensor")

    def __init__(self, array: np.ndarray):
        self.array = array
        self.tensor = None


class StartupThreadsBackend(Backend):
    """Subclasses give `modules` (all must be importable), `start(threads)` and `run(fn, tensors)`."""

    modules: tuple[str, ...] = ()

    def __init__(self):
        self.started_threads: int | None = None  # the count this process's runtime was started at
        self._wanted: int | None = None
        self._workers: dict[int, _Worker] = {}

    def available(self) -> bool:
        """Whether the framework is installed; found without importing it (absent is never an error)."""
        return all(importlib.util.find_spec(m) is not None for m in self.modules)

    @cached_property
    def namespace(self):
        return importlib.import_module(self.module)

    def start(self, threads: int) -> None:
        """Configure the framework's thread pools; called once, before its first op."""
        raise NotImplementedError

    def to_tensor(self, array: np.ndarray):
        raise NotImplementedError

    def run(self, fn, tensors: dict):
        """Run `fn` on framework tensors and return the finished result."""
        raise NotImplementedError

    def to_native(self, array: np.ndarray):
        return Deferred(np.array(array, copy=True))

    def thread_limit(self, n: int):
        @contextmanager
        def wanted():
            previous, self._wanted = self._wanted, n
            try:
                yield
            finally:
                self._wanted = previous

        return wanted()

    def call(self, fn, inputs: dict):
        threads = self._wanted or all_cores()
        if self.started_threads is None:
            self.start(threads)
            self.started_threads = threads
        if threads != self.started_threads:
            return self._worker(threads).call(fn, {k: v.array for k, v in inputs.items()})
        for value in inputs.values():
            if value.tensor is None:
                value.tensor = self.to_tensor(value.array)
        return self.run(fn, {k: v.tensor for k, v in inputs.items()})

    def to_numpy(self, value, fmt) -> np.ndarray:
        return np.asarray(value).astype(fmt.np_dtype, copy=False)

    def _worker(self, threads: int) -> _Worker:
        if threads not in self._workers:
            self._workers[threads] = _Worker(self.name, threads)
        return self._workers[threads]


def _impl_key(fn):
    """How a worker finds `fn`: registry lambdas by (op, backend, variant); anything else pickled."""
    from accuracy.registry import all_ops

    for op in all_ops():
        for impl in op.impls:
            if impl.fn is fn:
                return ("registry", op.name, impl.backend, impl.variant)
    return ("pickled", fn)


def _resolve(key):
    if key[0] == "pickled":
        return key[1]
    from accuracy.registry import get_op

    _, op_name, backend, variant = key
    return next(i.fn for i in get_op(op_name).impls if (i.backend, i.variant) == (backend, variant))


class _Worker:
    """A fresh interpreter whose framework runtime starts at `threads`; requests are pickled."""

    def __init__(self, backend_name: str, threads: int):
        root = str(Path(__file__).resolve().parents[2])  # the tree this accuracy package came from
        env = dict(os.environ, **{THREADS_VAR: str(threads)})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen(
            [sys.executable, "-c", f"from {__name__} import serve; serve({backend_name!r})"], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        atexit.register(self.close)

    def call(self, fn, arrays: dict) -> np.ndarray:
        pickle.dump((_impl_key(fn), arrays), self.process.stdin)
        self.process.stdin.flush()
        try:
            ok, value = pickle.load(self.process.stdout)
        except EOFError:
            raise RuntimeError(f"worker process exited with status {self.process.wait()}") from None
        if not ok:
            raise RuntimeError(value)
        return value

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait()


def serve(backend_name: str) -> None:
    """A worker's loop: the protocol owns the real stdout; anything the framework prints goes to stderr."""
    from accuracy.backends import get_backend

    channel_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    channel_in = sys.stdin.buffer
    backend = get_backend(backend_name)
    with backend.thread_limit(int(os.environ[THREADS_VAR])):
        while True:
            try:
                key, arrays = pickle.load(channel_in)
            except EOFError:
                return
            try:
                with np.errstate(all="ignore"):
                    out = np.asarray(backend.call(_resolve(key), {k: Deferred(v) for k, v in arrays.items()}))
                reply = (True, out)
            except Exception as exc:  # reported in the parent, which has the context
                reply = (False, f"{type(exc).__name__}: {exc}")
            pickle.dump(reply, channel_out)
            channel_out.flush()
