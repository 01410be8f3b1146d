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


def test_forked_workers_draw_every_op_as_drawing_each_here_does(monkeypatch):
    """A report's figures are drawn by forked workers on several cores: the same PNGs, in order."""
    groups = [_cases([0.2 * (k + 1), 0.01], [2, 2], [64, 64]) for k in range(16)]
    monkeypatch.setattr(plots, "all_cores", lambda: 2)
    pools = []
    pool = plots.ProcessPoolExecutor
    monkeypatch.setattr(plots, "ProcessPoolExecutor", lambda *a, **k: pools.append(a) or pool(*a, **k))
    drawn = plots.op_figures(groups)
    here = [(plots.accuracy_figure(g), plots.speed_figure(g)) for g in groups]
    assert pools == [(2,)]  # two workers, one per core
    assert drawn == here and len({speed for _, speed in drawn}) == 16  # each op its own figure
    monkeypatch.setattr(plots, "ProcessPoolExecutor", None)  # a pool would fail: it must not be used
    assert plots.op_figures(groups[:15]) == here[:15]  # too few to split (one worker per 8 ops)
