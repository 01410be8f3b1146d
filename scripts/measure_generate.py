"""Measure `opbench generate` on the tiny decoders (issue 59's budget: 32 steps in at most a
minute): per model, the wall time of the whole command (a fresh process: imports, the float64
greedy text, each default port's logits, their judging) and its peak RSS, three runs each, with
the machine's load average before each run (timings on a shared machine say little without it).

    python scripts/measure_generate.py [--models llama qwen2 gemma2] [--steps 32] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

PROMPT = "5,17,42,8"


def measure(model: str, steps: int) -> tuple[float, float, int]:
    """(seconds, load average before, the command's exit status) of one run."""
    load = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "accuracy", "generate", f"accuracy.workflows.model.decoders:{model}",
         "--inputs", PROMPT, "--steps", str(steps), "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return time.perf_counter() - started, load, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["llama", "qwen2", "gemma2"])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for model in args.models:
        for run in range(args.runs):
            seconds, load, status = measure(model, args.steps)
            peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            print(f"{model} run {run + 1}: {seconds:.1f} s, exit {status}, load {load:.2f}, peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
