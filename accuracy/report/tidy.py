"""The tidy frame a report exports: one row per measured value, one column per meaning.

`load_results` keeps asv's shapes (a benchmark name, a parameter label, `impl_dtype` packing
backend, implementation and dtype). Here each of those becomes its own typed column: op,
backend, implementation, dtype, size and threads as integers, the metric and its direction from
the metric table. `DATA_DICTIONARY` says what every column means; it is written beside the
CSV/Parquet and shown in docs/report.md.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pandas as pd

from accuracy.judge.metric_table import benchmark_class_name
from accuracy.report.fingerprint import FINGERPRINT_COLUMNS
from accuracy.report.measures import higher_is_better

DATA_DICTIONARY: dict[str, str] = {
    "op": "the operation, as `opbench list` names it (e.g. linear)",
    "backend": "the library that ran it (numpy, torch, blas-mkl, ...)",
    "implementation": "the implementation within the backend (e.g. F.linear, x @ W.T + b); for a hand-written "
    "benchmark, its method and parameters (time_end_to_end port=onnxruntime)",
    "dtype": "the storage dtype of inputs and output",
    "size": "the op's size parameter (an integer, as given)",
    "threads": "threads every pool was limited to (an integer)",
    "condition": "the input regime (random, cancelling, ill); random where an op has one",
    "metric": "what the value measures, from accuracy/judge/metric_table.py (time, gflops, max_ulp, ...)",
    "unit": "the value's unit (seconds, GFLOP/s, ulp, ratio, tier, bool, digest, ...)",
    "higher_is_better": "True where a larger value is an improvement (only gflops)",
    "value": "the measured value (timings: the median of the samples); empty if it failed",
    "ci_low": "lower end of asv's 99% confidence interval (timings and GFLOP/s; empty otherwise)",
    "ci_high": "upper end of asv's 99% confidence interval",
    "n_samples": "how many timing samples the value summarises (timings only)",
    "failed": "True if the benchmark failed or the value is NaN (e.g. a vacuous bound ratio)",
    "commit_hash": "the opbench commit the results belong to",
    "commit_date": "that commit's date (UTC)",
    "machine": "the asv machine name",
    "env_name": "the asv environment name",
    "blas": "BLAS libraries loaded, with versions and kernels (from the fingerprint)",
    "blas_threads": "their thread counts (from the fingerprint)",
    "torch_version": "torch version (from the fingerprint)",
    "numpy_version": "numpy version (from the fingerprint)",
    "benchmark": "the asv benchmark (module.Class.method) the value came from",
    "params": "asv's parameter label of the value",
}
COLUMNS = tuple(DATA_DICTIONARY)
assert set(FINGERPRINT_COLUMNS) <= set(COLUMNS), "every fingerprint field needs a data dictionary entry"


def tidy(frame: pd.DataFrame) -> pd.DataFrame:
    """The loaded frame in DATA_DICTIONARY's columns and types."""
    impl, dtype = _impl_and_dtype(frame)
    parts = impl.str.partition(":").reindex(columns=[0, 1, 2])  # all-NA impls (no benchmarks.json) give one column
    backend, name = parts[0], parts[2]
    out = pd.DataFrame(
        {
            "op": frame["benchmark"].map(_op_name),
            "backend": backend.where(name != "", pd.NA),
            "implementation": name.where(name != "", impl).astype("string").fillna(_own_label(frame)),
            "dtype": dtype,
            "size": _integers(frame, "size"),
            "threads": _integers(frame, "threads"),
            "condition": _column(frame, "condition").fillna("random").astype("string"),
            "metric": frame["metric"].astype("string"),
            "unit": frame["unit"].astype("string"),
            "higher_is_better": higher_is_better(frame["metric"]),
            "value": pd.to_numeric(frame["value"], errors="coerce"),
            "ci_low": pd.to_numeric(frame["ci_99_a"], errors="coerce"),
            "ci_high": pd.to_numeric(frame["ci_99_b"], errors="coerce"),
            "n_samples": pd.to_numeric(frame["repeat"], errors="coerce")
            .astype("Int64")
            .where(frame["metric"] == "time"),
            "failed": frame["failed"].astype(bool),
        },
        index=frame.index,
    )
    for column in COLUMNS:  # the rest pass through: commit, machine, environment, fingerprint
        if column not in out:
            out[column] = frame.get(column, pd.NA)
    for column in ("op", "backend", "implementation", "dtype"):
        out[column] = out[column].astype("string")
    return out[list(COLUMNS)].reset_index(drop=True)


def write_data_dictionary(directory: Path) -> tuple[Path, Path]:
    """`data_dictionary.csv` and `.md` beside the exported frame."""
    table = pd.DataFrame({"column": COLUMNS, "meaning": [DATA_DICTIONARY[c] for c in COLUMNS]})
    csv, markdown = Path(directory) / "data_dictionary.csv", Path(directory) / "data_dictionary.md"
    table.to_csv(csv, index=False)
    markdown.write_text(dictionary_markdown(), encoding="utf-8")
    return csv, markdown


def dictionary_markdown() -> str:
    return (
        "\n".join(["| column | meaning |", "|---|---|", *(f"| `{c}` | {DATA_DICTIONARY[c]} |" for c in COLUMNS)]) + "\n"
    )


def _impl_and_dtype(frame: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """The suite packs `impl_dtype` ("torch:F.linear@float32"); older results have two columns."""
    if "impl_dtype" in frame:
        packed = frame["impl_dtype"].astype("string")
        parts = packed.str.rpartition("@")
        impl, dtype = parts[0], parts[2]
        return impl.where(impl != "", packed), dtype.where(impl != "", pd.NA)
    return _column(frame, "impl").astype("string"), _column(frame, "dtype").astype("string")


def _own_label(frame: pd.DataFrame) -> pd.Series:
    """A hand-written benchmark's rows (a model's ports, the references) have no implementation
    parameter: each method and parameter set is its own series, or they would merge into one case."""
    method = frame["benchmark"].astype("string").str.rsplit(".", n=1).str[-1]
    params = _column(frame, "params").fillna("").astype("string")
    return (method + " " + params).str.strip()


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    return frame[name] if name in frame else pd.Series(pd.NA, index=frame.index, dtype="object")


def _integers(frame: pd.DataFrame, name: str) -> pd.Series:
    return pd.to_numeric(_column(frame, name), errors="coerce").round().astype("Int64")


@cache
def _op_names() -> dict[str, str]:
    from accuracy.catalog.registry import all_ops

    return {benchmark_class_name(op.name): op.name for op in all_ops()}


def _op_name(benchmark: str) -> str:
    """`bench_products.Linear.time_op` -> "linear"; a class the registry lacks keeps its name."""
    parts = benchmark.rsplit(".", 2)
    return op_of_class(parts[-2] if len(parts) == 3 else parts[0])


def op_of_class(cls: str) -> str:
    """`Linear` -> "linear": the op a generated benchmark class measures (else the class name)."""
    return _op_names().get(cls, cls)
