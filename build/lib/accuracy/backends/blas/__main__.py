"""``python -m accuracy.backends.blas [N]``: the BLAS libraries found, and whether each gives the same bits
on one thread and on all. Their accuracy and speed side by side: ``opbench explain matmul``."""

import sys

import numpy as np

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
        print(
            f"{p.name:26} {p.vendor:9} {p.version or '?':16} {p.abi.integer_width:5} "
            f"{p.threading_layer or '?'}x{p.num_threads:<6} {p.architecture}"
        )
    print("\n1 thread vs all threads, bitwise:")
    for p in providers:
        for dtype in (np.float32, np.float64):
            r = gemm_thread_reproducibility(p, n=n, dtype=dtype)
            print(
                f"{p.name:26} {r.dtype:8} 1 vs {r.threads}: identical={r.bitwise_identical} "
                f"max|diff|={r.max_abs_diff:.3g}"
            )
    print("\naccuracy and speed of each library against the exact reference: opbench explain matmul")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
