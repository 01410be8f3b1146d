"""Where the work items of `opbench model`'s one sweep run: a scheduler, chosen in one place
(`scheduler_for`).

The sweep (accuracy.workflows.model.sweep) is one pipeline: every port run as one work item,
then every unit judged once for all the ports fed it the same inputs, one work item each, then
the causes and rows made here. A scheduler only runs work items: `run(fn, items)` gives
`fn(*args)` for each item's arguments, in order. The work functions hold the envelope themselves (each port
on this process's torch thread count, each unit judged on JUDGE_THREADS, the BLAS libraries held
to the same), so that no scheduler can run them outside it: the report is the same bit for bit
whichever ran them. Built in: `InProcess` (one item at a time, here) and `OnDask` (`--dask`);
a package adds one through the `opbench.schedulers` entry point (a module exporting
`SCHEDULERS`, a list of `Scheduler`), chosen by name (`--scheduler NAME`).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

from accuracy.core.errors import OpbenchError
from accuracy.core.plugins import load_plugins
from accuracy.workflows.cluster import ClusterLost, WorkPool, work_pool

# The float64 references and Monte Carlo runs run on one thread: bitwise the same on any machine,
# and many small float64 kernels run far faster alone than fighting over shared cores.
JUDGE_THREADS = 1


@dataclass(frozen=True)
class Envelope:
    """What every work item runs under, whichever scheduler runs it: a port on `port_threads`
    (this process's torch count), a unit judged on `judge_threads`; `remote`: in a process of
    its own, which holds the count for its life (a Dask worker) rather than for the item."""

    port_threads: int
    judge_threads: int = JUDGE_THREADS
    remote: bool = False


class Scheduler:
    """Runs the sweep's work items. `remote`: in other processes (the model is then rebuilt there
    from its factory and this process's weights, and each item is pickled); `stops`: the
    exceptions that end a sweep early, keeping the ports finished so far (Ctrl-C, a lost cluster)."""

    name: ClassVar[str] = ""
    remote: ClassVar[bool] = False
    stops: ClassVar[tuple[type[BaseException], ...]] = ()

    @contextmanager
    def opened(self, backends: Iterable[str]) -> Iterator[None]:
        """Held for the whole sweep (a cluster started, a pool opened): `backends`, the frameworks
        the ports run on, which workers may load once."""
        yield

    def share(self, value: Any, everywhere: bool = True) -> Any:
        """A value a remote scheduler's items read, sent once: to every worker (the weights, the
        inputs) or, not `everywhere`, to the one that runs the item (a unit's tensors)."""
        return value

    def run(self, fn: Callable[..., Any], items: Sequence[tuple]) -> Iterator[Any]:
        """`fn(*args)` for each item's arguments, in the order of `items`."""
        raise NotImplementedError


class InProcess(Scheduler):
    """Here, one item at a time: a port and its sessions are freed before the next is built (an
    exported BERT-base and its sessions are GBs). What exists when the sweep starts (the
    frameworks, the model, its reference calls) is frozen out of the collector: a full collection
    with torch and transformers loaded took 0.4 s, a fifth of the model tests' time."""

    name = "here"

    @contextmanager
    def opened(self, backends: Iterable[str]) -> Iterator[None]:
        gc.freeze()
        try:
            yield
        finally:
            gc.unfreeze()

    def run(self, fn: Callable[..., Any], items: Sequence[tuple]) -> Iterator[Any]:
        for args in items:
            yield fn(*args)


class OnDask(Scheduler):
    """A Dask cluster (`--dask ADDRESS`, or `local:N` worker processes here): every item submitted
    at once, the results read in order; a Ctrl-C or a lost scheduler ends the sweep early."""

    name = "dask"
    remote = True
    stops = (KeyboardInterrupt, ClusterLost)

    def __init__(self, address: str):
        self.address = address
        self.pool: WorkPool | None = None
        self.futures: list[Any] = []

    @contextmanager
    def opened(self, backends: Iterable[str]) -> Iterator[None]:
        with work_pool(self.address, preload=["torch", *backends]) as pool:
            self.pool = pool
            try:
                yield
            finally:
                for future in self.futures:
                    future.cancel()
                self.pool, self.futures = None, []

    def share(self, value: Any, everywhere: bool = True) -> Any:
        assert self.pool is not None, "share within opened()"
        return self.pool.share(value, everywhere)

    def run(self, fn: Callable[..., Any], items: Sequence[tuple]) -> Iterator[Any]:
        assert self.pool is not None, "run within opened()"
        futures = [self.pool.submit(fn, *args) for args in items]
        self.futures += futures
        for future in futures:
            yield future.result()


def plugin_schedulers() -> dict[str, Scheduler]:
    """The schedulers installed packages add, by name (a built-in name is left out)."""
    found = load_plugins("opbench.schedulers", "SCHEDULERS", Scheduler)
    return {s.name: s for s in found if s.name not in (InProcess.name, OnDask.name)}


def scheduler_for(dask: str | None, name: str | None = None) -> Scheduler:
    """The one place a sweep's scheduler is chosen: a plugin's by `name`, the Dask cluster `dask`
    names, else this process."""
    if name is not None:
        if dask is not None:
            raise OpbenchError("--scheduler and --dask each choose where the work runs: give one")
        plugins = plugin_schedulers()
        if name not in plugins:
            known = ", ".join(sorted(plugins)) or "none installed"
            raise OpbenchError(f"--scheduler {name}: no such scheduler (opbench.schedulers: {known})")
        return plugins[name]
    return InProcess() if dask is None else OnDask(dask)
