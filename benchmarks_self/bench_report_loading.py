"""How long `opbench report` takes to load a large results directory (100 commits x 2,000 results).

opbench's own speed, kept apart from the op suite: `make bench-self` runs it under asv
(asv.self.conf.json), and `python benchmarks_self/bench_report_loading.py` prints the seconds.
"""

import datetime
import hashlib
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__":  # run as a script from a checkout where opbench is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accuracy.report.load import load_results
from accuracy.report.synthetic import SyntheticBenchmark, write_benchmarks, write_machine, write_result_file

N_COMMITS = 100
# 10 timing + 10 track benchmarks x 100 parameter combinations = 2,000 results per commit.
PARAM_NAMES = ("impl", "dtype", "size")
PARAMS = (
    ("torch:F.linear", "numpy:matmul", "scipy:blas", "naive", "mpmath"),
    ("float32", "float64"),
    tuple(2**k for k in range(4, 14)),
)
BENCHMARKS = [SyntheticBenchmark(f"ops.Op{i}.time_op", "time", "seconds", PARAM_NAMES, PARAMS) for i in range(10)] + [
    SyntheticBenchmark(f"ops.Op{i}.track_max_ulp", "track", "ulp", PARAM_NAMES, PARAMS) for i in range(10)
]
FINGERPRINT = {
    "blas": [{"internal_api": "openblas", "version": "0.3.31", "architecture": "Haswell", "num_threads": 8}],
    "torch": "2.13.0",
    "numpy": "2.4.6",
}


def _measure(bench, combo):
    size = combo[2]
    return [1e-9 * size, 1.01e-9 * size, 0.99e-9 * size] if bench.kind == "time" else 1.0


def make_results(root):
    """Write the synthetic results directory under `root` and return its path."""
    results = Path(root) / "results"
    write_machine(results, "synthetic")
    write_benchmarks(results, BENCHMARKS)
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    for i in range(N_COMMITS):
        write_result_file(
            results,
            "synthetic",
            "py3.11",
            hashlib.sha1(str(i).encode()).hexdigest(),
            start + datetime.timedelta(hours=i),
            BENCHMARKS,
            _measure,
            FINGERPRINT,
        )
    return str(results)


class LoadResults:
    """asv benchmark: the whole load (parse, tidy, param columns), not the report rendering."""

    timeout = 600

    def setup_cache(self):
        # asv runs setup_cache in a cache directory of its own and removes it afterwards
        return str(Path(make_results(Path.cwd())).resolve())

    def time_load(self, results_dir):
        load_results(results_dir)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        results_dir = make_results(tmp)
        start = time.perf_counter()
        loaded = load_results(results_dir)
        seconds = time.perf_counter() - start
    print(f"loaded {len(loaded.frame):,} rows from {N_COMMITS} commits in {seconds:.2f} s")
