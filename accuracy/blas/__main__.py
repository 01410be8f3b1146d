"""``python -m accuracy.blas [N]``: list providers, then compare their gemm side by side."""

import sys

import numpy as np

from .compare import compare_gemm
from .providers import discover_providers
from .reproducibility import gemm_thread_reproducibility


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 512
    discovery = discover_providers()
    for error in discovery.load_errors:
        print(f"skipped: {error}")
    providers = list(discovery.providers.values())
    print(f"{'provider':26} {'vendor':9} {'version':16} {'int':5} {'threads':14} architecture")
    for p in providers:
        print(f"{p.name:26} {p.vendor:9} {p.version or '?':16} {p.abi.integer_width:5} "
              f"{p.threading_layer or '?'}x{p.num_threads:<6} {p.architecture}")
    print(f"\ngemm n={n}, inputs U[0,1), reference fp64 (sgemm) / long double (dgemm)")
    print(f"{'provider':26} {'dtype':8} {'thr':>3} {'ms':>8} {'GFLOP/s':>8} {'max ulp':>8} {'max rel':>9}")
    for threads in (1, None):
        for row in compare_gemm(providers, n=n, threads=threads):
            print(f"{row.provider:26} {row.dtype:8} {row.threads:3} {row.best_seconds * 1e3:8.2f} "
                  f"{row.gflops:8.1f} {row.max_ulp:8.2f} {row.max_rel:9.2e}")
    print("\n1 thread vs all threads, bitwise:")
    for p in providers:
        for dtype in (np.float32, np.float64):
            r = gemm_thread_reproducibility(p, n=n, dtype=dtype)
            print(f"{p.name:26} {r.dtype:8} 1 vs {r.threads}: identical={r.bitwise_identical} "
                  f"max|diff|={r.max_abs_diff:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
