"""The `opbench` command line: one module per subcommand, bad input exits 2 with one line."""

from __future__ import annotations

import argparse
import errno
import importlib
import io
import logging
import os
import signal
import sys
import threading
import warnings

from accuracy import __version__
from accuracy.core import interrupts
from accuracy.core.errors import OpbenchError
from accuracy.core.formatting import printable

DESCRIPTION = """\
Why does an op give a different answer here than there, and is that a bug or just rounding?
opbench runs every implementation of an op (numpy, scipy, torch, torch.compile, each BLAS
library, ...) on the same rounded inputs, measures each against an exact reference, and says
whether the difference is within rounding. `opbench run` keeps timings and errors over commits,
BLAS builds and environments; `opbench compare` says whether an upgrade is safe.

start with:  opbench list   then   opbench explain linear --dtype float32"""

FILE_INPUT = 257  # CPython's Py_file_input: code run as a module's
OUTPUT_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG)  # stdout on a full or failing device

# Each module exposes `register(subparsers)`, which adds its subcommand with
# `accuracy.cli.arguments.add_command`. Adding a command is one line here.
COMMAND_MODULES = (
    "accuracy.cli.list_command",
    "accuracy.cli.info_command",
    "accuracy.cli.explain_command",
    "accuracy.cli.selftest_command",
    "accuracy.cli.inputs_command",
    "accuracy.cli.check_command",
    "accuracy.cli.model_command",
    "accuracy.cli.generate_command",
    "accuracy.cli.run_command",
    "accuracy.cli.compare_command",
    "accuracy.cli.report_command",
    "accuracy.cli.scan_command",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="opbench", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"opbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # a label the terminal's encoding lacks (PYTHONIOENCODING=latin-1 and a euro sign) is shown
    # escaped, as stderr shows it, not a UnicodeEncodeError traceback
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")
    # with a read-only HOME matplotlib warns, in two lines, that it keeps its settings in a temporary
    # directory: opbench's figures need none of them
    logging.getLogger("matplotlib").setLevel(logging.ERROR)
    # opbench's own arithmetic on inf or NaN weights and inputs: the report counts and names the
    # non-finite values; numpy's RuntimeWarning with a line of opbench's source told the user nothing
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"accuracy\.")
    try:
        os.getcwd()
    except FileNotFoundError:  # torch's MKL then failed to load libtorch_cpu.so, naming nothing the user did
        print("opbench: error: the current directory no longer exists (deleted); cd to one that does", file=sys.stderr)
        return 2
    received: list[str] = []
    previous = _terminate_as_interrupt(received)
    try:
        args = build_parser().parse_args(argv)
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # here, not at exit: a full device is then this one line
        return status
    except OpbenchError as exc:
        print(f"opbench: error: {printable(exc)}", file=sys.stderr)  # one line, whatever a path or label holds
        return 2
    except KeyboardInterrupt:  # `run` says what it saved; other commands write nothing half-way
        print("opbench: error: interrupted" + (f" by {received[0]}" if received else ""), file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `opbench list --json | head`: the reader has all it wanted
        _silence_stdout()
        return 0
    except OSError as exc:
        if exc.errno not in OUTPUT_ERRORS:
            raise
        _silence_stdout()  # what is left in its buffer would fail again at exit
        print(f"opbench: error: cannot write the output: {exc.strerror}", file=sys.stderr)
        return 2
    finally:
        _forget_handled_interrupts()
        for sig, handler in previous.items():  # main called in a process of its own (a test) keeps its handlers
            signal.signal(sig, handler)


def _terminate_as_interrupt(received: list[str]) -> dict:
    """SIGTERM and SIGHUP (`kill`, a job scheduler, a closed terminal) end any command as Ctrl-C
    does, one line and exit status 2 (`opbench model` died silently with -15); `received` gets the
    signal's name. All three wait for a framework call held by `interrupts.held()` to finish. A
    signal ignored at start (`nohup`) stays ignored; a process forked from this one dies of it as
    it would have (a Dask worker, a fork server). Returns the handlers replaced."""
    main = os.getpid()

    def interrupt(signum: int, _frame: object) -> None:
        if os.getpid() != main and signum == signal.SIGINT:  # Python's own handler, as before the fork
            signal.signal(signum, signal.default_int_handler)
            raise KeyboardInterrupt
        if os.getpid() != main:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if signum != signal.SIGINT:
            received.append(signal.Signals(signum).name)
        interrupts.stop()

    if threading.current_thread() is not threading.main_thread():  # only the main thread sets handlers
        return {}
    stops = [sig for sig in (signal.SIGTERM, signal.SIGHUP) if signal.getsignal(sig) is signal.SIG_DFL]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        stops.append(signal.SIGINT)
    return {sig: signal.signal(sig, interrupt) for sig in stops}


def _forget_handled_interrupts() -> None:
    """CPython takes a KeyboardInterrupt that passed through code run by `PyRun_String` (as
    pybind11's `py::exec` runs it in an extension) for an unhandled one, handled or not, and at the
    exit of `python -m` kills itself with SIGINT: exit status -2 after opbench's one line, instead
    of 2. Running any code that way clears the mark; an interrupt that leaves `main` sets it again."""
    import ctypes

    run = ctypes.pythonapi.PyRun_String
    run.restype, run.argtypes = ctypes.py_object, [ctypes.c_char_p, ctypes.c_int, ctypes.py_object, ctypes.py_object]
    run(b"", FILE_INPUT, {}, {})


def _silence_stdout() -> None:
    """Point stdout at /dev/null so Python's exit-time flush does not hit the closed pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
