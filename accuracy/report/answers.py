"""The questions a user brings to a report, answered from the newest results as short tables.

- Verdicts: every implementation that is not `within rounding`, with its reason.
- Discrepancies: per op, which implementations give bitwise identical outputs (equal output
  digests) and how the distinct outputs are judged.
- Reproducibility: every case whose bits change with the thread count or from run to run.
- Speed: the fastest implementation per op, dtype and thread count, against the peak; none is
  named where the machine was busy (compare's busy-machine rule).
- Changes: the run's own last two commits (else two environments), by compare's verdict.

Each table is a DataFrame (tests read the real contents); render.py turns them into HTML and
Markdown. A case is one op x implementation x dtype x size x condition x threads in one machine
and environment, at that environment's newest commit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accuracy.catalog.registry import Impl

import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pandas as pd

from accuracy.core.errors import OpbenchError
from accuracy.core.fingerprints import load_fingerprint, short_env_name
from accuracy.judge.metric_table import METRICS
from accuracy.judge.verdicts import BEYOND, NO_VERDICT, SUSPICIOUS, UNDETERMINED, WITHIN, Verdict
from accuracy.report.compare import UNCHANGED, busy_files, compare_specs
from accuracy.report.tidy import op_of_class, tidy

ENV_KEYS = ["machine", "env_name"]
CASE_KEYS = [*ENV_KEYS, "op", "implementation", "dtype", "condition", "size", "threads"]
SEED_PAIR = ("linear", "F.linear", "x @ W.T + b")  # the question opbench was started for
GEMM_OPS = ("matmul", "linear", "bmm", "baddbmm")  # the measured peak: the best large-GEMM rate here
FMA_UNITS = 2  # assumed per core for the theoretical peak (most x86 server cores since Haswell / Zen 2)
DTYPE_BITS = {"float64": 64, "float32": 32, "float16": 32, "bfloat16": 32}  # half formats compute in float32 on CPUs


def latest_cases(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per case with one column per metric, at each environment's newest commit.

    `implementation` is the full name (`torch:F.linear`); `env` names the machine and
    environment where the results hold more than one.
    """
    rows = tidy(frame)
    rows["file"] = frame["file"].to_numpy()
    newest = rows.groupby(ENV_KEYS)["commit_date"].transform("max")
    rows = rows.loc[rows["commit_date"] == newest]
    rows["implementation"] = (rows["backend"].fillna("") + ":" + rows["implementation"]).str.lstrip(":")
    keys = [*CASE_KEYS, "commit_hash", "file"]
    wide = rows.groupby([*keys, "metric"], dropna=False, observed=True)["value"].first().unstack("metric")
    wide = wide.reset_index().rename_axis(columns=None)
    for metric in METRICS:  # results from before a track existed lack its column
        if metric.name not in wide:
            wide[metric.name] = math.nan
    several = wide[ENV_KEYS].drop_duplicates().shape[0] > 1
    wide["env"] = (wide["env_name"].map(short_env_name) + " on " + wide["machine"]) if several else ""
    return wide


@cache
def _impls() -> dict[tuple[str, str], Impl]:
    """(op, implementation name) -> its registry Impl, under every backend it runs on."""
    from accuracy.catalog.registry import all_ops

    return {
        (op.name, f"{backend}:{impl.variant}"): impl
        for op in all_ops()
        for impl in op.impls
        for backend in (impl.backend, *impl.also)
    }


def _impl(op: str, implementation: str, dtype):
    """The registry's Impl as declared at `dtype` (its per-dtype findings and semantics); None if unknown."""
    impl = _impls().get((op, implementation))
    return impl.at(dtype) if impl is not None and dtype in impl.dtypes else impl


def verdict_label(op: str, implementation: str, tier: float, dtype: str | None = None) -> str:
    """The verdict as `explain` prints it: a semantic variant names its semantics."""
    if tier != tier:  # NaN: the tier track failed, or the results predate it
        return NO_VERDICT
    impl = _impl(op, implementation, dtype)
    semantics = getattr(impl, "semantics", "")
    return f"{Verdict.of_tier(tier)} (semantics: {semantics})" if semantics else Verdict.of_tier(tier)


def verdict_reason(row: dict) -> str:
    """Why a case left `within rounding`, in one line, from its tracked numbers and its declaration."""
    impl = _impl(row["op"], row["implementation"], row.get("dtype"))
    verdict, bound, typical = Verdict.of_tier(row["verdict_tier"]), row.get("bound_ratio"), row.get("typical_ratio")
    parts = []
    semantics = getattr(impl, "semantics", "")
    if semantics:
        parts.append(f"computes something else by design ({semantics})")
    if (row.get("nonfinite") or 0) > 0:
        parts.append(f"{int(row['nonfinite'])} non-finite outputs where the exact value is finite")
    if verdict == UNDETERMINED:
        parts.append("no valid worst-case bound at this size and precision")
    elif bound is not None and bound > 1:
        parts.append(f"max error {bound:.3g}x the worst-case rounding bound ({row.get('max_ulp', math.nan):.3g} ulp)")
    elif verdict == BEYOND and not parts:
        parts.append(_inside_bound_reason(row, impl))
    if verdict == SUSPICIOUS:
        parts.append(
            f"inside the bound (ratio {bound:.3g}) but {typical:.3g}x the error a correct algorithm "
            "makes on these inputs"
            if typical == typical and typical is not None
            else f"inside the bound (ratio {bound:.3g}) but atypically large"
        )
    finding = getattr(impl, "finding", "")
    if finding:
        parts.append(f"known finding: {finding}")
    if impl is not None and not impl.stable:
        parts.append("a textbook formula known to lose accuracy (declared stable=False)")
    return "; ".join(parts)


def _inside_bound_reason(row: dict, impl) -> str:
    """Beyond rounding inside the worst-case bound: a published contract broken, else a tier the
    tracks do not record (`opbench explain` prints it)."""
    from accuracy.core.dtypes import get_format
    from accuracy.judge.contracts import contract_for
    from accuracy.judge.precision import compute_format

    inside = f"inside the worst-case bound (ratio {row['bound_ratio']:.3g}), max error {row['max_ulp']:.3g} ulp"
    try:
        fmt = get_format(row["dtype"])
    except (KeyError, ValueError, OpbenchError):
        fmt = None
    contract = contract_for(row["op"], impl, fmt, compute_format(impl, fmt)) if fmt is not None and impl else None
    if contract is not None:
        return (
            f"outside its contract of {contract.max_ulp} ulp from the correctly rounded value "
            f"({contract.source}); {inside}"
        )
    return f"{inside}; `opbench explain {row['op']} --dtype {row['dtype']}` gives the deciding tier and element"


def _sizes(values: pd.Series) -> str:
    return ", ".join(str(int(v)) for v in sorted(values.dropna().unique()))


def verdicts(cases: pd.DataFrame) -> pd.DataFrame:
    """Every implementation (per op, dtype, condition) with a case not within rounding, worst first."""
    tier = cases["verdict_tier"]
    outside = cases.loc[tier.notna() & (tier > 0)].copy()
    columns = ["env", "op", "implementation", "dtype", "condition", "verdict", "reason", "sizes", "threads"]
    if outside.empty:
        return pd.DataFrame(columns=columns)
    # a worse tier first, then the larger error; undetermined (3) is less alarming than beyond
    outside["rank"] = outside["verdict_tier"].map({2: 0, 1: 1, 3: 2})
    outside = outside.sort_values(["rank", "bound_ratio"], ascending=[True, False], na_position="last")
    groups = outside.groupby(["env", "op", "implementation", "dtype", "condition"], sort=False, dropna=False)
    rows = []
    for (env, op, implementation, dtype, condition), group in groups:
        worst = group.iloc[0].to_dict()
        rows.append(
            {
                "env": env,
                "op": op,
                "implementation": implementation,
                "dtype": dtype,
                "condition": condition,
                "verdict": verdict_label(op, implementation, worst["verdict_tier"], dtype),
                "reason": verdict_reason(worst),
                "sizes": _sizes(group["size"]),
                "threads": _sizes(group["threads"]),
                "rank": worst["rank"],
            }
        )
    return pd.DataFrame(rows).sort_values("rank", kind="stable").drop(columns="rank").reset_index(drop=True)


def _representative(cases: pd.DataFrame) -> pd.DataFrame:
    """Per op, dtype and condition: the cases at the largest size and most threads measured."""
    keys = ["env", "op", "dtype", "condition"]
    largest = cases["size"].fillna(0) == cases.groupby(keys, dropna=False)["size"].transform("max").fillna(0)
    cases = cases.loc[largest]
    most = cases["threads"].fillna(0) == cases.groupby(keys, dropna=False)["threads"].transform("max").fillna(0)
    return cases.loc[most]


def discrepancies(cases: pd.DataFrame) -> pd.DataFrame:
    """Per op/dtype/condition: the groups of implementations with bitwise identical outputs, and
    the verdict of each group, at the largest size and most threads measured."""
    columns = [
        "env",
        "op",
        "dtype",
        "condition",
        "size",
        "threads",
        "implementations",
        "distinct_outputs",
        "groups",
        "answer",
    ]
    chosen = _representative(cases.loc[cases["output_digest"].notna()])
    rows = []
    for (env, op, dtype, condition), group in chosen.groupby(["env", "op", "dtype", "condition"], dropna=False):
        outputs: list[dict[str, Any]] = []
        for _, same in group.groupby("output_digest", sort=False):
            same = same.sort_values("implementation")
            labels = [
                verdict_label(op, i, t, dtype)
                for i, t in zip(same["implementation"], same["verdict_tier"], strict=False)
            ]
            outputs.append(
                {
                    "implementations": list(same["implementation"]),
                    "verdict": max(labels, key=_severity),
                    "varies_run_to_run": bool((same["bits_differ_run_to_run"] == 1).any()),
                }
            )
        outputs.sort(key=lambda g: (_severity(g["verdict"]), -len(g["implementations"])))
        rows.append(
            {
                "env": env,
                "op": op,
                "dtype": dtype,
                "condition": condition,
                "size": group["size"].iloc[0],
                "threads": group["threads"].iloc[0],
                "implementations": len(group),
                "distinct_outputs": len(outputs),
                "groups": outputs,
                "answer": _discrepancy_answer(outputs),
            }
        )
    table = pd.DataFrame(rows, columns=columns)
    # outputs not within rounding first, then the ops with the most different outputs
    rank = [
        (not a.startswith(("one implementation", "all bitwise", f"{n} different outputs, all within")), n)
        for a, n in zip(table["answer"], table["distinct_outputs"], strict=False)
    ]
    order = sorted(range(len(table)), key=lambda i: (not rank[i][0], -rank[i][1], table["op"].iloc[i]))
    return table.iloc[order].reset_index(drop=True)


def pair_answer(
    discrepancies: pd.DataFrame, op: str = SEED_PAIR[0], first: str = SEED_PAIR[1], second: str = SEED_PAIR[2]
) -> str | None:
    """ "first vs second": same bits or not, and both verdicts, for the first backend that has
    both (float32 first); None where no backend ran both."""
    rows = discrepancies.loc[discrepancies["op"] == op]
    rows = rows.iloc[sorted(range(len(rows)), key=lambda i: rows["dtype"].iloc[i] != "float32")]
    for row in rows.itertuples():
        group_of = {impl: i for i, group in enumerate(row.groups) for impl in group["implementations"]}
        for backend in dict.fromkeys(impl.partition(":")[0] for impl in group_of):
            a, b = f"{backend}:{first}", f"{backend}:{second}"
            if a in group_of and b in group_of:
                verdicts = [row.groups[group_of[x]]["verdict"] for x in (a, b)]
                same = group_of[a] == group_of[b]
                both = verdicts[0] if verdicts[0] == verdicts[1] else " and ".join(verdicts)
                tail = ": rounding, not a bug" if not same and all(v == WITHIN for v in verdicts) else ""
                return (
                    f"{a} vs {b} ({op}, {row.dtype}, size {int(row.size)}): "
                    f"{'bitwise identical' if same else 'different bits'}, {'both ' if both == verdicts[0] else ''}"
                    f"{both}{tail}"
                )
    return None


def _severity(label: str) -> int:
    """within < undetermined < suspicious < beyond; a failed case sorts last."""
    order = (WITHIN, UNDETERMINED, SUSPICIOUS, BEYOND)
    return next((i for i, v in enumerate(order) if label.startswith(v)), len(order))


def _discrepancy_answer(outputs: list[dict]) -> str:
    if len(outputs) == 1:
        return "one implementation" if len(outputs[0]["implementations"]) == 1 else "all bitwise identical"
    outside = [g for g in outputs if not g["verdict"].startswith(WITHIN)]
    if not outside:
        return f"{len(outputs)} different outputs, all within rounding: the differences are rounding, not bugs"
    named = "; ".join(f"{', '.join(g['implementations'])}: {g['verdict']}" for g in outside)
    return f"{len(outputs)} different outputs; not within rounding: {named}"


def reproducibility(cases: pd.DataFrame) -> pd.DataFrame:
    """Every case whose output bits change from run to run, or between one thread and all cores
    (the track, or different digests at different thread counts of the same case)."""
    columns = ["env", "op", "implementation", "dtype", "condition", "size", "changes_with", "verdict"]
    run_to_run = cases["bits_differ_run_to_run"] == 1
    threads = cases["bits_differ_1_vs_all_threads"] == 1
    keys = ["env", "op", "implementation", "dtype", "condition", "size"]
    digests = cases.groupby(keys, dropna=False)["output_digest"]
    across = digests.transform(lambda d: d.dropna().nunique() > 1)
    flagged = cases.assign(run_to_run=run_to_run, threads=threads | across).loc[run_to_run | threads | across]
    rows = []
    for key, group in flagged.groupby(keys, dropna=False, sort=True):
        reasons = [
            what
            for what, hit in (
                ("thread count (1 vs all cores)", group["threads"].any()),
                ("run to run (same threads)", group["run_to_run"].any()),
            )
            if hit
        ]
        worst = group.loc[group["verdict_tier"].idxmax()] if group["verdict_tier"].notna().any() else group.iloc[0]
        rows.append(
            dict(zip(keys, key, strict=False))
            | {
                "changes_with": " and ".join(reasons),
                "verdict": verdict_label(key[1], key[2], worst["verdict_tier"], key[3]),
            }
        )
    return pd.DataFrame(rows, columns=columns)


@dataclass
class Peak:
    """The peak a speed is measured against, per (env, dtype, threads)."""

    measured: dict[tuple, tuple[float, str]] = field(default_factory=dict)  # -> (GFLOP/s, "op impl size")
    theoretical: dict[tuple, float] = field(default_factory=dict)  # -> GFLOP/s
    basis: str = ""  # how the theoretical peak was computed, or why there is none


def peaks(cases: pd.DataFrame, results_dir: Path) -> Peak:
    peak = Peak()
    gemm = cases.loc[cases["op"].isin(GEMM_OPS) & cases["gflops"].notna()]
    if not gemm.empty:
        largest = gemm["size"] == gemm.groupby(["env", "op"])["size"].transform("max")
        for key, group in gemm.loc[largest].groupby(["env", "dtype", "threads"]):
            best = group.loc[group["gflops"].idxmax()]
            peak.measured[key] = (best["gflops"], f"{best['op']} {best['implementation']} at size {int(best['size'])}")
    bases = []
    for (env, machine, file), _ in cases.groupby(["env", "machine", "file"]):
        cpu = _cpu(Path(results_dir) / machine / file)
        if cpu is None:
            continue
        mhz, cores, width, fma, model = cpu
        for dtype, bits in DTYPE_BITS.items():
            for threads in cases.loc[cases["env"] == env, "threads"].dropna().unique():
                per_cycle = width // bits * (2 if fma else 1) * FMA_UNITS
                peak.theoretical[(env, dtype, int(threads))] = min(int(threads), cores) * mhz / 1e3 * per_cycle
        bases.append(
            f"{model}: {cores} cores x {mhz:.0f} MHz x {width}-bit vectors"
            f"{' with FMA' if fma else ''} x {FMA_UNITS} vector units (assumed)"
        )
    peak.basis = (
        "; ".join(dict.fromkeys(bases)) or "the CPU's clock or vector width is not in the results' fingerprints"
    )
    return peak


def _cpu(results_file: Path) -> tuple[float, int, int, bool, str] | None:
    """(MHz, cores, SIMD width in bits, FMA, model) from a results file's fingerprint."""
    try:
        data = load_fingerprint(results_file) or {}
    except OpbenchError:  # the report's loader has said so, as a warning
        return None
    cpu, simd = data.get("cpu") or {}, set((data.get("numpy") or {}).get("simd_enabled") or ())
    if not cpu.get("mhz") or not data.get("cpu_count"):
        return None
    width = 512 if "AVX512F" in simd else 256 if simd & {"AVX", "AVX2"} else 128
    return float(cpu["mhz"]), int(data["cpu_count"]), width, bool(simd & {"FMA3", "AVX512F"}), cpu.get("model") or "CPU"


def busy_environments(cases: pd.DataFrame, results_dir: Path) -> dict[str, str]:
    """env -> why its timings are not comparable (compare's busy-machine rule), for each busy one."""
    out = {}
    for env, files in cases.groupby("env")[["machine", "file"]]:
        pairs = files.drop_duplicates().itertuples(index=False)
        if why := busy_files(results_dir, pairs, "the run" + (f" of {env}" if env else "")):
            out[env] = why
    return out


def speed(cases: pd.DataFrame, peak: Peak, busy: dict[str, str] | None = None) -> pd.DataFrame:
    """The fastest implementation per op, dtype and thread count, at the largest size timed.
    Where the machine was busy (`busy`: env -> why) the times are shown but no fastest is named:
    under load 5-7 torch timed 33-78x slower than numpy, which other work explains."""
    busy = busy or {}
    columns = [
        "env",
        "op",
        "dtype",
        "threads",
        "size",
        "fastest",
        "time",
        "gflops",
        "pct_measured_peak",
        "pct_theoretical_peak",
        "runner_up",
        "runner_up_slower",
        "busy",
    ]
    # the hand-written benchmarks (a model's ports, opbench's own references) time no registry
    # implementation of an op: no fastest to name
    registry = [(op, impl) in _impls() for op, impl in zip(cases["op"], cases["implementation"], strict=True)]
    timed = cases.loc[cases["time"].notna() & pd.Series(registry, index=cases.index, dtype=bool)]
    keys = ["env", "op", "dtype", "threads"]
    timed = timed.loc[timed["size"].fillna(0) == timed.groupby(keys, dropna=False)["size"].transform("max").fillna(0)]
    rows = []
    for (env, op, dtype, threads), group in timed.groupby(keys, dropna=False):
        group = group.sort_values("time")
        best = group.iloc[0]
        measured = peak.measured.get((env, dtype, threads), (math.nan, ""))[0]
        theoretical = peak.theoretical.get((env, dtype, threads), math.nan)
        second = group.iloc[1] if len(group) > 1 and env not in busy else None
        rows.append(
            {
                "env": env,
                "op": op,
                "dtype": dtype,
                "threads": threads,
                "size": best["size"],
                "fastest": "" if env in busy else best["implementation"],
                "time": best["time"],
                "gflops": best["gflops"],
                "pct_measured_peak": 100 * best["gflops"] / measured,
                "pct_theoretical_peak": 100 * best["gflops"] / theoretical,
                "runner_up": "" if second is None else second["implementation"],
                "runner_up_slower": math.nan if second is None else second["time"] / best["time"],
                "busy": busy.get(env, ""),
            }
        )
    return pd.DataFrame(rows, columns=columns)


@dataclass
class Changes:
    """The newest results against the previous commit or environment (compare's verdicts)."""

    base: str = ""
    new: str = ""
    summary: list[str] = field(default_factory=list)
    table: pd.DataFrame = field(default_factory=pd.DataFrame)
    note: str = ""  # why nothing was compared


CHANGE_COLUMNS = [
    "op",
    "impl",
    "dtype",
    "size",
    "condition",
    "threads",
    "verdict",
    "time_ratio",
    "bits",
    "verdict_base",
    "verdict_new",
]


def changes(frame: pd.DataFrame, results_dir: Path) -> Changes:
    """The run's own commits: the last two commits of the environment with history whose newest
    results are newest (a matrix run at one commit beside a history run does not hide the history);
    else, without any history, the other environment at the newest commit."""
    runs = frame.drop_duplicates(["machine", "env_name", "commit_hash"]).sort_values(["commit_date", "started_at"])
    newest = runs.iloc[-1]
    with_history = runs.loc[runs.groupby(ENV_KEYS)["commit_hash"].transform("nunique") > 1]
    if len(with_history):
        latest = with_history.iloc[-1]
        same_env = with_history.loc[
            (with_history["machine"] == latest["machine"]) & (with_history["env_name"] == latest["env_name"])
        ]
        specs = (same_env.iloc[-2]["commit_hash"], latest["commit_hash"])
        scope = frame.loc[(frame["machine"] == latest["machine"]) & (frame["env_name"] == latest["env_name"])]
        names = tuple(f"commit {c[:8]} ({short_env_name(latest['env_name'])})" for c in specs)
    else:
        others = runs.loc[runs["commit_hash"] == newest["commit_hash"]]
        if len(others) < 2:
            return Changes(note="nothing to compare: one commit in one environment in these results")
        base, new = others.iloc[-2], newest
        specs = (
            (base["env_name"], new["env_name"])
            if base["env_name"] != new["env_name"]
            else (base["machine"], new["machine"])
        )
        scope = frame.loc[frame["commit_hash"] == newest["commit_hash"]]
        names = tuple(short_env_name(spec) for spec in specs)
    try:
        comparison = compare_specs(scope, results_dir, *specs)
    except OpbenchError as exc:
        return Changes(names[0], names[1], note=f"cannot compare: {exc}")
    changed = [row | {"op": op_of_class(row["op"])} for row in comparison.rows if row["verdict"] != UNCHANGED]
    table = pd.DataFrame(changed, columns=[*CHANGE_COLUMNS]).rename(columns={"impl": "implementation"})
    return Changes(names[0], names[1], summary=comparison.summary(), table=table)


@dataclass
class Answers:
    """Every answer table of one report."""

    cases: pd.DataFrame
    verdicts: pd.DataFrame
    discrepancies: pd.DataFrame
    reproducibility: pd.DataFrame
    speed: pd.DataFrame
    peak: Peak
    changes: Changes
    busy: dict[str, str] = field(default_factory=dict)  # env -> why no fastest is named there


def answer(frame: pd.DataFrame, results_dir: Path) -> Answers:
    cases = latest_cases(frame)
    peak = peaks(cases, results_dir)
    busy = busy_environments(cases, results_dir)
    return Answers(
        cases,
        verdicts(cases),
        discrepancies(cases),
        reproducibility(cases),
        speed(cases, peak, busy),
        peak,
        changes(frame, results_dir),
        busy,
    )
