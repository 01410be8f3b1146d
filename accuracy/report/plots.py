"""Report figures as base64 PNGs, so index.html stays a single self-contained file.

Figures are built with matplotlib's object API on the Agg canvas (no pyplot global state, no
display needed). Per op: the accuracy of every implementation as horizontal bars on log scales
with the worst-case bound and the typical threshold drawn, and its speed (time vs size where
several sizes were timed, sorted bars where one was). Implementation names are never
shortened; colours come from tab20, and hatches keep more than 20 series apart.
"""

from __future__ import annotations

import base64
import io
import math
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter, LogLocator

from accuracy.core.threads import all_cores
from accuracy.report.load import SERIES_KEYS

DPI = 80
WIDTH = 13.5  # inches: ~1080 px at DPI, the report's column width
ROW = 0.24  # inches per bar
HATCHES = ("", "//", "..", "xx", "\\\\")
ACCURACY_PANELS = (  # metric, title, colour of the reference line at ratio 1 (None: no line)
    ("max_ulp", "max error (ulp)", None),
    ("bound_ratio", "bound ratio (dashed: the bound)", "tab:red"),
    ("typical_ratio", "typical ratio (dashed: threshold)", "tab:orange"),
)
TIER_MARKS = {1: "suspicious", 2: "beyond", 3: "undetermined"}


def to_png_base64(fig: Figure) -> str:
    buffer = io.BytesIO()
    fig.set_dpi(DPI)
    FigureCanvasAgg(fig).print_png(buffer)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def series_style(index: int) -> dict:
    """Colour and hatch of the index-th series: tab20's colours, then again with hatches."""
    colors = colormaps["tab20"].colors  # type: ignore[attr-defined]  # tab20 is a ListedColormap
    return {"color": colors[index % len(colors)], "hatch": HATCHES[index // len(colors) % len(HATCHES)]}


def _labels(cases: pd.DataFrame) -> pd.Series:
    """Full implementation name, plus dtype and condition where the op has several."""
    label = cases["implementation"].astype(str)
    for column in ("dtype", "condition"):
        if cases[column].nunique() > 1:
            label = label + "  " + cases[column].astype(str)
    if "env" in cases and cases["env"].nunique() > 1:
        label = label + "  [" + cases["env"].astype(str) + "]"
    return label


def _styles(labels: list[str]) -> dict[str, dict]:
    return {label: series_style(i) for i, label in enumerate(sorted(set(labels)))}


def _height(rows: int) -> float:
    return max(2.2, 1.3 + ROW * rows)


def _figure(height: float, labels, right: float = 0.98) -> Figure:
    """A figure whose left margin fits the longest y label (fixed margins: matplotlib's layout
    engines measure every tick label several times, seconds per figure on a busy machine)."""
    longest = max((len(str(label)) for label in labels), default=10)
    fig = Figure(figsize=(WIDTH, height))
    inches = lambda points: points / 72  # noqa: E731
    fig.subplots_adjust(
        left=min(0.6, (inches(longest * 5.6) + 0.15) / WIDTH),
        right=right,
        bottom=inches(34) / height,
        top=1 - inches(22) / height,
        wspace=0.14,
    )
    return fig


def _bars(ax, y, widths, styles: list[dict], left=0.0) -> None:
    """One horizontal bar per row, each in its series' colour and hatch (one call: fast)."""
    ax.barh(
        y,
        widths,
        left=left,
        color=[s["color"] for s in styles],
        hatch=[s["hatch"] for s in styles],
        edgecolor="#333",
        linewidth=0.3,
    )


LOG_LABEL_POINTS = 40  # room for one decade label ("1e-05": 28 points at 8 pt) and a gap


def _log_x(ax) -> None:
    """A log x axis with decade ticks only, as many as the panel has room for: minor ticks cost
    a line each to draw, and clutter; matplotlib's own count assumes 3-character labels, and
    "1e-05" labels on a narrow panel ran together ("1e-051e-041e-031e-02")."""
    ax.set_xscale("log")
    ax.minorticks_off()
    width = ax.get_position().width * ax.figure.get_figwidth() * 72  # points: the layout is fixed
    ax.xaxis.set_major_locator(LogLocator(base=10, numticks=max(3, int(width // LOG_LABEL_POINTS))))
    ax.tick_params(axis="x", labelsize=8)
    ax.xaxis.set_major_formatter(LogFormatter())  # 1e-05, 0.01, 100: no mathtext to parse


def accuracy_figure(cases: pd.DataFrame) -> str | None:
    """One op's cases: worst value over sizes and threads per implementation, three log panels."""
    cases = cases.assign(label=_labels(cases))
    present = [panel for panel in ACCURACY_PANELS if panel[0] in cases and cases[panel[0]].notna().any()]
    if not present:
        return None
    worst = cases.groupby("label")[
        [p[0] for p in present] + (["verdict_tier"] if "verdict_tier" in cases else [])
    ].max()
    order = "bound_ratio" if "bound_ratio" in worst else present[0][0]
    worst = worst.sort_values(order, na_position="first")  # the largest error at the top
    styles = _styles(list(worst.index))
    fig = _figure(_height(len(worst)), worst.index, right=0.93)
    axes = fig.subplots(1, len(present), sharey=True, squeeze=False)[0]
    y = np.arange(len(worst))
    for ax, (metric, title, line) in zip(axes, present, strict=False):
        values = worst[metric].to_numpy(dtype=float)
        positive = values[np.isfinite(values) & (values > 0)]
        floor = positive.min() / 10 if positive.size else 1e-3
        if line:
            floor = min(floor, 1e-2)
        drawn = np.isfinite(values) & (values > 0)
        shown = np.where(drawn, values, floor)
        # 0 and n/a have no bar (a stub at the floor read as a real, tiny value): only the words
        _bars(
            ax,
            y,
            np.where(drawn, shown - floor / 10, np.nan),
            [styles[label] for label in worst.index],
            left=floor / 10,
        )
        for i in np.flatnonzero(~drawn):
            ax.text(floor / 10, y[i], " 0" if values[i] == 0 else " n/a", va="center", fontsize=8, color="#555")
        _log_x(ax)
        ax.set_title(title, fontsize=10)
        if line:
            ax.axvline(1.0, color=line, linestyle="--", linewidth=1.4)
            ax.set_xlim(right=max(10.0, np.nanmax(shown) * 3))
        ax.grid(axis="x", which="major", alpha=0.3)
    if "verdict_tier" in worst:
        for row, tier in enumerate(worst["verdict_tier"]):
            if tier == tier and int(tier) in TIER_MARKS:
                axes[-1].annotate(
                    TIER_MARKS[int(tier)],
                    (1, y[row]),
                    xycoords=("axes fraction", "data"),
                    xytext=(4, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=8,
                    color="tab:red" if tier == 2 else "tab:orange",
                    annotation_clip=False,
                )
    axes[0].set_yticks(y, list(worst.index), fontsize=9)
    return to_png_base64(fig)


def op_figures(groups: list[pd.DataFrame]) -> list[tuple[str | None, str | None]]:
    """Each op's accuracy and speed figures. matplotlib draws one in ~0.07 s and a default run's
    report has ~115, so on several cores forked workers draw them (they start with matplotlib
    and pandas imported). A few figures, a platform without fork or a pool that broke: drawn here."""
    workers = min(all_cores(), len(groups) // 8)
    if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
        try:
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
                return list(pool.map(_figures_of_op, groups, chunksize=max(1, len(groups) // (4 * workers))))
        except BrokenProcessPool:
            pass
    return [_figures_of_op(group) for group in groups]


def _figures_of_op(cases: pd.DataFrame) -> tuple[str | None, str | None]:
    return _drawn(accuracy_figure, cases), _drawn(speed_figure, cases)


def _drawn(draw: Callable[..., str | None], *args: object) -> str | None:
    """A figure, or none where matplotlib cannot draw the values: 1e308 from a damaged results file
    makes an axis limit Inf (ValueError) or a log tick overflow, which cost the whole report."""
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            return draw(*args)
    except (ValueError, OverflowError):
        return None


def _threads_label(threads) -> str:
    n = int(threads)
    return f"{n} thread" if n == 1 else f"{n} threads"


def speed_figure(cases: pd.DataFrame) -> str | None:
    """Time vs size (log-log) where several sizes were timed, else sorted bars at the one size."""
    if "time" not in cases:
        return None
    timed = cases.loc[cases["time"].notna()].assign(label=lambda f: _labels(f))
    if timed.empty:
        return None
    if timed["size"].nunique() > 1:
        return _time_vs_size(timed)
    return _sorted_bars(timed)


def _time_vs_size(timed: pd.DataFrame) -> str:
    styles = _styles(list(timed["label"]))
    thread_counts = sorted(timed["threads"].dropna().unique())
    dashes = {t: ("-" if t == max(thread_counts) else "--" if i == 0 else ":") for i, t in enumerate(thread_counts)}
    legend = [f"{label}, {_threads_label(t)}" for label in timed["label"].unique() for t in thread_counts]
    fig = _figure(
        max(3.6, 0.9 + 0.16 * len(legend)),
        ["1e-3 seconds"],
        right=1 - min(0.6, (max(map(len, legend)) * 5.6 / 72 + 0.6) / WIDTH),
    )
    ax = fig.subplots()
    for (label, threads), line in timed.groupby(["label", "threads"]):
        line = line.sort_values("size")
        ax.plot(
            line["size"],
            line["time"],
            marker="o",
            color=styles[label]["color"],
            linestyle=dashes[threads],
            label=f"{label}, {_threads_label(threads)}",
        )
    ax.set(xscale="log", yscale="log", xlabel="size", ylabel="seconds per call", title="time per call against size")
    ax.minorticks_off()
    ax.set_xticks(sorted(timed["size"].unique()), [str(int(s)) for s in sorted(timed["size"].unique())])
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return to_png_base64(fig)


def _sorted_bars(timed: pd.DataFrame) -> str:
    """Bars at the most threads, fastest on top; the other thread counts as markers on the row.
    A benchmark without a thread parameter (bench_references' classes) is all bars."""
    most = timed["threads"].max()
    at_most = timed["threads"] == most if pd.notna(most) else timed["threads"].isna()
    bars = timed.loc[at_most].sort_values("time", ascending=False)
    others = timed.loc[~at_most]
    styles = _styles(list(timed["label"]))
    fig = _figure(_height(len(bars)), bars["label"])
    ax = fig.subplots()
    y = np.arange(len(bars))
    row = dict(zip(bars["label"], y, strict=False))
    _bars(ax, y, bars["time"].to_numpy(), [styles[label] for label in bars["label"]])
    for i, (seconds, rate) in enumerate(zip(bars["time"], bars.get("gflops", bars["time"] * math.nan), strict=False)):
        text = f" {seconds * 1e3:.3g} ms" + (f", {rate:.3g} GFLOP/s" if rate == rate else "")
        ax.text(seconds, i, text, va="center", fontsize=8)
    markers = ("o", "s", "^", "D")
    for k, (threads, points) in enumerate(others.groupby("threads")):
        points = points.loc[points["label"].isin(row)]
        ax.scatter(
            points["time"],
            points["label"].map(row),
            marker=markers[k % len(markers)],
            facecolor="none",
            edgecolor="black",
            zorder=3,
            label=_threads_label(threads),
        )
    ax.set_yticks(y, list(bars["label"]), fontsize=9)
    _log_x(ax)
    ax.set_xlim(right=bars["time"].max() * 20)
    size = timed["size"].dropna()
    where = f" at size {int(size.iloc[0])}" if not size.empty else ""
    title = f"time per call{where}" + (f", bars at {_threads_label(most)}" if pd.notna(most) else "")
    ax.set(xlabel="seconds per call (log)", title=title)
    if not others.empty:
        ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    return to_png_base64(fig)


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
        fig = Figure(figsize=(6, 3.2), layout="tight")
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
        png = _drawn(to_png_base64, fig)
        if png is not None:
            figures.append((f"{key.benchmark} [{key.machine} / {key.env_name}] {key.params}", png))
    return figures
