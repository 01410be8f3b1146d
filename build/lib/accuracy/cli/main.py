"""The `opbench` command line: one module per subcommand, bad input exits 2 with one line."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from accuracy import __version__
from accuracy.core.errors import OpbenchError
from accuracy.core.formatting import printable

DESCRIPTION = """\
Why does an op give a different answer here than there, and is that a bug or just rounding?
opbench runs every implementation of an op (numpy, scipy, torch, torch.compile, each BLAS
library, ...) on the same rounded inputs, measures each against an exact reference, and says
whether the difference is within rounding. `opbench run` keeps timings and errors over commits,
BLAS builds and environments; `opbench compare` says whether an upgrade is safe.

start with:  opbench list   then   opbench explain linear --dtype float32"""

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
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args) or 0)
    except OpbenchError as exc:
        print(f"opbench: error: {printable(exc)}", file=sys.stderr)  # one line, whatever a path or label holds
        return 2
    except KeyboardInterrupt:  # `run` says what it saved; other commands write nothing half-way
        print("opbench: error: interrupted", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `opbench list --json | head`: the reader has all it wanted
        _silence_stdout()
        return 0


def _silence_stdout() -> None:
    """Point stdout at /dev/null so Python's exit-time flush does not hit the closed pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
