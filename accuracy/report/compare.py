"""Is an upgrade safe? Compare two asv result sets (BASE, NEW) case by case and give one verdict.

A case is one op x parameter combination (implementation, dtype, size, condition, threads).
What is compared comes from the metric table (`accuracy.judge.metric_table`):
- **Time** by `time_op`'s samples alone (`accuracy.report.changes`: asv's test and the ratio
  threshold). Too few samples, or a ratio past the threshold that asv's test does not confirm,
  is "inconclusive", never "slower". GFLOP/s is derived from the same samples and only shown.
- **Accuracy** by verdict tier: a case that leaves `within rounding` (or goes from suspicious to
  beyond rounding) makes the upgrade NOT SAFE; a change that stays within rounding is reported
  as such. Results without a tier track are judged by the bound ratio alone.
- **Controls**: at one commit, the implementations whose libraries did not change between BASE and
  NEW (the fingerprints' stack difference touches none of their packages or BLAS libraries) time
  the machine's drift between the two runs. Every case is judged against that drift (BASE's
  samples scaled by the controls' median ratio), and a control that moved is inconclusive, never
  slower: only a changed library can make an upgrade NOT SAFE.
- **Bits** by output digest: bitwise identical, changed within rounding, changed beyond
  rounding. A case whose bits differ from run to run is compared as "not reproducible", never
  as a regression.

Exit status: 0 SAFE, 1 NOT SAFE, 3 INCONCLUSIVE (nothing got worse, but some timing could not be
decided); bad input is 2, as everywhere in opbench.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from accuracy.core.errors import OpbenchError
from accuracy.core.fingerprints import read_load
from accuracy.core.json_output import json_ready
from accuracy.judge.metric_table import (
    ACCURACY,
    BY_NAME,
    IDENTITY,
    MODEL_TIME_BENCHMARK,
    REPRODUCIBILITY,
    TIME_BENCHMARK,
    compared,
)
from accuracy.judge.verdicts import OP_VERDICTS, WITHIN, Verdict, bound_verdict
from accuracy.report import changes
from accuracy.report.changes import DEFAULT_THRESHOLD, Timing, ratio_interval, timing_change
from accuracy.report.load import load_results, param_columns
from accuracy.report.resultsets import KEY_DIMS, VARIES, ResultSet, file_stacks, resolve
from accuracy.report.stack import parts_used, stack_difference

DEFAULT_TIME_THRESHOLD = DEFAULT_THRESHOLD
SAFE, NOT_SAFE, INCONCLUSIVE = "SAFE", "NOT SAFE", "INCONCLUSIVE"
EXIT_CODES = {SAFE: 0, NOT_SAFE: 1, INCONCLUSIVE: 3}

ACCURACY_SLOTS = tuple(m.name for m in compared(ACCURACY))
TIER = BY_NAME["verdict_tier"].name
MODEL_TIER = BY_NAME["worst_layer_tier"].name  # a model port's: compared as an op's tier is
RUN_TO_RUN = BY_NAME["bits_differ_run_to_run"].name
THREADS_DIFFER = BY_NAME["bits_differ_1_vs_all_threads"].name
DIGEST = compared(IDENTITY)[0].name
_SLOTS = ("time", "gflops", *ACCURACY_SLOTS, *(m.name for m in compared(REPRODUCIBILITY)), DIGEST)
_FAILURE_SLOTS = ("time", TIER, MODEL_TIER, "max_ulp")  # never NaN by design: missing means the benchmark failed

# bits of a case between BASE and NEW; a change is named by NEW's verdict
IDENTICAL, NOT_REPRODUCIBLE, NO_DIGEST = "bitwise identical", "not reproducible", "no digest"
CHANGED_BITS = ("changed within rounding", "changed, suspicious", "changed beyond rounding", "changed, undetermined")
# row verdicts, worst first; leaving within rounding, failing and slower make the upgrade NOT SAFE
FAILING, SLOWER = "newly failing", "slower"
LEFT_WITHIN = tuple(f"now {v}" for v in OP_VERDICTS if v != WITHIN)  # now suspicious / beyond / undetermined
TIME_INCONCLUSIVE, NOW_WITHIN, FASTER = "speed inconclusive", f"now {WITHIN}", "faster"
CHANGED_WITHIN, STILL_OUTSIDE, UNCHANGED = CHANGED_BITS[0], f"changed, still not {WITHIN}", "unchanged"
BAD = frozenset({*LEFT_WITHIN, FAILING, SLOWER})
VERDICT_ORDER = (
    *LEFT_WITHIN,
    FAILING,
    SLOWER,
    TIME_INCONCLUSIVE,
    STILL_OUTSIDE,
    CHANGED_WITHIN,
    NOW_WITHIN,
    FASTER,
    NOT_REPRODUCIBLE,
    UNCHANGED,
)


MIN_CONTROLS = 3  # timed control cases needed before their median is taken as the machine's drift


@dataclass(frozen=True)
class Controls:
    """The cases whose implementations' libraries did not change between BASE and NEW, and how far
    their times moved (NEW / BASE, median): what the machine itself did between the two runs."""

    cases: int
    backends: tuple[str, ...]
    drift: float  # 1.0 where fewer than MIN_CONTROLS cases are timed

    @property
    def measured(self) -> bool:
        return self.cases >= MIN_CONTROLS

    def describe(self) -> str:
        return (
            f"unchanged controls ({_n(self.cases, 'case')} of {', '.join(self.backends)}) "
            f"moved {self.drift:.2f}x (median)"
        )


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
    busy: list[str] = field(default_factory=list)  # why timings are not comparable (busy_machine)
    overlap: str | None = None  # what BASE and NEW share (`overlap`), said in the summary
    controls: Controls | None = None  # the unchanged implementations and their drift; None without
    confirmed: bool = False  # decided on the first samples and those `compare --confirm` added

    @property
    def counts(self) -> dict[str, int]:
        return {v: sum(v in row["verdicts"] for row in self.rows) for v in VERDICT_ORDER}

    @property
    def verdict(self) -> str:
        if any(row["bad"] for row in self.rows):
            return NOT_SAFE
        return INCONCLUSIVE if any(row["time_change"] == changes.INCONCLUSIVE for row in self.rows) else SAFE

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    @property
    def stack_difference(self) -> list[tuple[str, str, str]]:
        return stack_difference(self.base.stack, self.new.stack)

    def bits(self) -> dict[str, int]:
        """How many cases are bitwise identical, changed (by NEW's verdict) or not reproducible."""
        out: dict[str, int] = {}
        for row in self.rows:
            out[row["bits"]] = out.get(row["bits"], 0) + 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def summary(self) -> list[str]:
        """The verdict line, then one line each on bits and on speed."""
        counts, pct = self.counts, f"{(self.time_threshold - 1) * 100:.3g}%"
        timed = sum(row["time_change"] is not None for row in self.rows)
        undecided = sum(row["time_change"] == changes.INCONCLUSIVE for row in self.rows)
        verdict = self.verdict
        if verdict == NOT_SAFE:
            left = sum(counts[v] for v in LEFT_WITHIN)
            parts = (
                [
                    f"{_n(left, 'case')} left within rounding ("
                    + ", ".join(f"{counts[v]} {v}" for v in LEFT_WITHIN if counts[v])
                    + ")"
                ]
                if left
                else []
            )
            if counts[SLOWER]:
                parts.append(f"{_n(counts[SLOWER], 'significant slowdown')} beyond {pct}{self._beyond_controls()}")
            if counts[FAILING]:
                parts.append(f"{counts[FAILING]} newly failing")
            head = "NOT SAFE: " + ", ".join(parts)
        else:
            head = f"{verdict}: no case left within rounding, no significant slowdown beyond {pct}"
            if verdict == INCONCLUSIVE and self.busy:
                head += (
                    f"; but the speed of {undecided} of {timed} timed cases is undecided: the machine was "
                    f"busy ({'; '.join(self.busy)}), so no time difference is taken as real: rerun on an "
                    "idle machine"
                )
            elif verdict == INCONCLUSIVE:
                moved = sum(row["control"] and row["time_moved"] for row in self.rows)
                head += (
                    f"; but the speed of {undecided} of {timed} timed cases is undecided (fewer than 2 "
                    "samples, or a change asv's test does not confirm"
                    + (f"; {_n(moved, 'control')} moved beyond the controls' median" if moved else "")
                    + "): rerun with more samples"
                )
        if self.controls is not None and self.controls.measured and not (verdict == NOT_SAFE and counts[SLOWER]):
            head += f"; time judged against {self.controls.describe()}"
        bits = "bits: " + ", ".join(f"{count} {what}" for what, count in self.bits().items())
        speed = [f"{counts[v]} {v}" for v in (SLOWER, FASTER) if counts[v]]
        speed.append(f"{timed - counts[SLOWER] - counts[FASTER] - undecided} same")
        if undecided:
            speed.append(f"{undecided} inconclusive")
        lost = sum(row[f"{THREADS_DIFFER}_base"] == 0 and row[f"{THREADS_DIFFER}_new"] == 1 for row in self.rows)
        tail = f"; 1-vs-all-threads bitwise reproducibility lost in {_n(lost, 'case')}" if lost else ""
        lines = [head, f"{bits} (of {_n(len(self.rows), 'case')})", f"speed: {', '.join(speed)}{tail}"]
        lines += [self.overlap] if self.overlap else []
        if self.confirmed:
            return [*lines, "decided once on both runs' samples (compare --confirm added the second beside the first)"]
        return lines + ([self.confirm_slowdowns()] if counts[SLOWER] else [])

    def _beyond_controls(self) -> str:
        """ "(unchanged controls ... moved 1.40x (median); blas-x:gemv 1.50x beyond them)" """
        if self.controls is None or not self.controls.measured:
            return ""
        beyond: dict[str, list[float]] = {}
        for row in self.rows:
            if SLOWER in row["verdicts"]:
                beyond.setdefault(str(row["impl"]), []).append(row["time_ratio_beyond_controls"])
        named = [
            f"{impl} {max(ratios):.2f}x" + (f" (worst of {len(ratios)} cases)" if len(ratios) > 1 else "")
            for impl, ratios in beyond.items()
        ]
        more = f" and {len(named) - 3} more" if len(named) > 3 else ""
        return f" ({self.controls.describe()}; {', '.join(named[:3])}{more} beyond them)"

    def doubtful_classes(self) -> list[str]:
        """The benchmark classes whose speed is not settled: a slowdown, or a timing left inconclusive."""
        return sorted(
            {
                row["benchmark_class"]
                for row in self.rows
                if SLOWER in row["verdicts"] or row["time_change"] == changes.INCONCLUSIVE
            }
        )

    def confirm_slowdowns(self) -> str:
        """How to confirm the slowdowns: each side's samples of a case come from one process, run
        back to back, so a slow spell of the machine shifts them all and asv's test takes it for
        a change (an idle rerun of the whole matrix found 3 such, 1.25-1.91x, gone on a rerun).
        `--confirm` reruns the doubtful classes into the same results, beside the first samples,
        and decides once on all of them; the report and the pages stay as they are."""
        classes = sorted({row["benchmark_class"] for row in self.rows if SLOWER in row["verdicts"]})
        return (
            f"confirm the slowdowns ({', '.join(classes)}): opbench compare {self.base.spec!r} {self.new.spec!r} "
            "--confirm (with this run's --results, --config and --profile) reruns the doubtful classes and "
            "decides once on both runs' samples"
        )

    def to_json(self) -> dict:
        """The comparison as strict JSON holds it (accuracy.core.json_output: inf and NaN as null, with a reason)."""
        return json_ready(
            {
                "base": self.base.describe(),
                "new": self.new.describe(),
                "stack_difference": [{"what": w, "base": b, "new": n} for w, b, n in self.stack_difference],
                "time_threshold": self.time_threshold,
                "matched_on": ["op", "params", *self.key_dims],
                "verdict": self.verdict,
                "summary": self.summary(),
                "exit_code": self.exit_code,
                "counts": self.counts,
                "bits": self.bits(),
                "only_in_base": self.only_in_base,
                "only_in_new": self.only_in_new,
                "warnings": self.warnings,
                "busy": self.busy,
                "overlap": self.overlap,
                "confirmed": self.confirmed,
                "controls": None
                if self.controls is None
                else {
                    "cases": self.controls.cases,
                    "backends": list(self.controls.backends),
                    "drift": self.controls.drift,
                },
                "rows": self.rows,
            }
        )


def compare_results(results_dir, base: str, new: str, time_threshold: float = DEFAULT_TIME_THRESHOLD) -> Comparison:
    """Load `results_dir` and compare result set `new` against `base`."""
    if not (time_threshold > 1 and math.isfinite(time_threshold)):
        raise OpbenchError(f"--time-threshold must be a ratio above 1 (e.g. 1.10), not {time_threshold}")
    loaded = load_results(results_dir)
    comparison = compare_specs(loaded.frame, results_dir, base, new, time_threshold, loaded.warnings)
    comparison.warnings = list(loaded.warnings)
    return comparison


def compare_specs(
    frame: pd.DataFrame,
    results_dir,
    base: str,
    new: str,
    time_threshold: float = DEFAULT_TIME_THRESHOLD,
    warnings: Sequence[str] = (),
) -> Comparison:
    """THE decision on BASE against NEW in `frame`: `opbench compare` and the report's Changes
    section both call this, so they cannot disagree (they did: the report left out the busy-machine
    rule and called timings faster that compare called inconclusive)."""
    stacks = file_stacks(results_dir, frame)
    base_set = resolve(frame, base, "BASE", stacks, warnings)
    new_set = resolve(frame, new, "NEW", stacks, warnings)
    busy = [why for s in (base_set, new_set) if (why := busy_machine(results_dir, s))]
    return compare_sets(base_set, new_set, time_threshold, busy)


def _files(result_set: ResultSet) -> set[tuple[str, str]]:
    return set(result_set.frame[["machine", "file"]].drop_duplicates().itertuples(index=False, name=None))


def overlap(base: ResultSet, new: ResultSet) -> str | None:
    """What BASE and NEW share: a set compared with itself is bad input (every case would be
    "unchanged" by construction); sets that share some results files are said to."""
    base_files, new_files = _files(base), _files(new)
    if base_files == new_files:
        raise OpbenchError(
            f"BASE {base.spec!r} and NEW {new.spec!r} are the same result set "
            f"({_n(len(base_files), 'results file')}): name two different sets to compare"
        )
    shared = sorted(base_files & new_files)
    if not shared:
        return None
    return (
        f"BASE and NEW overlap: {_n(len(shared), 'results file')} in both ("
        + ", ".join(f"{m}/{f}" for m, f in shared)
        + "); their cases compare with themselves"
    )


def compare_sets(
    base: ResultSet, new: ResultSet, time_threshold: float = DEFAULT_TIME_THRESHOLD, busy: Sequence[str] = ()
) -> Comparison:
    """One row per case present in both sets, worst first. `busy` says when the machine was busy
    (`busy_machine`): a timing change is then inconclusive, never slower or faster."""
    # Machine / env name are part of the row key when both sets share a value: comparing two
    # machines that both ran env e1 and e2 pairs e1 with e1; comparing env a with env b does not.
    key_dims = [
        dim
        for dim in KEY_DIMS
        if set(base.frame[dim]) & set(new.frame[dim])
        and (base.frame[dim].nunique() > 1 or new.frame[dim].nunique() > 1)
    ]
    shared = overlap(base, new)
    for side, other in ((base, new), (new, base)):
        one_stack(side, other)
    wide_base, wide_new = _wide(base, key_dims), _wide(new, key_dims)
    index = ["op", "params", *key_dims]
    merged = wide_base.merge(wide_new, on=index, how="inner", suffixes=("_base", "_new"))
    if merged.empty:
        raise OpbenchError(
            f"BASE {base.spec!r} and NEW {new.spec!r} share no benchmark results "
            f"({len(wide_base)} vs {len(wide_new)} cases, none with the same op and parameters)"
        )
    params = _param_lookup(base.frame)
    records = merged.to_dict("records")
    changed = _changed_parts(base, new)
    backends = [_backend(params.get((r["op"], r["params"]), {})) for r in records]
    is_control = [changed is not None and not parts_used(b, changed) for b in backends]
    controls = _controls(records, backends, is_control) if changed is not None else None
    drift = controls.drift if controls is not None else 1.0
    rows = [
        _row(record, index, params, time_threshold, bool(busy), drift, control)
        for record, control in zip(records, is_control, strict=True)
    ]
    rows.sort(key=_sort_key)
    return Comparison(
        base,
        new,
        time_threshold,
        rows,
        key_dims,
        only_in_base=len(wide_base) - len(merged),
        only_in_new=len(wide_new) - len(merged),
        busy=list(busy),
        overlap=shared,
        controls=controls,
    )


def _changed_parts(base: ResultSet, new: ResultSet) -> list[str] | None:
    """The parts of the stack that differ between BASE and NEW; None where no case can serve as a
    control: a side without a fingerprint, two commits (the benchmarked code itself may differ),
    or two machines (the machine is then what changed, not a drift to allow for)."""
    if base.stack is None or new.stack is None or base.commit_hash != new.commit_hash:
        return None
    if set(base.frame["machine"]) != set(new.frame["machine"]):
        return None
    return [what for what, _, _ in stack_difference(base.stack, new.stack)]


def _backend(params: dict) -> str:
    impl = str(params.get("impl_dtype") or params.get("impl") or "")
    return impl.partition(":")[0] if ":" in impl else ""


def _controls(records: list[dict], backends: list[str], is_control: list[bool]) -> Controls | None:
    """The drift of the controls' times: the median of their NEW / BASE ratios."""
    ratios = [
        r["time_new"] / r["time_base"]
        for r, control in zip(records, is_control, strict=True)
        if control and not (_missing(r.get("time_base")) or _missing(r.get("time_new"))) and r["time_base"] > 0
    ]
    if not ratios:
        return None
    names = sorted({b for b, control in zip(backends, is_control, strict=True) if control})
    drift = statistics.median(ratios) if len(ratios) >= MIN_CONTROLS else 1.0
    return Controls(len(ratios), tuple(names), drift)


def one_stack(side: ResultSet, other: ResultSet) -> None:
    """A set that spans environments of different stacks compares only env by env with a set of
    the same environments; against anything else its stack difference would read "(varies)" and
    its cases would stand for no one stack: bad input, naming the environments to choose from."""
    envs = sorted(set(side.frame["env_name"]))
    if len(envs) > 1 and side.stack and VARIES in side.stack.values() and set(envs) != set(other.frame["env_name"]):
        raise OpbenchError(
            f"{side.role} {side.spec!r} covers {len(envs)} environments with different stacks "
            f"({', '.join(envs)}): name one of them instead"
        )


def busy_machine(results_dir, result_set: ResultSet) -> str | None:
    """Why this set's timings cannot be compared with another run's: other work competed for the
    CPUs (a 1-minute load average above the CPU count plus one, the benchmark's own threads
    and asv's process), so a time difference may be the machine's, not the software's."""
    pairs = result_set.frame[["machine", "file"]].drop_duplicates().itertuples(index=False)
    return busy_files(results_dir, pairs, result_set.role)


def busy_files(results_dir, pairs, during: str) -> str | None:
    """The busy-machine rule for the results files `pairs` ((machine, file name)), or None."""
    loads = [load for m, f in pairs if (load := read_load(Path(results_dir) / m / f))]
    if not loads:
        return None
    highest, cpus = max(loads)
    return f"load average up to {highest:.3g} on {cpus} CPUs during {during}" if highest > cpus + 1 else None


_STATS = ("value", "ci_99_a", "ci_99_b", "repeat", "samples", "failed")


def _wide(result_set: ResultSet, key_dims: list[str]) -> pd.DataFrame:
    """One row per case; columns <slot>, <slot>_ci_99_a, ..., <slot>_failed."""
    frame = result_set.frame.copy()
    frame["op"] = frame["benchmark"].str.rsplit(".", n=1).str[0]
    # time by time_op alone (a model port's by its end-to-end run): a class may time more
    # (bench_references' time_reference, time_dgemm)
    method = frame["benchmark"].str.rsplit(".", n=1).str[-1]
    timed_op = (frame["metric"] != "time") | method.isin([TIME_BENCHMARK, MODEL_TIME_BENCHMARK])
    frame = frame.loc[frame["metric"].isin(_SLOTS) & timed_op].assign(slot=lambda f: f["metric"])
    index = ["op", "params", *key_dims]
    if frame.duplicated([*index, "slot"]).any():
        dims = [d for d in KEY_DIMS if d not in key_dims and frame[d].nunique() > 1]
        what = " and ".join(d.replace("env_name", "environment") for d in dims) or "benchmark of the same metric"
        listed = ", ".join(sorted(frame[dims[0]].unique())) if dims else "duplicate rows"
        raise OpbenchError(
            f"{result_set.role} {result_set.spec!r} covers more than one {what} ({listed}) "
            "that the other set cannot be matched against; name a narrower set"
        )
    stats = [s for s in _STATS if s in frame.columns]
    wide = frame.pivot(index=index, columns="slot", values=stats)
    wide.columns = [slot if stat == "value" else f"{slot}_{stat}" for stat, slot in wide.columns]
    return wide.reset_index()


def _param_lookup(frame: pd.DataFrame) -> dict[tuple[str, str], dict]:
    columns = param_columns(frame)
    firsts = frame.assign(op=frame["benchmark"].str.rsplit(".", n=1).str[0]).drop_duplicates(["op", "params"])
    return {
        (rec["op"], rec["params"]): {c: _as_given(rec[c]) for c in columns if not _missing(rec[c])}
        for rec in firsts[["op", "params", *columns]].to_dict("records")
    }


def _row(
    record: dict, index: list[str], params: dict, threshold: float, busy: bool, drift: float, control: bool
) -> dict:
    p = params.get((record["op"], record["params"]), {})
    impl, _, dtype = str(p.get("impl_dtype", "")).rpartition("@")
    row: dict = (
        {
            "op": record["op"].rsplit(".", 1)[-1],
            "benchmark_class": record["op"],
            "impl": impl or p.get("impl") or p.get("port"),  # a model's port is its implementation
            "dtype": dtype or p.get("dtype"),
            "size": p.get("size"),
            "condition": p.get("condition"),
            "threads": p.get("threads"),
            "params": record["params"],
            "control": control,
        }
        | {dim: record[dim] for dim in index[2:]}
    )

    def get(slot: str, side: str) -> float | None:
        value: Any = record.get(f"{slot}_{side}")
        return None if _missing(value) else float(value)

    for slot in _SLOTS:
        row[f"{slot}_base"], row[f"{slot}_new"] = get(slot, "base"), get(slot, "new")
    verdicts: list[str] = []
    row["newly_failing"] = [
        s
        for s in _FAILURE_SLOTS
        if get(s, "base") is not None and get(s, "new") is None and _flag(record.get(f"{s}_failed_new"))
    ]
    if row["newly_failing"]:
        verdicts.append(FAILING)
    verdicts += _speed(row, record, threshold, busy, drift)
    verdicts += _accuracy(row)
    verdicts = sorted(set(verdicts), key=VERDICT_ORDER.index) or [UNCHANGED]
    row["verdicts"] = verdicts
    row["verdict"] = ", ".join(verdicts)
    row["bad"] = any(v in BAD for v in verdicts)
    return row


def _speed(row: dict, record: dict, threshold: float, busy: bool, drift: float) -> list[str]:
    """time_op's samples decide, against the controls' drift; GFLOP/s (derived from them) is only shown."""
    t_base, t_new = row["time_base"], row["time_new"]
    row["time_ratio"] = t_new / t_base if t_base and t_new is not None else None
    row["time_change"] = row["time_ratio_low"] = row["time_ratio_high"] = row["time_ratio_beyond_controls"] = None
    row["time_moved"] = False
    if row["time_ratio"] is None:
        return []
    base, new = (_timing(record, side) for side in ("base", "new"))
    row["time_samples_base"], row["time_samples_new"] = base.repeat, new.repeat
    row["time_ratio_beyond_controls"] = row["time_ratio"] / drift
    row["time_change"] = timing_change(base.scaled(drift), new, threshold)
    row["time_ratio_low"], row["time_ratio_high"] = ratio_interval(base, new) or (None, None)
    row["time_moved"] = row["time_change"] in (changes.SLOWER, changes.FASTER)
    if row["time_moved"] and (busy or row["control"]):  # a control's move is the machine's, or noise
        row["time_change"] = changes.INCONCLUSIVE
    return (
        [{changes.SLOWER: SLOWER, changes.FASTER: FASTER, changes.INCONCLUSIVE: TIME_INCONCLUSIVE}[row["time_change"]]]
        if row["time_change"] != changes.SAME
        else []
    )


def _timing(record: dict, side: str) -> Timing:
    return Timing.of(
        record[f"time_{side}"],
        *(record.get(f"time_{stat}_{side}") for stat in ("ci_99_a", "ci_99_b", "repeat", "samples")),
    )


def _accuracy(row: dict) -> list[str]:
    """Verdict tiers decide; bits and errors say what changed within a tier."""
    tier_base, tier_new = _tier(row, "base"), _tier(row, "new")
    row["verdict_base"] = None if tier_base is None else Verdict.of_tier(tier_base)
    row["verdict_new"] = None if tier_new is None else Verdict.of_tier(tier_new)
    reproducible = not (row[f"{RUN_TO_RUN}_base"] == 1 or row[f"{RUN_TO_RUN}_new"] == 1)
    row["bits"] = _bits(row, reproducible, tier_new)
    if tier_base is None or tier_new is None:
        return []
    out = [] if reproducible else [NOT_REPRODUCIBLE]
    if tier_base != tier_new and (tier_new == 0 or tier_base == 0 or (tier_base, tier_new) == (1, 2)):
        # leaving within rounding is bad, and so is suspicious -> beyond rounding
        return [*out, f"now {Verdict.of_tier(tier_new)}"]
    if row["bits"] in (IDENTICAL, NOT_REPRODUCIBLE) or (row["bits"] == NO_DIGEST and _errors_equal(row)):
        return out
    return [*out, CHANGED_WITHIN if tier_new == 0 else STILL_OUTSIDE]


def _tier(row: dict, side: str) -> int | None:
    """The verdict tier; for results from before the tier track, the judge's bound-only rule."""
    tier = row[f"{TIER}_{side}"]
    tier = row[f"{MODEL_TIER}_{side}"] if tier is None else tier
    if tier is not None:
        return int(tier)
    bound, nonfinite = row[f"bound_ratio_{side}"], row[f"nonfinite_{side}"]
    if nonfinite is None and bound is None:
        return None
    return bound_verdict(bound, nonfinite).tier


def _bits(row: dict, reproducible: bool, tier_new: int | None) -> str:
    if not reproducible:
        return NOT_REPRODUCIBLE
    digest_base, digest_new = row[f"{DIGEST}_base"], row[f"{DIGEST}_new"]
    if digest_base is None or digest_new is None:
        if _errors_equal(row):
            return NO_DIGEST
    elif digest_base == digest_new:
        return IDENTICAL
    return "changed" if tier_new is None else CHANGED_BITS[tier_new]


def _errors_equal(row: dict) -> bool:
    return all(_same(row[f"{s}_base"], row[f"{s}_new"]) for s in ACCURACY_SLOTS)


def _same(a, b) -> bool:
    return a == b or (a is None and b is None) or (a is not None and b is not None and math.isnan(a) and math.isnan(b))


def _sort_key(row: dict) -> tuple:
    rank = min(VERDICT_ORDER.index(v) for v in row["verdicts"])
    ratio = row["time_ratio"] if row["time_ratio"] is not None else 1.0
    return (rank, -ratio, row["op"], str(row["params"]))


def _as_given(value):
    """Parameters as they were given: 128, not 128.0."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _flag(value) -> bool:
    return not _missing(value) and bool(value)


def _missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
