"""The `opbench` command line: one subcommand per module, user errors exit 2 with one line."""

from __future__ import annotations

import argparse
import sys

from accuracy.errors import OpbenchError

# Each entry is a module exposing `register(subparsers)`, which adds its subcommand and sets
# `func(args) -> int` on the parser. Adding a command is one line here.
COMMAND_MODULES = (
    "accuracy.commands.catalog",   # list, info
    "accuracy.commands.explain",   # explain
    "accuracy.commands.run",       # run
    "accuracy.commands.compare",
    "accuracy.report.cli",         # report
)


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(prog="opbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except OpbenchError as exc:
        print(f"opbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("opbench: error: interrupted; results written so far are kept", file=sys.stderr)
        return 2
