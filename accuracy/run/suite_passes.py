"""Each batch of `opbench run` in two asv runs: one that measures, one that only reads.

asv 0.6 starts one process per benchmark and parameter combination by forking its forkserver,
and a fork costs in proportion to the server's memory: measured here (2 cores, a VM) with
`scripts/measure_loop.py --forks`, 0.003 s from a server that imported the suite (76 MB) and
0.032 s from one that preloaded TensorFlow, JAX, ONNX Runtime and torch (975 MB) on an idle
machine, 0.023 s and 0.25 s at load average 5. Of a generated class's benchmarks, only `time_op` and
the first accuracy track (the verdict tier, which measures the case and leaves the result in a
shared folder) run a framework; the other tracks read that result. So the *measure* pass runs
those two with the frameworks preloaded, and the *read* pass runs the other tracks from a server
that preloads nothing. A track whose case was never measured (a `--bench` that selects read
tracks only) measures it itself.

A plain `asv run` sets neither variable: one run with every benchmark, sharing through asv's
`setup_cache` folder as before. The suite (benchmarks/common.py) reads the pass through
`current_pass` where the installed opbench has this module, and runs whole in the first pass
where it does not (a history run of an older commit).
"""

from __future__ import annotations

import os
from typing import Literal

PASS_VAR = "OPBENCH_PASS"
MEASUREMENTS_VAR = "OPBENCH_MEASUREMENTS"  # the folder both passes share measurements through
# the backends (comma-separated) that a `--bench` selection runs: the measure pass's forkserver
# preloads those only, not every framework of the batch's modules (TensorFlow alone costs ~5 CPU-s)
PRELOAD_VAR = "OPBENCH_PRELOAD"
MEASURE: Literal["measure"] = "measure"
READ: Literal["read"] = "read"
PASSES = (MEASURE, READ)


def current_pass() -> Literal["measure", "read"] | None:
    """The pass `opbench run` set for this asv run; None for a plain `asv run` (every benchmark)."""
    value = os.environ.get(PASS_VAR)
    if value is None:
        return None
    if value == MEASURE:
        return MEASURE
    if value == READ:
        return READ
    raise ValueError(f"{PASS_VAR}={value!r}; choose from {', '.join(PASSES)}")
