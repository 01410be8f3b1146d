"""A fleet in one report: the same cases measured on several machines, set side by side.

Each machine runs `opbench run --machine NAME` into asv's results/<machine>/; one results
repository holds them all. Every further machine is compared with the first (by name) through
the same decision `opbench compare` makes (accuracy.report.compare.compare_sets): per case,
whether the output bits are identical, each side's verdict, and the time ratio with the interval
that both sides' 99% confidence intervals allow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from accuracy.core.errors import OpbenchError
from accuracy.report.compare import IDENTICAL, Comparison, compare_sets
from accuracy.report.resultsets import file_stacks, resolve

COLUMNS = [
    "op",
    "impl",
    "dtype",
    "size",
    "threads",
    "bits",
    "verdict_base",
    "verdict_new",
    "time_ratio",
    "time_ratio_low",
    "time_ratio_high",
]


@dataclass
class MachinePair:
    base: str
    other: str
    comparison: Comparison

    def table(self) -> pd.DataFrame:
        """One row per case both machines ran; cases whose verdicts differ first, then changed bits."""
        rows = pd.DataFrame(self.comparison.rows).reindex(columns=COLUMNS)
        rows = rows.rename(
            columns={"verdict_base": f"verdict on {self.base}", "verdict_new": f"verdict on {self.other}"}
        )
        differ = rows[f"verdict on {self.base}"] != rows[f"verdict on {self.other}"]
        changed = rows["bits"] != IDENTICAL
        return rows.assign(_order=~differ * 2 + ~changed).sort_values("_order", kind="stable").drop(columns="_order")

    def headline(self) -> str:
        rows = self.comparison.rows
        identical = sum(row["bits"] == IDENTICAL for row in rows)
        disagree = sum(row["verdict_base"] != row["verdict_new"] for row in rows)
        ratios = [row["time_ratio"] for row in rows if row.get("time_ratio") is not None]
        speed = f"; median time ratio {self.other}/{self.base} {pd.Series(ratios).median():.3g}" if ratios else ""
        return (
            f"{self.other} vs {self.base}: {len(rows)} cases in common, {identical} bitwise identical, "
            f"{disagree} with different verdicts{speed}"
        )


def machine_pairs(frame: pd.DataFrame, results_dir: Path) -> tuple[list[MachinePair], list[str]]:
    """Every machine after the first (in name order) against the first, each at its newest
    commit; and a note for each machine that could not be paired (nothing in common, say)."""
    machines = sorted(frame["machine"].unique())
    if len(machines) < 2:
        return [], []
    stacks = file_stacks(results_dir, frame)
    pairs, notes = [], []
    for other in machines[1:]:
        try:
            base = resolve(frame, machines[0], "BASE", stacks)
            pairs.append(MachinePair(machines[0], other, compare_sets(base, resolve(frame, other, "NEW", stacks))))
        except OpbenchError as exc:
            notes.append(f"{other} not set beside {machines[0]}: {exc}")
    return pairs, notes
