"""Report figures as base64 PNGs, so index.html stays a single self-contained file.

Figures are built with matplotlib's object API on the Agg canvas (no pyplot global state, no
display needed). Each plot family is capped at `limit` figures so a large results directory
still renders in seconds.
"""

from __future__ import annotations

import base64
import io

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from accuracy.report.load import SERIES_KEYS, param_columns

SIZE_PARAM = "size"
THREADS_PARAM = "threads"
ERROR_METRICS = ("ulp", "bound_ratio")


def to_png_base64(fig: Figure) -> str:
    buffer = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buffer)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _latest(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows of the newest commit of each machine and environment."""
    newest = frame.groupby(["machine", "env_name"])["commit_date"].transform("max")
    return frame.loc[(frame["commit_date"] == newest) & ~frame["failed"]]


def _label_columns(frame: pd.DataFrame, exclude: tuple[str, ...]) -> list[str]:
    """Parameter columns (and the environment) that vary within these rows, e.g. impl and dtype."""
    candidates = [c for c in [*param_columns(frame), "env_name"] if c not in exclude]
    return [c for c in candidates if frame[c].nunique() > 1]


def size_scaling(frame: pd.DataFrame, limit: int) -> list[tuple[str, str]]:
    """Time vs size, one line per implementation/dtype/env, at the newest commit."""
    if SIZE_PARAM not in frame:
        return []
    latest = _latest(frame)
    latest = latest.loc[(latest["kind"] == "time") & latest[SIZE_PARAM].notna()]
    figures = []
    for benchmark, rows in list(latest.groupby("benchmark"))[:limit]:
        fig = Figure(figsize=(6, 3.6))
        ax = fig.subplots()
        labels = _label_columns(rows, (SIZE_PARAM,))
        for label, line in rows.groupby(labels) if labels else [((benchmark,), rows)]:
            line = line.sort_values(SIZE_PARAM)
            ax.plot(line[SIZE_PARAM], line["value"], marker="o", label=" ".join(map(str, label)))
        ax.set(xscale="log", yscale="log", xlabel=SIZE_PARAM, ylabel=rows["unit"].iloc[0], title=benchmark)
        ax.legend(fontsize=7)
        figures.append((f"{benchmark}: time vs size", to_png_base64(fig)))
    return figures


def error_bars(frame: pd.DataFrame, limit: int) -> list[tuple[str, str]]:
    """Worst ULP error / bound ratio over sizes, threads and envs, per implementation and dtype."""
    latest = _latest(frame)
    latest = latest.loc[latest["metric"].isin(ERROR_METRICS)]
    figures = []
    for benchmark, rows in list(latest.groupby("benchmark"))[:limit]:
        groups = _label_columns(rows, (SIZE_PARAM, THREADS_PARAM, "env_name")) or ["params"]
        worst = rows.groupby(groups)["value"].max()
        worst = worst.unstack() if len(groups) > 1 else worst
        fig = Figure(figsize=(6, 3.6))
        ax = fig.subplots()
        worst.plot.bar(ax=ax, rot=20)
        ax.set(ylabel=rows["unit"].iloc[0], title=f"{benchmark} (max over other params)")
        figures.append((f"{benchmark}: worst value per {' and '.join(groups)}", to_png_base64(fig)))
    return figures


def history(frame: pd.DataFrame, steps: pd.DataFrame, limit: int) -> list[tuple[str, str]]:
    """Value per commit for the series with the largest steps; regressions red, improvements green."""
    if steps.empty:
        return []
    magnitude = np.abs(np.log(steps["ratio"].where(steps["ratio"] > 0)))
    chosen = steps.assign(magnitude=magnitude.fillna(np.inf)).sort_values("magnitude", ascending=False)
    chosen = chosen.drop_duplicates(SERIES_KEYS).head(limit)
    order = frame.drop_duplicates("commit_hash").sort_values("commit_date")["commit_hash"].tolist()
    position = {commit: i for i, commit in enumerate(order)}
    frame_series, step_series = frame.groupby(SERIES_KEYS), steps.groupby(SERIES_KEYS)
    figures = []
    for key in chosen[SERIES_KEYS].itertuples(index=False):
        rows = frame_series.get_group(tuple(key)).sort_values("commit_date")
        series_steps = step_series.get_group(tuple(key))
        fig = Figure(figsize=(6, 3.2))
        ax = fig.subplots()
        ax.plot(rows["commit_hash"].map(position), rows["value"], marker="o", color="tab:blue")
        value_at = rows.set_index("commit_hash")["value"]
        for change, color in (("regression", "tab:red"), ("improvement", "tab:green")):
            commits = series_steps.loc[series_steps["change"] == change, "commit_hash"]
            ax.scatter(commits.map(position), commits.map(value_at), s=120, color=color, zorder=3, label=change)
        ax.set_xticks(range(len(order)), [commit[:8] for commit in order], rotation=45, fontsize=7)
        ax.set_ylabel(rows["unit"].iloc[0])
        ax.set_title(f"{key.benchmark} [{key.env_name}]\n{key.params}", fontsize=8)
        ax.legend(fontsize=7)
        fig.tight_layout()
        figures.append((f"{key.benchmark} [{key.machine} / {key.env_name}] {key.params}", to_png_base64(fig)))
    return figures
