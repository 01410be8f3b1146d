"""Measure a whole-format scan in-process, on `local:1` and on `local:2` (docs/scale-out.md's table).

    python scripts/scan_scaling.py exp --dtype float32

Each mode scans the same function and implementations; the rows are checked to be identical, and
the table gives wall time, speedup over in-process, the chunks (a cluster's are larger:
scan.cluster_chunk), the cost per chunk and the cluster's overhead (start-up plus the stack check),
with the load averages (1, 5, 15 minutes, as `uptime` shows them) before and after, for the docs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time

from accuracy.catalog.registry import get_op
from accuracy.core.dtypes import get_format
from accuracy.workflows.cluster import work_pool
from accuracy.workflows.scan import CHUNK, as_rows, cluster_chunk, scan, select_impls


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("op")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--impl", action="append", default=None)
    parser.add_argument("--modes", default="in-process,local:1,local:2")
    args = parser.parse_args()
    op, fmt = get_op(args.op), get_format(args.dtype)
    impls = select_impls(op, fmt, args.impl)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"scan {op.name} {fmt.name}, {', '.join(i.name for i in impls)}; commit {commit}, {os.cpu_count()} cores")
    print("| mode | wall s | speedup | chunks | s per chunk | cluster start-up s | load before, after |")
    print("|---|---|---|---|---|---|---|")
    baseline, first = None, None
    for mode in args.modes.split(","):
        dask = None if mode == "in-process" else mode
        load = _load()
        started = time.perf_counter()
        workers = 0
        if dask is not None:
            with work_pool(dask) as pool:
                workers = pool.workers
        startup = time.perf_counter() - started
        began = time.perf_counter()
        result = scan(op, fmt, impls, dask=dask)
        wall = time.perf_counter() - began  # the scan starts its own cluster: start-up is inside
        rows = as_rows(result)
        first = first or rows
        assert rows == first, f"{mode} differs from in-process"
        baseline = baseline or wall
        chunks = -(-result.total // (cluster_chunk(result.total, workers) if workers else CHUNK))
        print(
            f"| {mode} | {wall:.1f} | {baseline / wall:.2f} | {chunks} | {(wall - startup) / chunks:.3f} | "
            f"{startup:.1f} | {load}; {_load()} |"
        )


if __name__ == "__main__":
    main()
