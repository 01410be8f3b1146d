"""Say what opbench waits for when user code runs long: a factory that sleeps, downloads weights
or waits on a lock was waited on in silence until the user stopped it."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator

FIRST_NOTE_S = 10.0  # seconds before the first line: most factories are done by then
EVERY_S = 30.0  # then one line per this many seconds


def _say(line: str) -> None:
    print(f"opbench: {line}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def said_while_waiting(what: str) -> Iterator[None]:
    """While the block runs: after FIRST_NOTE_S, then every EVERY_S, one line on stderr,
    `opbench: WHAT has run for N s`; nothing for a block that ends sooner."""
    done = threading.Event()
    started = time.monotonic()

    def note() -> None:
        wait = FIRST_NOTE_S
        while not done.wait(wait):
            _say(f"{what} has run for {time.monotonic() - started:.0f} s")
            wait = EVERY_S

    watcher = threading.Thread(target=note, name="opbench-waiting", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
