"""Arguments that several subcommands share, declared once (as asv's `common_args` does), so
`--results` or `--json` mean the same thing and read the same in every `--help`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from accuracy.core.errors import OpbenchError
from accuracy.reference.inputs import DEFAULT_CONDITION


def add_command(sub, name: str, run, *, help: str, description: str | None = None) -> argparse.ArgumentParser:
    """A subcommand whose `func` is `run(args) -> exit status`."""
    parser = sub.add_parser(name, help=help, description=description or help)
    parser.set_defaults(func=run)
    return parser


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def add_results(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results", type=Path, default=Path("results"), help="asv results directory (default: results)"
    )


def add_case(parser: argparse.ArgumentParser, *, threads_help: str | None) -> None:
    """The op and the case it runs on: dtype, size and input condition (and threads, unless
    `threads_help` is None: a command that runs nothing)."""
    parser.add_argument("op", help="an op name (`opbench list` shows them)")
    parser.add_argument("--dtype", default="float32", help="float16, bfloat16, float32 or float64 (default: float32)")
    parser.add_argument("--size", type=int, default=None, help="the op's size knob (default: the op's own)")
    parser.add_argument(
        "--condition",
        default=DEFAULT_CONDITION,
        help=f"input regime, for ops that have several, e.g. solve --condition ill (default: {DEFAULT_CONDITION})",
    )
    if threads_help is not None:
        parser.add_argument("--threads", type=int, default=None, help=threads_help)


def add_dask(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dask",
        metavar="ADDRESS",
        default=None,
        help="run the work items on a Dask cluster: a scheduler address (tcp://HOST:PORT) or local:N "
        "for N worker processes here (default: this process)",
    )


def item_progress(command: str) -> Callable[[int, int, str, float], None]:
    """`progress(done, total, label, seconds)` for work items that take seconds each (self-test
    cases, model ports): one line per finished item on stderr, with an ETA."""

    def progress(done: int, total: int, label: str, seconds: float) -> None:
        eta = seconds * (total - done) / done
        print(f"{command}: [{done}/{total}] {label}, {seconds:.0f} s, ETA {eta:.0f} s", file=sys.stderr)

    return progress


def stopped_early(why: str, covered: str) -> int:
    """A long command stopped before the end (Ctrl-C, a lost Dask scheduler) after printing what it
    had: one line saying so, and exit status 2, the same for scan, self-test and model."""
    print(f"opbench: error: {why}; {covered}", file=sys.stderr)
    return 2


def labelled_file(flag: str, text: str, example: str) -> tuple[str, str]:
    """`LABEL=FILE` of a repeatable flag (`--output tf=out.npy`), split; anything else is one line."""
    label, sep, path = text.partition("=")
    if not sep or not label or not path:
        raise OpbenchError(f"{flag} {text!r}: expected LABEL=FILE, e.g. {example}")
    return label, path
