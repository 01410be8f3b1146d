"""CSV and Parquet copies of the tidy frame."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

NOT_EXPORTED = ("samples",)  # raw timing samples: the exported frame keeps asv's statistics of them


def export_frame(frame: pd.DataFrame, stem: Path) -> tuple[Path, Path]:
    """Write `<stem>.csv` and `<stem>.parquet`; CSV for people, Parquet for exact dtypes."""
    csv, parquet = stem.with_suffix(".csv"), stem.with_suffix(".parquet")
    frame = frame.drop(columns=[c for c in NOT_EXPORTED if c in frame])
    frame.to_csv(csv, index=False)
    frame.to_parquet(parquet, index=False)
    return csv, parquet
