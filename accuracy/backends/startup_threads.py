"""Frameworks whose thread pools are sized once, when their runtime starts (TensorFlow, XLA).

Such a backend starts its runtime in this process at the first thread count it is asked for.
Just before, it forks a spare copy of the process (the "zygote": the framework imported, its
runtime not started). A call at another count goes to a worker that the zygote forks and that
starts its runtime at that count; it gets the same rounded inputs through a pipe and sends the
output back, and stays for later calls at that count. Forking is cheap where starting a fresh
interpreter is not (importing TensorFlow takes seconds).

The asv suite asks each benchmark process for one count, so its timings always run in-process;
only the 1-vs-n-threads track uses a worker. `opbench explain`, which times nothing, forks the
zygote before the framework is imported (`in_background`): the zygote imports it on another core
while explain goes on with the other frameworks, and every call at every count goes to a worker.
That zygote and its workers stay for the process's next such block, which would otherwise
import the framework again, and end with the process.
Importing the framework starts no runtime (no thread pool, no XLA client), so these modules
may be imported before asv's forkserver forks (see `preload`); the runtime starts in the child.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import os
import pickle
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cached_property, partial

import numpy as np

from accuracy.backends.base import ThreadsPerCall
from accuracy.core.threads import all_cores

PARENT_CHECK_S = 1.0  # how often an idle forked child checks that its parent is still there


class Deferred:
    """A rounded input whose framework tensor is made on first use, after the runtime started."""

    __slots__ = ("array", "tensor")

    def __init__(self, array: np.ndarray):
        self.array = array
        self.tensor = None


class StartupThreadsBackend(ThreadsPerCall):
    """Subclasses give `modules` (all must be importable), `start(threads)`, `to_tensor` and `run`."""

    modules: tuple[str, ...] = ()
    threads_note = "thread pools sized at runtime start: other thread counts run in a forked worker process"

    def __init__(self):
        self.started_threads: int | None = None  # the count this process's runtime started at
        self._zygote: _Zygote | None = None
        self._background: _Zygote | None = None  # while set, every call goes to this zygote's workers
        self._kept: _Zygote | None = None  # the zygote forked before the import, kept for the next block
        # a scan runs chunks on several threads: one of them starts the runtime and forks the zygote
        self._starting = threading.Lock()

    def available(self) -> bool:
        """Whether the framework is installed; found without importing it (absent is never an error)."""
        return all(importlib.util.find_spec(m) is not None for m in self.modules)

    @cached_property
    def namespace(self):
        return importlib.import_module(self.module)

    def preload(self) -> None:
        """Import the framework (seconds for TensorFlow) without starting its runtime: safe
        before a fork, so asv's forkserver pays the import once for every benchmark process."""
        self.namespace  # noqa: B018  the cached property imports the framework

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

    def ensure_started(self) -> None:
        """Start the runtime at the requested count, unless it runs already. Code that runs the
        framework outside a backend call (a Keras model being built) calls this first: a runtime
        started there would keep the framework's default pools, which no later call can resize."""
        with self._starting:
            if self.started_threads is None:
                self.preload()
                self._zygote = _Zygote(self)
                threads = self.requested_threads or all_cores()
                self.start(threads)
                self.started_threads = threads

    @contextmanager
    def in_background(self) -> Iterator[bool]:
        """Run the block's calls in the workers of a zygote that imports the framework, forked now
        (or kept from an earlier block): the import (seconds for TensorFlow) then costs no wall
        time where the caller has other work to do first and a core is free. Yields False,
        changing nothing, where the framework is imported in this process already (a call here is
        cheaper then) or there is one core."""
        with self._starting:
            started = self._background is None and self.module not in sys.modules and all_cores() >= 2
            if started:
                if self._kept is None or not self._kept.alive():
                    self._kept = _Zygote(self, import_first=True)
                    atexit.register(self._kept.close)
                self._background = self._kept
        try:
            yield started
        finally:
            if started:
                with self._starting:
                    self._background = None

    def call(self, fn, inputs: dict):
        threads = self.requested_threads or all_cores()
        if self._background is not None:
            return self._background.call(threads, fn, {k: v.array for k, v in inputs.items()})
        self.ensure_started()
        if threads != self.started_threads:
            assert self._zygote is not None  # forked when the runtime started
            return self._zygote.call(threads, fn, {k: v.array for k, v in inputs.items()})
        for value in inputs.values():
            if value.tensor is None:
                value.tensor = self.to_tensor(value.array)
        return self.run(fn, {k: v.tensor for k, v in inputs.items()})

    def to_numpy(self, value, fmt) -> np.ndarray:
        return np.asarray(value).astype(fmt.np_dtype, copy=False)


# A worker gets the function to run through a pipe, pickled. The catalog's functions are lambdas, which
# pickle cannot carry: the catalog (a layer above, which backends never import) adds a namer that gives
# such a function as (finder, args), both picklable by reference, with finder(*args) the function again.
FunctionNamer = Callable[[Callable], "tuple[Callable, tuple] | None"]
_namers: list[FunctionNamer] = []


def add_function_namer(namer: FunctionNamer) -> None:
    """Let worker processes find the unpicklable functions `namer` knows (it returns None for others)."""
    _namers.append(namer)


def _function_key(fn: Callable) -> tuple:
    """How a worker gets `fn`: (finder, args) from a namer, else the function itself, pickled."""
    for namer in _namers:
        named = namer(fn)
        if named is not None:
            return ("named", *named)
    return ("pickled", fn)


def _resolve(key: tuple) -> Callable:
    if key[0] == "pickled":
        return key[1]
    _, finder, args = key
    return finder(*args)


class _Channel:
    """Pickled messages over a pair of pipes, one request and its reply at a time.

    The end a forked child reads from also watches the child's parent (`parent`, its pid): a fork
    copies every open pipe end into the child, so another child forked beside it may hold the
    write end this child reads, and then EOF never comes when the parent exits (two zygotes forked
    at once did so, and kept `opbench scan ... | cat` waiting for ever). A child leaves within
    PARENT_CHECK_S of its parent, whoever holds its pipes.
    """

    def __init__(self, read_fd: int, write_fd: int, parent: int | None = None):
        self.reader = os.fdopen(read_fd, "rb")
        self.writer = os.fdopen(write_fd, "wb")
        self.parent = parent

    def send(self, message) -> None:
        pickle.dump(message, self.writer)
        self.writer.flush()

    def receive(self):
        # nothing is left in the reader's buffer between messages (request, then reply), so the pipe
        # itself says whether one is coming
        while self.parent is not None and not select.select([self.reader], [], [], PARENT_CHECK_S)[0]:
            if os.getppid() != self.parent:
                raise EOFError("the parent process exited")
        return pickle.load(self.reader)


def _fork(child) -> tuple[int, _Channel]:
    """Fork a process that runs `child(channel)` and exits; the parent gets the other end."""
    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(down_w)
        os.close(up_r)
        try:
            child(_Channel(down_r, up_w, parent=os.getppid()))
        finally:
            os._exit(0)
    os.close(down_r)
    os.close(up_w)
    return pid, _Channel(up_r, down_w)


class _Zygote:
    """A fork of the process taken before its runtime started; it forks one worker per count.
    With `import_first`, forked before the framework is imported too, which it imports at once."""

    def __init__(self, backend: StartupThreadsBackend, import_first: bool = False):
        self.backend = backend
        self.import_first = import_first
        self.owner = os.getpid()
        self.reaped = False
        self.pid, self.channel = _fork(self._serve)
        self._turn = threading.Lock()  # one request and its reply at a time, whichever thread asks

    def alive(self) -> bool:
        """Whether it runs; reaps it if it ended, after which its pid may be another process's."""
        if not self.reaped and os.waitpid(self.pid, os.WNOHANG) != (0, 0):
            self.reaped = True
        return not self.reaped

    def close(self) -> None:
        """End the zygote, whatever it is doing (an import nobody waits for), and reap it; its
        workers leave on EOF, or within PARENT_CHECK_S where another child holds their pipe. Only
        from the process that forked it (a fork of that process inherits the exit handler)."""
        if os.getpid() != self.owner:
            return
        with self._turn:
            self.channel.writer.close()
            self.channel.reader.close()
            if self.alive():  # never a signal to a pid that was reaped, and so may be reused
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                self.reaped = True

    def call(self, threads: int, fn, arrays: dict) -> np.ndarray:
        try:
            with self._turn:
                self.channel.send((threads, _function_key(fn), arrays))
                ok, value = self.channel.receive()
        except EOFError:
            raise RuntimeError(f"{self.backend.name} worker process exited") from None
        if not ok:
            raise RuntimeError(value)
        return value

    def _serve(self, parent: _Channel) -> None:
        self.backend._starting = threading.Lock()  # forked while the parent's starting thread held it
        self.backend._background = self.backend._kept = None  # this process and its workers run the calls themselves
        failed = ""
        if self.import_first:
            try:
                self.backend.preload()
            except Exception as exc:  # said in reply to every call, as a failing call says it
                failed = f"{type(exc).__name__}: {exc}"
        workers: dict[int, _Channel] = {}
        while True:
            try:
                threads, key, arrays = parent.receive()
            except EOFError:
                return  # the parent exited or closed: so do its workers, on EOF
            if failed:
                parent.send((False, failed))
                continue
            if threads not in workers:
                workers[threads] = _fork(partial(self._work, threads))[1]
            workers[threads].send((key, arrays))
            parent.send(workers[threads].receive())

    def _work(self, threads: int, channel: _Channel) -> None:
        backend = self.backend
        backend.started_threads = None
        with backend.thread_limit(threads):
            backend.start(threads)
            backend.started_threads = threads
            while True:
                try:
                    key, arrays = channel.receive()
                except EOFError:
                    return
                reply: tuple[bool, np.ndarray | str]
                try:
                    with np.errstate(all="ignore"):
                        reply = (
                            True,
                            np.asarray(backend.call(_resolve(key), {k: Deferred(v) for k, v in arrays.items()})),
                        )
                except Exception as exc:  # reported in the parent, which has the context
                    reply = (False, f"{type(exc).__name__}: {exc}")
                channel.send(reply)
