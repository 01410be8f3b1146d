"""`opbench scan FUNC --dtype float32`: every input of the format through every implementation."""

from __future__ import annotations

import sys

from accuracy.catalog.registry import get_op
from accuracy.cli.arguments import add_command, add_dask, add_json, stopped_early
from accuracy.core.dtypes import get_format
from accuracy.core.errors import OpbenchError
from accuracy.core.formatting import format_number, format_table
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


def _num(v) -> str:
    return format_number(v, digits=4)


def render(rows: list[dict], result) -> str:
    fmt = result.fmt
    state = "interrupted: partial" if result.interrupted else "complete"
    lines = [
        f"scan {result.op} {fmt.name}: {result.done} of {result.total} inputs ({state}), {result.seconds:.0f} s",
        "",
    ]
    table = []
    for r in rows:
        holds = {None: "no contract declared", True: "holds", False: "BROKEN"}[r["contract_holds"]]
        contract = "-" if r["contract_max_ulp"] is None else f"{r['contract_max_ulp']} ulp ({r['contract_source']})"
        table.append(
            [
                r["impl"],
                str(r["checked"]),
                f"{r['max_ulp']:.6g}" if r["not_correctly_rounded"] else "<= 0.5",
                str(r["not_correctly_rounded"]),
                _num(r["max_ulp_from_correctly_rounded"]),
                contract,
                holds,
            ]
        )
    lines += format_table(
        [
            "implementation",
            "inputs",
            "max ulp",
            "not correctly rounded",
            "ulps from CR",
            "contract",
            "contract everywhere",
        ],
        table,
    )
    lines.append("")
    for r in rows:
        if r["worst"]:
            worst = ", ".join(
                f"x={w['x']} ({w['x_value']:.9g}) -> {w['result']}, exact {w['exact']:.12g}, {w['ulp']:.6g} ulp"
                for w in r["worst"]
            )
            lines.append(f"  {r['impl']} worst: {worst}")
        hist = "  ".join(f"{k}: {v}" for k, v in r["histogram"].items() if v)
        lines.append(f"  {r['impl']} ulp-error histogram: {hist}")
    from accuracy.workflows.scan import HISTOGRAM_EDGES

    lines.append(f"(histogram bins in ulps; edges {', '.join(f'{e:g}' for e in HISTOGRAM_EDGES)})")
    return "\n".join(lines)


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
