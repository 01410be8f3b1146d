"""Figures drawn from the shapes real results take, including benchmarks without size or threads."""

from __future__ import annotations

import base64

import pandas as pd

from accuracy.report import plots

PNG_MAGIC = b"\x89PNG"


def _cases(times, threads, sizes):
    return pd.DataFrame(
        {
            "implementation": [f"impl{i}" for i in range(len(times))],
            "dtype": "float32",
            "condition": None,
            "time": times,
            "threads": pd.array(threads, dtype="Int64"),
            "size": pd.array(sizes, dtype="Int64"),
        }
    )


def test_speed_bars_for_a_benchmark_without_threads_or_size():
    """bench_references' classes (CorrectlyRounded, ExactGemm) have neither parameter: `make bench`'s
    report crashed on them with 'Axis limits cannot be NaN or Inf'."""
    png = plots.speed_figure(_cases([0.2, 0.01], [None, None], [None, None]))
    assert base64.b64decode(png).startswith(PNG_MAGIC)


def test_speed_bars_at_the_most_threads_with_the_others_as_markers():
    png = plots.speed_figure(_cases([0.2, 0.1, 0.03, 0.02], [1, 2, 1, 2], [512] * 4))
    assert base64.b64decode(png).startswith(PNG_MAGIC)
