"""`opbench scan FUNC --dtype float32`: every input of the format through every implementation."""

from __future__ import annotations

import sys

from accuracy.catalog.registry import get_op
from accuracy.cli.arguments import add_command, add_dask, add_json, stopped_early
from accuracy.cli.text.scan import render
from accuracy.core.dtypes import get_format
from accuracy.core.errors import OpbenchError
from accuracy.core.json_output import dumps


def register(sub) -> None:
    p = add_command(
        sub,
        "scan",
        run,
        help="run an elementwise function on every input of a format",
        description="Run every implementation of an elementwise function on all 2**32 float32 "
        "(2**16 float16/bfloat16) inputs, or a float64 sample, against the correctly rounded "
        "result: max ulp error with its worst inputs, results not correctly rounded, a histogram "
        "and the library's published contract. Ctrl-C prints what was scanned so far.",
    )
    p.add_argument("op", help="an elementwise op, e.g. exp (`opbench list` shows them)")
    p.add_argument("--dtype", default="float32", help="float32, float16, bfloat16, or float64 with --sample")
    p.add_argument(
        "--impl",
        action="append",
        default=None,
        help="an implementation, e.g. numpy:np.exp (repeatable; default: every one available)",
    )
    p.add_argument(
        "--sample", type=int, default=None, help="float64 only: N inputs, random in every binade, plus special values"
    )
    add_dask(p)
    add_json(p)


class _Progress:
    """A one-line bar with ETA on stderr, redrawn in place on a terminal, every 10% otherwise."""

    def __init__(self, label: str):
        self.label, self.tty, self.shown, self.drawn_at = label, sys.stderr.isatty(), -1, -1.0

    def __call__(self, done: int, total: int, seconds: float) -> None:
        tenth = 10 * done // total
        if not self.tty and (tenth == self.shown or done == total):
            return
        if self.tty and seconds - self.drawn_at < 0.5 and done < total:  # chunks take milliseconds
            return
        self.shown, self.drawn_at = tenth, seconds
        eta = seconds * (total - done) / done if done else float("nan")
        bar = "#" * (30 * done // total)
        end = "\n" if not self.tty else ""
        print(
            f"\r{self.label} [{bar:<30}] {100 * done / total:5.1f}%  {seconds:6.0f} s, ETA {eta:5.0f} s",
            end=end,
            file=sys.stderr,
            flush=True,
        )

    def finish(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def run(args) -> int:
    from accuracy.workflows.scan import as_rows, scan, select_impls

    if args.sample is not None and args.sample < 1:
        raise OpbenchError(f"--sample must be at least 1, got {args.sample}")
    op = get_op(args.op)
    fmt = get_format(args.dtype)
    impls = select_impls(op, fmt, args.impl)
    progress = _Progress(f"scan {op.name} {fmt.name}")
    result = scan(op, fmt, impls, sample=args.sample, progress=progress, dask=args.dask)
    progress.finish()
    rows = as_rows(result)
    if args.json:
        print(
            dumps(
                {
                    "op": op.name,
                    "dtype": fmt.name,
                    "inputs": result.done,
                    "total": result.total,
                    "seconds": result.seconds,
                    "interrupted": result.interrupted,
                    "implementations": rows,
                }
            )
        )
    else:
        print(render(rows, result))
    if result.interrupted:
        return stopped_early(result.error or "interrupted", "the table covers the inputs scanned so far")
    return 0
