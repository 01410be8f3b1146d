"""Ctrl-C (and SIGTERM, SIGHUP) held while a framework's own code runs, delivered right after.

Python raises KeyboardInterrupt in whatever Python frame runs when the signal arrives. Inside a
framework that frame may be a callback its C++ made (pybind11's import of a submodule, a guard
of torch.compile): the exception then leaves C++ code that cannot pass it on, and the process
aborts ("terminate called after throwing pybind11::error_already_set") instead of saying
"interrupted". A call made within `held()` finishes, and the interrupt is raised as the block
ends, in opbench's own frame. Blocking the signal (`pthread_sigmask`) would not do: the kernel
hands a process's signal to any thread that has it unblocked, the frameworks' threads among them,
and Python still runs the handler in the main thread at once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_depth = 0  # held blocks open in the main thread, the only one Python runs signal handlers in
_pending = False


@contextmanager
def held() -> Iterator[None]:
    """Run the block to its end; a stop signal received meanwhile raises KeyboardInterrupt after it."""
    global _depth, _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if not _depth and _pending:
            _pending = False
            raise KeyboardInterrupt


def stop() -> None:
    """What a stop signal's handler calls: KeyboardInterrupt now, or as the held block ends."""
    global _pending
    if _depth:
        _pending = True
        return
    raise KeyboardInterrupt
