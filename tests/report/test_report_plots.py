"""Figures drawn from the shapes real results take, including benchmarks without size or threads."""

from __future__ import annotations

import base64
import itertools
import math

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

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


@pytest.fixture
def drawn(monkeypatch):
    """The figures the next calls draw, as matplotlib objects instead of PNGs."""
    figures: list = []
    monkeypatch.setattr(plots, "to_png_base64", lambda fig: figures.append(fig) or "png")
    return figures


def _accuracy_cases(names, values) -> pd.DataFrame:
    values = np.asarray(values, dtype=float)
    return pd.DataFrame(
        {
            "implementation": names,
            "dtype": "float32",
            "condition": None,
            "max_ulp": values * 100,
            "bound_ratio": values,
            "typical_ratio": values,
            "verdict_tier": 0.0,
        }
    )


@pytest.mark.parametrize(
    ("name_length", "low", "high"),
    [(12, 1e-5, 1e-2), (80, 1e-5, 1e-2), (80, 1e-3, 10), (100, 1e-9, 1e3), (12, 1e-12, 1e4)],
)
def test_log_axis_labels_never_run_together(drawn, name_length, low, high):
    """Long implementation names leave narrow panels: cholesky's and cumsum's decade labels ran
    together ("1e-051e-041e-031e-02"). Each panel keeps at least two labels, apart."""
    names = [f"impl{i}:" + "x" * name_length for i in range(5)]
    plots.accuracy_figure(_accuracy_cases(names, np.geomspace(low, high, 5)))
    (fig,) = drawn
    fig.set_dpi(plots.DPI)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    for ax in fig.axes:
        left, right = ax.get_xlim()
        shown = [t for t in ax.get_xticklabels() if t.get_text() and left <= t.get_position()[0] <= right]
        boxes = [t.get_window_extent(canvas.get_renderer()) for t in shown]
        assert len(boxes) >= 2, ax.get_title()
        assert all(a.x1 < b.x0 for a, b in itertools.pairwise(boxes)), [t.get_text() for t in shown]


def test_zero_and_n_a_are_words_without_a_bar(drawn):
    """A bar stub at the axis floor read as a real, tiny value: 0 and n/a are drawn as absent."""
    cases = _accuracy_cases(["a:nan", "b:zero", "c:real"], [math.nan, 0.0, 0.1])
    plots.accuracy_figure(cases)
    (fig,) = drawn
    for ax in fig.axes:
        rows = {round(patch.get_y() + patch.get_height() / 2): patch.get_width() for patch in ax.patches}
        labels = [t.get_text() for t in ax.get_yticklabels()] or [t.get_text() for t in fig.axes[0].get_yticklabels()]
        width = dict(zip(labels, (rows.get(i, math.nan) for i in range(len(labels))), strict=True))
        assert width["c:real"] > 0 and not width["a:nan"] > 0 and not width["b:zero"] > 0, ax.get_title()
        assert {t.get_text() for t in ax.texts} >= {" n/a", " 0"}


def test_every_speed_chart_is_titled_by_its_measure(drawn):
    """Several report charts were titled only "bars"."""
    plots.speed_figure(_cases([0.2, 0.1, 0.03, 0.02], [1, 2, 1, 2], [512] * 4))
    plots.speed_figure(_cases([0.2, 0.01], [None, None], [None, None]))
    plots.speed_figure(_cases([0.2, 0.1, 0.03, 0.02], [2, 2, 2, 2], [64, 256, 64, 256]))
    titles = [fig.axes[0].get_title() for fig in drawn]
    assert titles == [
        "time per call at size 512, bars at 2 threads",
        "time per call",
        "time per call against size",
    ]
