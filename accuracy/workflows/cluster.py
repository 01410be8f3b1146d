"""Where a workflow's independent work items run: this process's thread pool, or a Dask cluster.

Scans, self-tests and model sweeps are embarrassingly parallel. `work_pool(None, threads)` is the
in-process default; `work_pool("local:N")` starts a `distributed.LocalCluster` of N one-thread
worker processes, and `work_pool("tcp://HOST:PORT")` joins a running scheduler. Every pool hands
back futures the caller collects in submission order, so results never depend on where or in
which order the items ran.

A fleet with mixed library versions or CPU dispatch would merge incomparable numbers, so each
worker's numerical stack is compared with this process's before any work is sent.

A worker holds the thread limits its tasks ask for for the rest of its life (`thread_limits` with
`for_life`): entering and leaving them in every task cost ~9 ms a task on a worker, since
threadpoolctl reads every loaded shared library each time.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext, suppress
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Protocol

from accuracy.core.errors import OpbenchError

LOCAL_PREFIX = "local:"
PRELOAD_VAR = "OPBENCH_WORKER_PRELOAD"  # the backends worker_preload loads, comma-separated
CONNECT_TIMEOUT_S = 20
POLL_S = 1.0  # how often a wait for a result looks whether the cluster still has workers
NO_WORKERS_WAIT_S = 60  # a cluster without workers this long has lost them (a restart takes seconds)
# The packages whose versions change a number opbench reports; a worker must match all of them.
STACK_PACKAGES = (
    "opbench",
    "numpy",
    "scipy",
    "torch",
    "ml_dtypes",
    "mpmath",
    "tensorflow-cpu",
    "onnxruntime",
    "jax",
    "jaxlib",
)


class ClusterLost(OpbenchError):
    """The scheduler went away mid-run: the caller keeps what it merged and ends with one line."""


_interrupted = threading.Event()  # Ctrl-C came while a cluster was in use
# What the fork server was started with (environment, working directory, import path): its
# workers have these, not this process's, so a server an earlier command started (another
# OPBENCH_CACHE, ATEN_CPU_CAPABILITY, preload list, directory) is replaced, not reused.
_server_started_with: tuple | None = None


@contextmanager
def _ctrl_c_remembered() -> Iterator[None]:
    """Ctrl-C only remembered while a cluster is in use, and raised as KeyboardInterrupt where this
    process waits (for the cluster to start, for a result: at most POLL_S later). Raised at once,
    it landed in whatever code ran: in Dask's cluster start-up it left half a cluster, whose
    closing at exit printed a traceback, and in a gc callback of Dask's it was swallowed
    ("Exception ignored in ..."), so the sweep went on and waited a minute for workers."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        yield  # a process started in the background, with SIGINT ignored, keeps ignoring it
        return
    _interrupted.clear()
    before = signal.signal(signal.SIGINT, lambda signum, frame: _interrupted.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _stop_if_interrupted() -> None:
    if _interrupted.is_set():
        raise KeyboardInterrupt


class WorkFuture(Protocol):
    def result(self) -> Any: ...
    def cancel(self) -> Any: ...


class WorkPool(Protocol):
    """What scan and selftest need of a pool: submit a picklable function, collect its future."""

    name: str
    workers: int  # work items that run at once: threads here, worker threads on a cluster

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> WorkFuture: ...

    def share(self, value: Any, everywhere: bool = True) -> Any:
        """`value` as an argument of work items: sent to a cluster once, not once per item, and to
        every worker (`everywhere`), or to one, for one item (not through the scheduler's graph)."""
        ...


def stack_signature() -> dict[str, Any]:
    """This process's numerical stack: package versions and the CPU dispatch numpy and torch chose.

    Import-light on purpose (metadata, numpy's feature table, torch's capability string), so
    asking every worker costs milliseconds.
    """
    from numpy._core._multiarray_umath import __cpu_features__  # type: ignore[import-not-found]

    versions: dict[str, str | None] = {}
    for name in STACK_PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    signature: dict[str, Any] = {
        "python": sys.version.split()[0],
        **versions,
        "numpy SIMD": ",".join(sorted(k for k, on in __cpu_features__.items() if on)),
    }
    if versions["torch"]:
        import torch

        signature["torch CPU capability"] = torch.backends.cpu.get_cpu_capability()
    return signature


def stack_mismatch(here: dict[str, Any], there: dict[str, Any]) -> str | None:
    """The first difference between two stack signatures, as a phrase; None when they agree."""
    for key in sorted(here.keys() | there.keys()):
        if here.get(key) != there.get(key):
            return f"{key} {there.get(key)} there, {here.get(key)} here"
    return None


class _ThreadPool:
    name = "in-process"

    def __init__(self, pool: ThreadPoolExecutor, workers: int):
        self._pool, self.workers = pool, workers

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Future[Any]:
        return self._pool.submit(fn, *args)

    def share(self, value: Any, everywhere: bool = True) -> Any:
        return value


class _DaskFuture:
    """A distributed future whose result() turns a lost scheduler into one clear error."""

    def __init__(self, future: Any, address: str):
        self._future, self._address = future, address

    def result(self) -> Any:
        from distributed.comm.core import CommClosedError

        try:
            return self._wait_while_workers_remain()
        except (CommClosedError, OSError, TimeoutError) as exc:
            raise ClusterLost(f"the Dask scheduler at {self._address} went away ({type(exc).__name__})") from exc
        except Exception as exc:
            if (
                type(exc).__name__ in ("CancelledError", "FutureCancelledError")
                and self._future.client.status != "running"
            ):
                raise ClusterLost(f"the Dask scheduler at {self._address} went away") from exc
            raise

    def _wait_while_workers_remain(self) -> Any:
        """The result, waited for while the cluster has workers: the scheduler keeps a task whose
        last worker died pending until another joins, so a scan waited silently for ever."""
        alone = 0.0
        while True:
            _stop_if_interrupted()
            try:
                return self._future.result(timeout=POLL_S)
            except TimeoutError:
                if self._future.done():  # it ended as the wait timed out, or raised TimeoutError itself
                    return self._future.result()
            workers = self._future.client.scheduler_info(n_workers=-1)["workers"]
            alone = 0.0 if workers else alone + POLL_S
            if alone >= NO_WORKERS_WAIT_S:
                raise ClusterLost(
                    f"the Dask cluster at {self._address} has had no workers for {NO_WORKERS_WAIT_S:g} s "
                    "(did they die?); start workers and run again"
                )

    def cancel(self) -> Any:
        try:
            return self._future.cancel()
        except Exception:  # the scheduler may already be gone: nothing left to cancel
            return None


class _DaskPool:
    def __init__(self, client: Any, address: str, workers: int):
        self._client, self.name, self.workers = client, address, workers

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> _DaskFuture:
        # pure=False: the same arguments submitted twice are two work items, never deduplicated
        return _DaskFuture(self._client.submit(fn, *args, pure=False), self.name)

    def share(self, value: Any, everywhere: bool = True) -> Any:
        # a list: the value is one piece of data; one item's value is not hashed (tokenizing a
        # model's modules costs more than sending them)
        (future,) = self._client.scatter([value], broadcast=everywhere, hash=everywhere)
        return future


def worker_name() -> str:
    """The Dask worker a task runs on, for the errors it raises; "this process" outside a worker."""
    from distributed import get_worker

    try:
        return f"Dask worker {get_worker().address}"
    except ValueError:
        return "this process"


def _local_workers(spec: str) -> int:
    count = spec[len(LOCAL_PREFIX) :]
    if not count.isdigit() or int(count) < 1:
        raise OpbenchError(f"--dask {spec!r}: expected local:N with N >= 1 workers, or a scheduler address")
    return int(count)


def _check_scheduler(spec: str) -> None:
    """Only what opbench can join without more configuration (`tls://` needs certificates, `ucx://`
    a UCX build), and only a service that speaks first, as a Dask scheduler does on accepting a
    connection. Dask's own client waited for ever on a service that accepts and never answers,
    and read an HTTP server's reply as a frame length (a 3 EiB allocation)."""
    import socket

    scheme, sep, rest = spec.partition("://")
    host, colon, port = rest.rpartition(":")
    if not (sep and scheme == "tcp" and host and colon and port.isdigit()):
        raise OpbenchError(
            f"--dask {spec!r}: expected tcp://HOST:PORT (a running Dask scheduler) or local:N; "
            "tls://, ucx:// and other protocols are not supported"
        )
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S) as probe:
            greeting = probe.recv(1)
    except TimeoutError:
        greeting = None
    except OSError as exc:
        raise OpbenchError(f"cannot reach a Dask scheduler at {spec}: {exc.strerror or exc}") from None
    if greeting == b"":  # the end of the stream: the service closed the connection, said nothing
        raise OpbenchError(
            f"cannot reach a Dask scheduler at {spec}: the service there closed the connection without a word "
            "(a scheduler greets at once); is it a Dask scheduler?"
        )
    if not greeting:
        raise OpbenchError(
            f"cannot reach a Dask scheduler at {spec}: the service there answered nothing in "
            f"{CONNECT_TIMEOUT_S} s (a scheduler greets at once); is it a Dask scheduler?"
        )


def check_workers(client: Any, address: str) -> int:
    """Refuse a fleet whose numerical stack differs from this process's; returns the worker threads."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    if not workers:
        raise OpbenchError(f"the Dask scheduler at {address} has no workers")
    here = stack_signature()
    for worker, there in sorted(client.run(stack_signature).items()):
        mismatch = stack_mismatch(here, there)
        if mismatch:
            raise OpbenchError(
                f"Dask worker {worker} has another numerical stack ({mismatch}): its results would not merge"
            )
    return sum(int(info.get("nthreads", 1)) for info in workers.values())


@contextmanager
def _forked_from_a_preloaded_server(backends: Iterable[str]) -> Iterator[None]:
    """Local workers forked from one server that loaded `backends` (their frameworks), instead of
    each spawned worker importing them: `selftest exp sum --small --dask local:2` took 30 CPU-s
    spawned and 12 forked (11 in-process). Within this block the first worker starts the server
    (multiprocessing's forkserver, preloading worker_preload); it serves this process from then on.
    Dask's `get_mp_context` sets its own preload list once, so it is asked first and ours replaces it."""
    from dask import config as dask_config
    from distributed.utils import get_mp_context

    with dask_config.set({"distributed.worker.multiprocessing-method": "forkserver"}):
        get_mp_context().set_forkserver_preload(["accuracy.workflows.worker_preload", "distributed"])
        before = os.environ.get(PRELOAD_VAR)
        os.environ[PRELOAD_VAR] = ",".join(dict.fromkeys(backends))
        try:
            _start_server_deaf_to_ctrl_c()
            yield
        finally:
            if before is None:
                del os.environ[PRELOAD_VAR]
            else:
                os.environ[PRELOAD_VAR] = before


def _start_server_deaf_to_ctrl_c() -> None:
    """The fork server started deaf to Ctrl-C, so that it and every worker forked from it ignore
    it for life: Ctrl-C in a terminal reaches the whole process group, and the workers (which
    this process closes on Ctrl-C) printed ~60 lines of tracebacks before its one line, a
    KeyboardInterrupt in the server's imports and in each worker's event loop. The server is
    forked with SIGINT blocked in this thread (a blocked signal stays blocked across exec), and
    worker_preload, its first import of ours, ignores it and lifts the block. This process keeps
    its own handler meanwhile: ignoring Ctrl-C here while forking lost a Ctrl-C that came then (a
    loaded machine stretched that window enough for a test to hit it); blocked, it waits, or
    another thread takes it, and the handler remembers it either way."""
    from multiprocessing import forkserver, resource_tracker

    global _server_started_with
    state = (tuple(sorted(os.environ.items())), os.getcwd(), tuple(sys.path))
    if state != _server_started_with:
        _stop_server()
        _server_started_with = state
    resource_tracker.ensure_running()
    if threading.current_thread() is not threading.main_thread():
        forkserver.ensure_running()
        return
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _stop_server() -> None:
    """The fork server stopped (none running: nothing to do). Ended by SIGTERM, not as the stdlib
    stops it (closing its "alive" pipe and waiting), which waits for ever where a process forked
    from this one holds the pipe too (startup_threads' workers, a test's fork)."""
    from multiprocessing import forkserver

    server: Any = forkserver._forkserver
    with server._lock:
        if server._forkserver_pid is not None:
            with suppress(ProcessLookupError):
                os.kill(server._forkserver_pid, signal.SIGTERM)
            server._stop_unlocked()  # closes the pipe, reaps the server, removes its socket


@contextmanager
def work_pool(dask: str | None, threads: int = 1, preload: Iterable[str] = ()) -> Iterator[WorkPool]:
    """A pool for independent work items: `threads` threads here, or the cluster `dask` names.
    `preload`: the backends the work items run, loaded once for all workers of a local cluster."""
    if dask is None:
        with ThreadPoolExecutor(threads) as pool:
            yield _ThreadPool(pool, threads)
        return
    try:
        from dask import config as dask_config
        from distributed import Client, LocalCluster
    except ImportError as exc:
        raise OpbenchError("--dask needs the `dask` extra: pip install 'opbench[dask]'") from exc
    with ExitStack() as settings:
        settings.enter_context(_ctrl_c_remembered())
        cluster = None
        try:
            if dask.startswith(LOCAL_PREFIX):
                workers = _local_workers(dask)  # before anything starts: a bad count starts no fork server
                # One thread per worker process: the kernels inside each task use one thread too.
                # Dask's nanny sets MALLOC_TRIM_THRESHOLD_ in its workers, which turns off glibc's
                # dynamic mmap threshold: every large array is then mapped afresh, and a scan chunk
                # costs ~25% more CPU in page faults. These workers are ours and short-lived:
                # glibc's default for them (None unsets a variable of that config). The settings
                # hold for the cluster's life: a worker that dies is started again the same way.
                settings.enter_context(
                    dask_config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None})
                )
                settings.enter_context(_forked_from_a_preloaded_server(preload))
                cluster = LocalCluster(
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=None,
                    # the scheduler's HTTP endpoints (health, metrics) on a free port: 8787 may be
                    # another cluster's, and Dask would say so on stderr
                    scheduler_kwargs={"dashboard_address": ":0"},
                    silence_logs=50,
                )
                client = Client(cluster, timeout=CONNECT_TIMEOUT_S)
            else:
                _check_scheduler(dask)
                client = Client(dask, timeout=CONNECT_TIMEOUT_S)
        except OpbenchError:
            raise
        except Exception as exc:  # an HTTP server's reply read as a frame length: a 3 EiB MemoryError
            if cluster is not None:
                cluster.close()
            detail = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise OpbenchError(f"cannot reach a Dask scheduler at {dask}: {detail}") from None
        settings.enter_context(_distributed_silenced())
        try:
            _stop_if_interrupted()  # Ctrl-C while the cluster started: it is closed below
            dask_pool = _DaskPool(client, dask, check_workers(client, dask))
            _stop_if_interrupted()
            yield dask_pool
        finally:
            _close_quietly(client, cluster)


_held = threading.local()  # on a worker thread: {backend name: threads held}, and the limits kept entered


def thread_limits(backends: Iterable[Any], n: int, *, for_life: bool = False) -> AbstractContextManager[Any]:
    """Every backend in `backends` (accuracy.backends objects) on `n` threads.

    Here: for the block, the previous counts restored after. On a Dask worker (`for_life`): from
    now on, for the life of this worker thread, and nothing to do when it already holds `n` for a
    backend. Held per thread, not in a WorkerPlugin's setup, because a plugin sets up in the
    worker's event-loop thread while tasks run in its executor threads (an OpenMP limit belongs
    to the thread that set it), and each workflow asks for its own count.
    """
    if not for_life:
        stack = ExitStack()
        for backend in dict.fromkeys(backends):
            stack.enter_context(backend.thread_limit(n))
        return stack
    if not hasattr(_held, "counts"):
        # never closed: leaving the limits is what a worker should not pay for in every task
        _held.counts, _held.limits = {}, ExitStack()
    for backend in dict.fromkeys(backends):
        if _held.counts.get(backend.name) != n:
            _held.limits.enter_context(backend.thread_limit(n))
            _held.counts[backend.name] = n
    return nullcontext()


@contextmanager
def _distributed_silenced() -> Iterator[None]:
    """distributed's own log lines off while opbench uses the cluster: a scheduler killed mid-scan
    logged two tracebacks (the client's failed reconnection) before opbench's one line, which
    says what happened and what the table covers."""
    import logging

    # distributed's config gives some of its loggers a level of their own (distributed.client)
    names = ["distributed", *(n for n in logging.root.manager.loggerDict if n.startswith("distributed."))]
    levels = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _close_quietly(client: Any, cluster: Any) -> None:
    """Closing after the scheduler died logs reconnect noise and can raise: neither helps the user."""
    import logging

    logging.getLogger("distributed").setLevel(logging.CRITICAL)
    for thing in (client, cluster):
        if thing is None:
            continue
        with suppress(Exception):  # already gone
            thing.close(timeout=5) if thing is client else thing.close()
