"""CSV and Parquet copies of the tidy frame, readable back with the same dtypes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

NOT_EXPORTED = ("samples",)  # raw timing samples: the exported frame keeps asv's statistics of them
DATE_COLUMNS = ("commit_date", "started_at", "prev_commit_date")
# Text that can look numeric ("8" threads, version "1", an all-digit hash): never let CSV guess.
TEXT_COLUMNS = (
    "op",
    "backend",
    "implementation",
    "dtype",
    "condition",
    "machine",
    "env_name",
    "commit_hash",
    "prev_commit_hash",
    "file",
    "blas",
    "blas_threads",
    "torch_version",
    "numpy_version",
    "benchmark",
    "params",
    "version",
    "kind",
    "unit",
    "metric",
)


def export_frame(frame: pd.DataFrame, stem: Path) -> tuple[Path, Path]:
    """Write `<stem>.csv` and `<stem>.parquet`; CSV for people, Parquet for exact dtypes."""
    csv, parquet = stem.with_suffix(".csv"), stem.with_suffix(".parquet")
    frame = frame.drop(columns=[c for c in NOT_EXPORTED if c in frame])
    frame.to_csv(csv, index=False)
    frame.to_parquet(parquet, index=False)
    return csv, parquet


def read_frame(path: Path) -> pd.DataFrame:
    """Read an exported frame; CSV dates come back as UTC timestamps like the original."""
    path = Path(path)
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    header = pd.read_csv(path, nrows=0).columns
    frame = pd.read_csv(path, dtype={column: "str" for column in TEXT_COLUMNS if column in header})
    for column in DATE_COLUMNS:
        if column in frame:
            frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame
