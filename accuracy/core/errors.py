"""User-facing problems: an error is one line and exit status 2; a warning is one line on stderr.
Nothing else reaches stderr: what libraries' C++ sides print there is silenced (`quiet_stderr`), and
what they print on stdout while a command's report is due there goes to stderr (`stdout_to_stderr`)."""

import contextlib
import os
import sys
from collections.abc import Iterator


class OpbenchError(Exception):
    """Bad input from the user (unknown op, corrupt file, ...), never a bug in opbench."""


def first_line(exc: BaseException, *, typed: bool = False) -> str:
    """The first non-blank line of `exc`'s message, after `Type: ` when `typed`; its type's name
    when the message is empty. A library's message can be a whole traceback or build log, and an
    error or a table cell is one line."""
    lines = str(exc).strip().splitlines()
    line = lines[0].strip() if lines else ""
    if not line:
        return type(exc).__name__
    return f"{type(exc).__name__}: {line}" if typed else line


def warn(line: str) -> None:
    """Say something the user should know without stopping: `opbench: warning: ...` on stderr,
    where it never mixes with a command's output (a table, JSON) on stdout."""
    from accuracy.core.formatting import printable  # labels and paths in it may hold control characters

    print(f"opbench: warning: {printable(line)}", file=sys.stderr)


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """File descriptor 2 sent to /dev/null for a while: C++ code writes there directly (a graph
    dump, a library's log lines), past anything Python's sys.stderr could redirect. sys.stderr
    too, where it is not that descriptor (a notebook, pytest's capture): ExecuTorch's bindings
    write their C++ log lines through it."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        with open(os.devnull, "w") as sink, contextlib.redirect_stderr(sink):
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Everything printed for a while goes to stderr, C++ writes to file descriptor 1 too (torch's
    ONNX exporter dumps a graph there with `std::cout`), so stdout holds only the command's report."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no file descriptor 1 (a closed stdout): only Python's prints to move
        saved = None
    else:
        os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)
