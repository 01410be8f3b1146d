"""Measure `opbench model` on real models: per model and port, units compared, flagged, worst
introduced error and wall time (the table in docs/models.md).

    python scripts/measure_models.py [--models resnet18 bert2] [--ports onnxruntime ...]

Each (model, port) is one `run_model` call, timed end to end (export, isolated and propagated
runs, judging). The machine's load average is printed with the table: timings on a shared
machine say little without it.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.sweep import run_model
from accuracy.workflows.model.zoo import example_inputs

PORTS = {
    "resnet18": ("onnxruntime", "onnxruntime-noopt", "torchscript", "bfloat16"),
    "bert2": ("onnxruntime", "onnxruntime-noopt", "torchscript", "bfloat16"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(PORTS))
    parser.add_argument("--ports", nargs="+", default=None)
    args = parser.parse_args()
    print("| model | port | units compared | flagged | not compared | worst introduced | output rel. error | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            inputs = write_arrays(Path(tmp) / f"{model}.npz", example_inputs(model))
            for port in args.ports or PORTS[model]:
                started = time.perf_counter()
                (p,) = run_model(f"accuracy.workflows.model.zoo:{model}", inputs, [port]).ports
                wall = time.perf_counter() - started
                print(
                    f"| {model} | {port} | {p['compared']} | {p['flagged']} | {p['not_compared']} | "
                    f"{p['worst_introduced']:.2g} | {p['output']['relative_error']:.2g} | {wall:.0f} |",
                    flush=True,
                )
    print(f"\nload average (1, 5, 15 min) at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
