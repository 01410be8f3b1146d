"""Is an upgrade safe? Compare two asv result sets (BASE, NEW) row by row and give one verdict.

A result set is named the way a user thinks of it: a machine, an asv environment, or a commit
hash prefix; it is resolved against the tidy frame from `accuracy.report.load_results`, and a
name that covers several commits means its latest one.

Each row is one op x parameter combination (implementation, dtype, size, threads). What is
compared, and how, comes from the metric table (`accuracy.metric_table`): time by
`accuracy.report.changes` alone (asv's 99% intervals must separate AND the ratio pass the
threshold; a timing without intervals is inconclusive, never slower); GFLOP/s is derived from
the same samples and only shown; accuracy metrics are deterministic, so any change is real
and lower is better; reproducibility across threads is reported, never a regression.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import pandas as pd

from accuracy.errors import OpbenchError
from accuracy.metric_table import ACCURACY, METRICS, REPRODUCIBILITY, compared
from accuracy.report.changes import DEFAULT_THRESHOLD, timing_change
from accuracy.report.load import load_results, param_columns

DEFAULT_TIME_THRESHOLD = DEFAULT_THRESHOLD

# Every metric of the table is a slot of a row, under its own name.
_SLOTS = tuple(m.name for m in METRICS)
ACCURACY_SLOTS = tuple(m.name for m in compared(ACCURACY))
BITS_DIFFER = compared(REPRODUCIBILITY)[0].name  # 1 if 1 thread and all cores give different bits

# Verdicts, worst first; the first three make the upgrade NOT SAFE (exit status 1).
BEYOND, FAILING, SLOWER = "beyond rounding", "newly failing", "slower"
LESS_ACCURATE, FASTER, MORE_ACCURATE, UNCHANGED = "less accurate", "faster", "more accurate", "unchanged"
VERDICT_ORDER = (BEYOND, FAILING, SLOWER, LESS_ACCURATE, FASTER, MORE_ACCURATE, UNCHANGED)
BAD_VERDICTS = frozenset({BEYOND, FAILING, SLOWER})

_HEX = re.compile(r"^[0-9a-fA-F]{4,40}$")
_KEY_DIMS = ("machine", "env_name")


@dataclass
class ResultSet:
    """The rows one name (BASE or NEW) stands for: a single commit."""

    role: str  # "BASE" or "NEW"
    spec: str
    matched_on: str  # "machine", "env_name" or "commit"
    commit_hash: str
    frame: pd.DataFrame

    def describe(self) -> dict:
        return {
            "spec": self.spec,
            "matched_on": self.matched_on,
            "commit_hash": self.commit_hash,
            "machines": sorted(self.frame["machine"].unique()),
            "env_names": sorted(self.frame["env_name"].unique()),
        }


@dataclass
class Comparison:
    base: ResultSet
    new: ResultSet
    time_threshold: float
    rows: list[dict]
    key_dims: list[str]
    only_in_base: int
    only_in_new: int
    warnings: list[str] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return {v: sum(v in row["verdicts"] for row in self.rows) for v in VERDICT_ORDER}

    @property
    def safe(self) -> bool:
        return not any(row["bad"] for row in self.rows)

    @property
    def exit_code(self) -> int:
        return 0 if self.safe else 1

    def summary(self) -> str:
        counts = self.counts
        pct = f"{(self.time_threshold - 1) * 100:.3g}%"
        extras = []
        if self.safe:
            changed = [r for r in self.rows if LESS_ACCURATE in r["verdicts"] or MORE_ACCURATE in r["verdicts"]]
            within = sum(not _beyond_rounding(r, "new") for r in changed)
            head = f"SAFE: no slowdowns beyond {pct}, " + (
                f"results changed within rounding in {_n(within, 'case')}" if changed else "results unchanged"
            )
            if len(changed) > within:
                extras.append(f"{len(changed) - within} changed while already beyond rounding")
            extras += [f"{counts[v]} {v}" for v in (FASTER,) if counts[v]]
        else:
            parts = []
            if counts[BEYOND]:
                parts.append(f"{_n(counts[BEYOND], 'result')} now beyond rounding")
            if counts[SLOWER]:
                parts.append(f"{_n(counts[SLOWER], 'slowdown')} beyond {pct}")
            if counts[FAILING]:
                parts.append(f"{counts[FAILING]} newly failing")
            head = "NOT SAFE: " + ", ".join(parts)
            extras += [f"{counts[v]} {v}" for v in (LESS_ACCURATE, FASTER, MORE_ACCURATE) if counts[v]]
        lost = sum(r.get(f"{BITS_DIFFER}_base") == 0 and r.get(f"{BITS_DIFFER}_new") == 1 for r in self.rows)
        if lost:
            extras.append(f"bitwise 1-vs-N-thread reproducibility lost in {_n(lost, 'case')}")
        inconclusive = sum(r["time_change"] == "inconclusive" for r in self.rows)
        if inconclusive:
            extras.append(f"timing inconclusive in {_n(inconclusive, 'case')} (no confidence interval: run more samples)")
        extras.append(f"{_n(len(self.rows), 'row')} compared")
        return f"{head} ({'; '.join(extras)})"

    def to_json(self) -> dict:
        return {
            "base": self.base.describe(),
            "new": self.new.describe(),
            "time_threshold": self.time_threshold,
            "matched_on": ["op", "params", *self.key_dims],
            "verdict": "SAFE" if self.safe else "NOT SAFE",
            "summary": self.summary(),
            "exit_code": self.exit_code,
            "counts": self.counts,
            "only_in_base": self.only_in_base,
            "only_in_new": self.only_in_new,
            "warnings": self.warnings,
            "rows": [{k: _jsonable(v) for k, v in row.items()} for row in self.rows],
        }


def compare_results(
    results_dir, base: str, new: str, time_threshold: float = DEFAULT_TIME_THRESHOLD
) -> Comparison:
    """Load `results_dir` and compare result set `new` against `base`."""
    if not (time_threshold > 1 and math.isfinite(time_threshold)):
        raise OpbenchError(f"--time-threshold must be a ratio above 1 (e.g. 1.10), not {time_threshold}")
    loaded = load_results(results_dir)
    base_set = resolve(loaded.frame, base, "BASE", loaded.warnings)
    new_set = resolve(loaded.frame, new, "NEW", loaded.warnings)
    comparison = compare_sets(base_set, new_set, time_threshold)
    comparison.warnings = list(loaded.warnings)
    return comparison


def resolve(frame: pd.DataFrame, spec: str, role: str, warnings: list[str] = ()) -> ResultSet:
    """The rows `spec` names (machine, env name or commit prefix), at its latest commit."""
    matches: dict[str, pd.Series] = {}
    for column in _KEY_DIMS:
        hit = frame[column] == spec
        if hit.any():
            matches[column] = hit
    if _HEX.match(spec):
        hit = frame["commit_hash"].str.lower().str.startswith(spec.lower())
        if hit.any():
            commits = sorted(frame.loc[hit, "commit_hash"].unique())
            if len(commits) > 1:
                raise OpbenchError(
                    f"{role} {spec!r} is ambiguous: it starts {len(commits)} commits "
                    f"({', '.join(c[:12] for c in commits[:8])}); give more of the hash"
                )
            matches["commit"] = hit
    if not matches:
        hint = ""
        if warnings:
            hint = f"; {_n(len(warnings), 'file')}/benchmarks were skipped, first: {warnings[0]}"
        raise OpbenchError(f"{role} {spec!r} names no result set; {_available(frame)}{hint}")
    if len(matches) > 1:
        kinds = " and ".join(_DIM_WORDS[k] for k in matches)
        raise OpbenchError(f"{role} {spec!r} is ambiguous: it is both a {kinds}; {_available(frame)}")
    (matched_on, hit), = matches.items()
    rows = frame.loc[hit]
    latest = rows.sort_values(["commit_date", "started_at"], na_position="first").iloc[-1]["commit_hash"]
    rows = rows.loc[rows["commit_hash"] == latest]
    if rows.empty:  # pragma: no cover - a match always has a latest commit
        raise OpbenchError(f"{role} {spec!r}: no results")
    return ResultSet(role, spec, matched_on, latest, rows)


_DIM_WORDS = {"machine": "machine", "env_name": "environment name", "commit": "commit hash prefix"}


def _available(frame: pd.DataFrame) -> str:
    machines = ", ".join(sorted(frame["machine"].unique()))
    envs = ", ".join(sorted(frame["env_name"].unique()))
    commits = (
        frame.drop_duplicates("commit_hash").sort_values("commit_date", ascending=False)["commit_hash"].str[:8]
    )
    more = f" (+{len(commits) - 10} older)" if len(commits) > 10 else ""
    return f"machines: {machines}; environments: {envs}; commits: {', '.join(commits[:10])}{more}"


def compare_sets(base: ResultSet, new: ResultSet, time_threshold: float = DEFAULT_TIME_THRESHOLD) -> Comparison:
    """One row per op x parameters present in both sets, worst first."""
    # Machine / env name are part of the row key when both sets share a value: comparing two
    # machines that both ran env e1 and e2 pairs e1 with e1; comparing env a with env b does not.
    key_dims = [
        dim for dim in _KEY_DIMS if set(base.frame[dim]) & set(new.frame[dim])
        and (base.frame[dim].nunique() > 1 or new.frame[dim].nunique() > 1)
    ]
    wide_base = _wide(base, key_dims)
    wide_new = _wide(new, key_dims)
    index = ["op", "params", *key_dims]
    merged = wide_base.merge(wide_new, on=index, how="inner", suffixes=("_base", "_new"))
    if merged.empty:
        raise OpbenchError(
            f"BASE {base.spec!r} and NEW {new.spec!r} share no benchmark results "
            f"({len(wide_base)} vs {len(wide_new)} rows, none with the same op and parameters)"
        )
    params = _param_lookup(base.frame)
    rows = [_row(record, index, params, time_threshold) for record in merged.to_dict("records")]
    rows.sort(key=_sort_key)
    return Comparison(
        base, new, time_threshold, rows, key_dims,
        only_in_base=len(wide_base) - len(merged), only_in_new=len(wide_new) - len(merged),
    )


def _wide(result_set: ResultSet, key_dims: list[str]) -> pd.DataFrame:
    """One row per op x params (x key dims); columns <slot>, <slot>_ci_a, <slot>_ci_b, <slot>_failed."""
    frame = result_set.frame.copy()
    split = frame["benchmark"].str.rsplit(".", n=1, expand=True)
    frame["op"] = split[0]
    frame = frame.loc[frame["metric"].isin(_SLOTS)].assign(slot=lambda f: f["metric"])
    index = ["op", "params", *key_dims]
    duplicated = frame.duplicated([*index, "slot"], keep="last")
    if duplicated.any():
        dims = [d for d in _KEY_DIMS if d not in key_dims and frame[d].nunique() > 1]
        what = " and ".join(_DIM_WORDS[d] for d in dims) if dims else "benchmark of the same metric"
        raise OpbenchError(
            f"{result_set.role} {result_set.spec!r} covers more than one {what} "
            f"({', '.join(sorted(frame[dims[0]].unique())) if dims else 'duplicate rows'}) that the other "
            "set cannot be matched against; name a narrower set"
        )
    wide = frame.pivot(index=index, columns="slot", values=["value", "ci_99_a", "ci_99_b", "failed"])
    wide.columns = [slot if stat == "value" else f"{slot}_{stat.replace('ci_99_', 'ci_')}" for stat, slot in wide.columns]
    return wide.reset_index()


def _param_lookup(frame: pd.DataFrame) -> dict[tuple[str, str], dict]:
    columns = param_columns(frame)
    firsts = frame.assign(op=frame["benchmark"].str.rsplit(".", n=1).str[0]).drop_duplicates(["op", "params"])
    return {
        (rec["op"], rec["params"]): {c: rec[c] for c in columns if not _missing(rec[c])}
        for rec in firsts[["op", "params", *columns]].to_dict("records")
    }


def _row(record: dict, index: list[str], params: dict, threshold: float) -> dict:
    p = params.get((record["op"], record["params"]), {})
    if "impl_dtype" in p:
        impl, _, dtype = str(p["impl_dtype"]).rpartition("@")
        impl, dtype = (impl, dtype) if impl else (dtype, None)
    else:
        impl, dtype = p.get("impl"), p.get("dtype")
    row: dict = {
        "op": record["op"].rsplit(".", 1)[-1],
        "benchmark_class": record["op"],
        "impl": impl,
        "dtype": dtype,
        "size": p.get("size"),
        "threads": p.get("threads"),
        "params": record["params"],
    }
    row |= {dim: record[dim] for dim in index[2:]}
    verdicts: list[str] = []

    def get(slot: str, side: str):
        value = record.get(f"{slot}_{side}")
        return None if _missing(value) else float(value)

    failing = [
        slot for slot in _SLOTS
        if get(slot, "base") is not None and _flag(record.get(f"{slot}_failed_new"))
    ]
    if failing:
        verdicts.append(FAILING)
    row["newly_failing"] = failing

    # Speed: time_op's samples alone decide; GFLOP/s is derived from them and only shown.
    t_base, t_new = get("time", "base"), get("time", "new")
    row["time_base"], row["time_new"] = t_base, t_new
    row["time_ratio"] = t_new / t_base if t_base and t_new is not None else None
    row["time_change"] = None
    if row["time_ratio"] is not None:
        intervals = [(get("time_ci_a", side), get("time_ci_b", side)) for side in ("base", "new")]
        row["time_change"] = timing_change(t_base, t_new, *intervals, threshold)
    row["gflops_base"], row["gflops_new"] = get("gflops", "base"), get("gflops", "new")
    if row["time_change"] == "slower":
        verdicts.append(SLOWER)
    elif row["time_change"] == "faster":
        verdicts.append(FASTER)

    # Accuracy: deterministic, so any difference is real; lower error is better.
    worse, better = [], []
    for slot in (*ACCURACY_SLOTS, BITS_DIFFER):
        row[f"{slot}_base"], row[f"{slot}_new"] = get(slot, "base"), get(slot, "new")
    for slot in ACCURACY_SLOTS:
        before, after = row[f"{slot}_base"], row[f"{slot}_new"]
        if before is None or after is None or before == after or (math.isnan(before) and math.isnan(after)):
            continue
        (worse if _is_worse(before, after) else better).append(slot)
    row["accuracy_worse"], row["accuracy_better"] = worse, better
    row["newly_beyond_rounding"] = _left_rounding(row)
    if row["newly_beyond_rounding"]:
        verdicts.append(BEYOND)
    elif worse:
        verdicts.append(LESS_ACCURATE)
    elif better:
        verdicts.append(MORE_ACCURATE)

    verdicts = sorted(set(verdicts), key=VERDICT_ORDER.index) or [UNCHANGED]
    row["verdicts"] = verdicts
    row["verdict"] = ", ".join(verdicts)
    row["bad"] = any(v in BAD_VERDICTS for v in verdicts)
    return row


def _is_worse(before: float, after: float) -> bool:
    if math.isnan(after):
        return True
    if math.isnan(before):
        return False
    return after > before


def _crossed(row: dict, slot: str, limit: float) -> bool:
    """Within `limit` in BASE, above it in NEW (both measured)."""
    before, after = row[f"{slot}_base"], row[f"{slot}_new"]
    return before is not None and after is not None and before <= limit < after


def _flag(value) -> bool:
    return not _missing(value) and bool(value)


def _beyond_rounding(row: dict, side: str) -> bool:
    """Not `within rounding` on that side: by the verdict tier where recorded, else by the bound
    ratio above 1 or any non-finite output; False where nothing was measured."""
    tier = row.get(f"verdict_tier_{side}")
    if tier is not None:
        return tier != 0
    bound, nonfinite = row.get(f"bound_ratio_{side}"), row.get(f"nonfinite_{side}")
    return bool((bound is not None and (bound > 1 or math.isnan(bound))) or (nonfinite is not None and nonfinite > 0))


def _left_rounding(row: dict) -> bool:
    """Within rounding in BASE and not in NEW (suspicious, beyond or undetermined)."""
    if row.get("verdict_tier_base") is not None and row.get("verdict_tier_new") is not None:
        return row["verdict_tier_base"] == 0 and row["verdict_tier_new"] != 0
    return not _beyond_rounding(row, "base") and (_crossed(row, "bound_ratio", 1.0) or _crossed(row, "nonfinite", 0.0))


def _sort_key(row: dict) -> tuple:
    rank = min(VERDICT_ORDER.index(v) for v in row["verdicts"])
    ratio = row["time_ratio"] if row["time_ratio"] is not None else 1.0
    return (rank, -ratio, row["op"], str(row["params"]))


def _missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if hasattr(value, "item"):  # numpy scalars
        return _jsonable(value.item())
    return value


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
