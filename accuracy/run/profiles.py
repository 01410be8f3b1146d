"""The suite's named profiles: how lean a grid `opbench run` (and a plain `asv run`) measures.

Every asv result is one benchmark process (asv 0.6 starts one per benchmark and parameter
combination, ~0.1-0.2 s each), so a profile is chosen by how many processes it costs:
`python scripts/measure_loop.py --count` prints them (docs/asv-suite.md). benchmarks/common.py
builds the suite from the profile that OPBENCH_PROFILE names; `opbench run --profile` offers
the same names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from accuracy.backends import framework_names
from accuracy.core.dtypes import ALL_DTYPES
from accuracy.core.threads import all_cores

PROFILE_VAR = "OPBENCH_PROFILE"
EVERY: Literal["every"] = "every"  # Profile.lean_backends: every backend


@dataclass(frozen=True)
class Profile:
    """A named grid of the suite: which dtypes, sizes, threads, implementations and tracks it runs."""

    name: str
    dtypes: tuple[str, ...]
    sizes: int  # how many of each op's bench_sizes to use
    threads: tuple[int, ...]
    # torch.compile costs ~3.5 s per benchmark process even with inductor's disk cache,
    # so only the full profile times it (explain always shows it)
    skip_backends: tuple[str, ...] = ("torch-compile",)
    # backends timed only in their first implementation of each op (their variants are in the full
    # profile; explain always shows them)
    lean_backends: tuple[str, ...] | Literal["every"] = ()
    # the metric table's tracks it records (None: all of them)
    tracks: tuple[str, ...] | None = None
    conditions: int | None = None  # how many of an op's input conditions, the default first (None: all)
    # how many batches `opbench run` splits it into (accuracy/run/batches.py): each costs an asv
    # start-up in each pass (~10 s with the frameworks' preload) and is saved when it ends, so a
    # Ctrl-C loses at most the batch it interrupts: about a minute and a half of work per batch
    batches: int = 2
    # the same, per commit of a history run: each commit is saved as it ends, which bounds the loss already
    history_batches: int = 1

    def lean(self, backend: str) -> bool:
        return self.lean_backends == EVERY or backend in self.lean_backends

    def records(self, metric: str) -> bool:
        return self.tracks is None or metric in self.tracks


BOTH_THREAD_COUNTS = tuple(sorted({1, all_cores()}))
# the frameworks add ~90 parameter combinations to the default run even when lean (docs/asv-suite.md)
FRAMEWORKS = tuple(framework_names())  # each backend says which framework it runs (its `framework`)
# quick and default run at all cores only: every benchmark is its own process, and a 1-thread column
# would double them (docs/asv-suite.md). The 1-thread result is still run and judged there (see
# `_measure_now`); its timing is in the full profile.
QUICK = Profile(
    "quick",
    ("float32",),
    1,
    (all_cores(),),
    # the edit-run loop: numpy, scipy, torch and one BLAS per op, each in its first implementation,
    # at the default input condition, with the verdict and its headline error (docs/asv-suite.md)
    skip_backends=("torch-compile", "onnxruntime-noopt", *FRAMEWORKS),
    lean_backends=EVERY,
    tracks=("verdict_tier", "max_ulp"),
    conditions=1,
    batches=1,  # a one-minute run
)
DEFAULT = Profile(
    "default",
    ("float32",),
    1,
    (all_cores(),),
    skip_backends=("torch-compile", "onnxruntime-noopt"),
    lean_backends=FRAMEWORKS,
)
FULL = Profile("full", ALL_DTYPES, 2, BOTH_THREAD_COUNTS, skip_backends=(), batches=8, history_batches=8)  # hours
PROFILES = {p.name: p for p in (QUICK, DEFAULT, FULL)}


def current_profile() -> Profile:
    """The profile OPBENCH_PROFILE names (asv's benchmark processes inherit it from `opbench run`)."""
    name = os.environ.get(PROFILE_VAR, DEFAULT.name)
    if name not in PROFILES:
        raise ValueError(f"{PROFILE_VAR}={name!r}; choose from {', '.join(PROFILES)}")
    return PROFILES[name]
