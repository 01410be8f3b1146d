"""Measure `opbench model` on real models: per model and port, units compared, flagged, worst
introduced error, wall time, peak RSS, the judging time per unit and the ratio of the judging
time to the model's float64 forward pass (the floor, issue 41; the tables in docs/models.md).

    python scripts/measure_models.py [--models resnet18 bert2] [--ports default onnxruntime ...]

Each (model, port) is one `run_model` call in its own process (peak RSS is a process's high-water
mark), timed end to end (export, isolated and propagated runs, judging). Port `default` is the
default ports together in one run. The machine's load average is printed with each row: timings
on a shared machine say little without it.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PORTS = {
    "resnet18": ("default", "bfloat16"),
    "bert2": ("onnxruntime", "onnxruntime-noopt", "torchscript", "bfloat16"),
    "bert_base": ("default",),
    "llama_8x512": ("onnxruntime", "torchscript"),
    "qwen2_5_shape": ("default",),
}


def _float64_forward(model, inputs: dict) -> float:
    """Seconds of one float64 forward pass on one thread, as the judging runs (best of 3)."""
    import numpy as np
    import torch

    from accuracy.workflows.model.trace import float64_throughout

    double = copy.deepcopy(model).double().eval()
    tensors = {k: torch.from_numpy(v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in inputs.items()}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    best = float("inf")
    try:
        with torch.no_grad(), float64_throughout():
            for _ in range(3):
                started = time.perf_counter()
                double(**tensors)
                best = min(best, time.perf_counter() - started)
    finally:
        torch.set_num_threads(threads)
    return best


def measure(model_name: str, port: str) -> dict:
    """One (model, port) row, in this process."""
    from accuracy.judge.verdicts import NOT_COMPARED, WITHIN
    from accuracy.workflows.array_files import write_arrays
    from accuracy.workflows.model import sweep
    from accuracy.workflows.model.trace import load_model
    from accuracy.workflows.model.zoo import example_inputs

    judged = {"seconds": 0.0, "units": 0}
    judge = sweep.judge_unit

    def timed_judge(*args, **kwargs):
        started = time.perf_counter()
        try:
            return judge(*args, **kwargs)
        finally:
            judged["seconds"] += time.perf_counter() - started
            judged["units"] += 1

    sweep.judge_unit = timed_judge  # the script's own instrument: the sweep itself is not changed
    spec = f"accuracy.workflows.model.zoo:{model_name}"
    given = example_inputs(model_name)
    with tempfile.TemporaryDirectory() as tmp:
        inputs = write_arrays(Path(tmp) / f"{model_name}.npz", given)
        started = time.perf_counter()
        report = sweep.run_model(sweep.ModelRun(spec, inputs, None if port == "default" else [port]))
        wall = time.perf_counter() - started
    forward = _float64_forward(load_model(spec, False), given)
    ports = report.ports
    return {
        "model": model_name,
        "port": port if port != "default" else "+".join(p.port for p in ports),
        "absent": [a.port for a in report.absent],
        "compared": sum(p.compared for p in ports),
        "flagged": sum(p.flagged for p in ports),
        "flagged_units": [
            f"{p.port} {r.path}: {r.verdict} ({r.reason})"
            for p in ports
            for r in p.layers
            if r.verdict not in (WITHIN, NOT_COMPARED)
        ],
        "wall": wall,
        "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "judged_units": judged["units"],
        "judging": judged["seconds"],
        "forward64": forward,
        "load": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(PORTS))
    parser.add_argument("--ports", nargs="+", default=None)
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(*args.one)))
        return
    print(
        "| model | port | compared | flagged | wall s | peak RSS GB | units judged | judging s per unit "
        "| float64 forward s | judging / forward per port | load (1 min) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for model in args.models:
        for port in args.ports or PORTS[model]:
            done = subprocess.run(
                [sys.executable, __file__, "--one", model, port], capture_output=True, text=True, check=False
            )
            if done.returncode != 0:
                print(f"| {model} | {port} | failed: {done.stderr.strip().splitlines()[-1:]} |", flush=True)
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            nports = max(1, r["port"].count("+") + 1)
            absent = f" (absent: {', '.join(r['absent'])})" if r["absent"] else ""
            print(
                f"| {model} | {r['port']}{absent} | {r['compared']} | {r['flagged']} | {r['wall']:.0f} | "
                f"{r['rss_gb']:.2f} | {r['judged_units']} | {r['judging'] / max(r['judged_units'], 1):.2f} | "
                f"{r['forward64']:.2f} | {r['judging'] / nports / r['forward64']:.0f}x | {r['load']:.1f} |",
                flush=True,
            )
            for unit in r["flagged_units"]:
                print(f"<!-- flagged: {model} {unit} -->", flush=True)


if __name__ == "__main__":
    main()
