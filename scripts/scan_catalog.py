"""Scan every elementwise function of the catalog, with every implementation here (docs/scale-out.md).

    python scripts/scan_catalog.py --dtype float32 --out scans/float32

Each function is one `opbench scan FUNC --dtype DTYPE --json`, as a user would type it, timed end
to end (imports included) with the load averages before and after. Its JSON lands in `--out`, so an
interrupted catalog resumes where it stopped: a function whose JSON is there and complete is not
scanned again. The table (wall time per function, max ulp and results not correctly rounded per
implementation) is printed from those files; `--table` prints it without scanning.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from accuracy.catalog.registry import all_ops
from accuracy.workflows.scan import scannable


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _scan(name: str, dtype: str, dask: str | None, path: Path) -> None:
    command = [sys.executable, "-m", "accuracy", "scan", name, "--dtype", dtype, "--json"]
    if dask:
        command += ["--dask", dask]
    load, started = _load(), time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"scan {name} failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    record = json.loads(proc.stdout) | {"wall_s": wall, "load_before": load, "load_after": _load(), "dask": dask}
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(record, indent=2))
    partial.replace(path)  # a killed catalog leaves no half-written file to resume from


def _ulp(row: dict) -> str:
    return f"{row['max_ulp']:.3g}" if row["not_correctly_rounded"] else "≤ 0.5"


def table(records: list[dict]) -> str:
    lines = [
        "| function | wall s (scan s) | load before; after | implementation | max ulp | not correctly rounded "
        "| published contract |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        for i, row in enumerate(r["implementations"]):
            share = row["not_correctly_rounded"] / row["checked"]
            head = ["", "", ""]
            if i == 0:
                head = [r["op"], f"{r['wall_s']:.0f} ({r['seconds']:.0f})", f"{r['load_before']}; {r['load_after']}"]
            contract = "none declared"
            if row["contract_max_ulp"] is not None:
                holds = "holds" if row["contract_holds"] else "**broken**"
                contract = f"{row['contract_max_ulp']} ulp: {holds}"
            lines.append(f"| {' | '.join(head)} | `{row['impl']}` | {_ulp(row)} | {share:.2%} | {contract} |")
    pairs = sum(len(r["implementations"]) for r in records)
    wall = sum(r["wall_s"] for r in records)
    lines.append(f"\n{len(records)} functions, {pairs} function-implementation pairs, {wall / 60:.1f} min in all.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float32", help="float32, float16 or bfloat16")
    parser.add_argument("--out", type=Path, required=True, help="folder for each function's JSON")
    parser.add_argument("--dask", default=None, help="as `opbench scan --dask` (default: in-process)")
    parser.add_argument("--table", action="store_true", help="print the table of what is there; scan nothing")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    names = [op.name for op in all_ops() if scannable(op)]
    for name in names:
        path = args.out / f"{name}.json"
        if args.table or path.exists():
            continue
        print(f"scan {name} {args.dtype}: started {time.strftime('%H:%M:%S')}, load {_load()}", flush=True)
        _scan(name, args.dtype, args.dask, path)
    records = [json.loads(p.read_text()) for name in names if (p := args.out / f"{name}.json").exists()]
    print(table(records))


if __name__ == "__main__":
    main()
