"""A library's attribute replaced for the length of a block, one block at a time.

opbench leaves out work a converter does for nothing on the graphs it is given (torchao's QAT
folding on a post-training graph, XNNPACK's SDPA patterns where no softmax is) and keeps
OpenVINO's telemetry off its own conversions. Each replaces a module attribute while it runs and
restores it after, so that any other caller of the library (a user's own conversion in another
thread) sees it as it was."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

_LOCKS: dict[tuple[int, str], threading.Lock] = {}
_GUARD = threading.Lock()


@contextlib.contextmanager
def replaced(owner: Any, name: str, wrap: Callable[[Any], Any]) -> Iterator[Any]:
    """`owner.name` is `wrap(original)` inside the block and the original after it; yields the
    original. The original is read under the attribute's lock: read outside it, a block could take
    another thread's replacement for the original and leave it in place for good."""
    with _GUARD:
        lock = _LOCKS.setdefault((id(owner), name), threading.Lock())
    with lock:
        original = getattr(owner, name)
        setattr(owner, name, wrap(original))
        try:
            yield original
        finally:
            setattr(owner, name, original)
