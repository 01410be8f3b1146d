"""The metric table: every number opbench records, declared once.

Each entry says what a metric is (where its value comes from, its unit), which way is better,
whether it is deterministic, how `opbench compare` treats a change in it, and its CLI column.
The asv track methods, the report's classification of asv results, compare's slots and the
CLI's columns are all generated from `METRICS`, so adding a metric is one entry here.

Every asv track is lower-is-better, so asv's own tools read every direction right. GFLOP/s is
not measured on its own: it is derived from `time_op`'s samples and the op's flop count.
"""

from __future__ import annotations

from dataclasses import dataclass

# How `opbench compare` treats a change in a metric:
TIME = "time"  # noisy: decided by asv's statistics and the ratio threshold
ACCURACY = "accuracy"  # deterministic error against the exact reference: any change is real
REPRODUCIBILITY = "reproducibility"  # bitwise behaviour across thread counts: reported, never a regression
DERIVED = "derived"  # computed from another metric's samples: shown, never votes
IDENTITY = "identity"  # a digest of the output bits: equal or not, never better or worse

# Which benchmarks record a metric as an asv track:
OPS = "ops"  # every generated op benchmark class (benchmarks/common.py)
MODELS = "models"  # bench_models' hand-written classes, one case per port of a model


@dataclass(frozen=True)
class Metric:
    name: str  # the report's metric name; an asv track is `track_<name>`
    unit: str
    doc: str  # the asv track's docstring, shown on asv's pages
    compare: str  # TIME, ACCURACY, REPRODUCIBILITY or DERIVED
    column: str = ""  # how a table heads it (default: its name)
    explain: bool = False  # a column of `opbench explain`'s per-implementation table
    field: str = ""  # the measured field it reads (ErrorSummary's, or the verdict's)
    deterministic: bool = True
    higher_is_better: bool = False
    asv_track: bool = True  # recorded as an asv track (time_op and derived metrics are not)
    suite: str = OPS  # OPS or MODELS: whose track it is

    @property
    def track(self) -> str:
        return f"track_{self.name}"

    @property
    def label(self) -> str:
        return self.column or self.name.replace("_", " ")


METRICS: tuple[Metric, ...] = (
    Metric(
        "time",
        "seconds",
        "Time of one call of the implementation on the case's inputs.",
        TIME,
        deterministic=False,
        asv_track=False,
    ),
    Metric(
        "gflops",
        "GFLOP/s",
        "The op's flop count over time_op's samples.",
        DERIVED,
        column="GFLOP/s",
        deterministic=False,
        higher_is_better=True,
        asv_track=False,
    ),
    Metric(
        "verdict_tier",
        "tier",
        "The verdict as a number, lower is better: 0 within rounding, 1 suspicious, "
        "2 beyond rounding, 3 undetermined (accuracy.judge.verdicts).",
        ACCURACY,
        column="tier",
        field="verdict_tier",
    ),
    Metric(
        "max_ulp",
        "ulp",
        "Max error in ulps of the result dtype against the exact reference.",
        ACCURACY,
        column="max ulp",
        explain=True,
        field="max_ulp",
    ),
    Metric(
        "max_rel_exact",
        "relative",
        "Max relative error against the exact reference.",
        ACCURACY,
        column="max rel",
        explain=True,
        field="max_rel_exact",
        asv_track=False,
    ),
    Metric(
        "max_rel_fp64",
        "relative",
        "Max relative error against the op evaluated in float64 on the same rounded inputs.",
        ACCURACY,
        field="max_rel_fp64",
    ),
    Metric(
        "bound_ratio",
        "ratio",
        "Max error over its worst-case rounding bound: <= 1 proves the error is "
        "within rounding; NaN where the bound is vacuous (asv stores that like a failure).",
        ACCURACY,
        column="bound ratio",
        explain=True,
        field="bound_ratio",
    ),
    Metric(
        "typical_ratio",
        "ratio",
        "Max error over the typical tier's threshold (what a correct algorithm at "
        "the compute precision errs on these inputs): > 1 is suspicious. NaN where an elementwise contract or "
        "LAPACK's backward-error test judges instead.",
        ACCURACY,
        column="typical ratio",
        explain=True,
        field="typical_ratio",
    ),
    Metric(
        "threshold_ulp",
        "ulp",
        "The smallest error the typical tier flags here, in ulps.",
        ACCURACY,
        column="flags >= ulp",
        explain=True,
        field="threshold_ulp",
        asv_track=False,
    ),
    Metric("nonfinite", "count", "NaN/Inf outputs where the exact value is finite.", ACCURACY, field="nonfinite"),
    Metric(
        "bits_differ_run_to_run",
        "bool",
        "1 if repeated runs of the same call give different bits (the "
        "accuracy tracks then report the worst run), 0 if bitwise reproducible.",
        REPRODUCIBILITY,
        field="bits_differ_run_to_run",
    ),
    Metric(
        "output_digest",
        "digest",
        "52 bits of the SHA-256 of the output: equal values mean bitwise identical "
        "outputs. An identity, not a quality: read a change as 'the bits changed', never as better or worse.",
        IDENTITY,
        field="output_digest",
    ),
    Metric(
        "bits_differ_1_vs_all_threads",
        "bool",
        "1 if one thread and every core give different bits, 0 if bitwise identical.",
        REPRODUCIBILITY,
        field="bits_differ_1_vs_all_threads",
    ),
    Metric(
        "worst_layer_tier",
        "tier (0 within rounding .. 3 undetermined)",
        "A model port's worst layer verdict as a tier, lower is better (benchmarks/bench_models.py): "
        "compared as an op's verdict tier is.",
        ACCURACY,
        column="worst layer tier",
        suite=MODELS,
    ),
    Metric(
        "output_relative_error",
        "relative error",
        "A model port's output: its normwise relative difference from the float64 model.",
        ACCURACY,
        column="output rel",
        suite=MODELS,
    ),
)

BY_NAME = {m.name: m for m in METRICS}
BY_TRACK = {m.track: m for m in METRICS if m.asv_track}
TIME_BENCHMARK = "time_op"  # the one timing method of every generated benchmark class
MODEL_TIME_BENCHMARK = "time_end_to_end"  # and of bench_models' classes: a port's whole model


def metric_for(method: str) -> Metric | None:
    """The metric an asv method records (`time_op`, `track_max_ulp`, ...); None if unknown."""
    return BY_NAME["time"] if method.startswith("time_") else BY_TRACK.get(method)


def tracks() -> tuple[Metric, ...]:
    """The tracks of every generated op benchmark class."""
    return tuple(m for m in METRICS if m.asv_track and m.suite == OPS)


def cli_columns() -> tuple[Metric, ...]:
    """The accuracy columns of `opbench explain`'s per-implementation table, in table order."""
    return tuple(m for m in METRICS if m.explain)


def compared(kind: str) -> tuple[Metric, ...]:
    return tuple(m for m in METRICS if m.compare == kind)


def benchmark_class_name(op_name: str) -> str:
    """The asv benchmark class of an op (`linear` -> `Linear`, `log_softmax` -> `LogSoftmax`)."""
    return "".join(part.capitalize() for part in op_name.split("_"))
