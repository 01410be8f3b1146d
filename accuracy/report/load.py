"""Load a whole asv results directory (all machines, environments, commits) into one tidy frame.

One row per benchmark x parameter combination x commit x environment x machine, so that trends,
comparisons and plots are plain pandas group-bys. Reading goes through asv's own `Results.load`
and `load_json`; files asv cannot read are skipped with a one-line warning naming them, and no
file is ever written to.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from asv import util
from asv.benchmarks import Benchmarks
from asv.machine import Machine
from asv.results import Results

from accuracy.core.errors import OpbenchError
from accuracy.core.files import check_regular
from accuracy.core.private_apis import raw_result
from accuracy.report.fingerprint import FINGERPRINT_COLUMNS, read_fingerprint
from accuracy.report.measures import metric_column, with_gflops

BENCHMARKS_FILE = "benchmarks.json"
MACHINE_FILE = "machine.json"
STAT_NAMES = ("ci_99_a", "ci_99_b", "q_25", "q_75", "number", "repeat")
SERIES_KEYS = ["machine", "env_name", "benchmark", "params"]
BASE_COLUMNS = frozenset(
    [
        "machine",
        "env_name",
        "commit_hash",
        "commit_date",
        "file",
        *FINGERPRINT_COLUMNS,
        "benchmark",
        "params",
        "value",
        "started_at",
        "version",
        *STAT_NAMES,
        "samples",
        "failed",
        "error",
        "kind",
        "unit",
        "metric",
    ]
)
# Errors asv (or json) raises on a truncated, corrupt or partial results file; OpbenchError is
# check_regular's (a FIFO, a device, a huge file), RecursionError json's on deeply nested lists.
_UNREADABLE = (util.UserError, OSError, ValueError, TypeError, AttributeError, KeyError, OpbenchError, RecursionError)
MAX_COMBINATIONS = 1_000_000  # parameter combinations of one benchmark: asv's grids have hundreds
# asv stores dates as milliseconds since 1970; pandas' timestamps end in 1677 and 2262
DATE_RANGE_MS = (pd.Timestamp.min.value // 1_000_000 + 1, pd.Timestamp.max.value // 1_000_000)


@dataclass
class LoadedResults:
    """The tidy frame, plus one line per file or benchmark that was skipped."""

    frame: pd.DataFrame
    warnings: list[str] = field(default_factory=list)


def load_results(results_dir: str | Path) -> LoadedResults:
    """Read every results file under `results_dir`; raise OpbenchError if there are none."""
    root = Path(results_dir)
    if root.exists() and not root.is_dir():
        raise OpbenchError(f"--results {root} is a file, not a results directory (the folder asv writes)")
    if not root.is_dir():
        raise OpbenchError(f"results directory {root} does not exist")
    warnings: list[str] = []
    specs = _read_benchmark_specs(root, warnings)
    rows = _RowBuilder(specs, warnings)
    for machine_dir in sorted(path for path in root.iterdir() if path.is_dir()):
        result_paths = sorted(p for p in machine_dir.glob("*.json") if p.name != MACHINE_FILE)
        machine = _read_machine_name(machine_dir, warnings) if result_paths else None
        if not machine:
            continue
        for path in result_paths:
            try:
                check_regular(path)  # a FIFO blocked asv's reader for ever, /dev/zero filled memory
                result = Results.load(str(path), machine_name=machine)
            except _UNREADABLE as exc:
                warnings.append(f"{path}: skipped, unreadable results file ({_one_line(exc)})")
                continue
            rows.add_file(path, machine, result, read_fingerprint(path, warnings))
    if not rows.count:
        detail = f"; {len(warnings)} problems, first: {warnings[0]}" if warnings else ""
        raise OpbenchError(f"no asv results found in {root}{detail}")
    return LoadedResults(rows.frame(), warnings)


def param_columns(frame: pd.DataFrame) -> list[str]:
    """The one-per-parameter-name columns (from benchmarks.json's param_names)."""
    return [column for column in frame.columns if column not in BASE_COLUMNS]


def _read_benchmark_specs(root: Path, warnings: list[str]) -> dict[str, dict]:
    """benchmarks.json gives each benchmark's kind, unit and parameter names."""
    path = root / BENCHMARKS_FILE
    try:
        check_regular(path)
        return util.load_json(str(path), api_version=Benchmarks.api_version)
    except _UNREADABLE as exc:
        warnings.append(f"{path}: unreadable ({_one_line(exc)}); kinds and parameter names guessed")
        return {}


def _read_machine_name(machine_dir: Path, warnings: list[str]) -> str | None:
    path = machine_dir / MACHINE_FILE
    try:
        check_regular(path)
        name = util.load_json(str(path), api_version=Machine.api_version).get("machine")
    except _UNREADABLE as exc:
        name, reason = None, _one_line(exc)
    else:
        reason = "no machine name in it"
    if not isinstance(name, str):
        warnings.append(f"{path}: {reason}; skipped the results in {machine_dir}")
        return None
    return name


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class _RowBuilder:
    """Accumulates columns as Python lists: one DataFrame at the end is far faster than many."""

    def __init__(self, specs: dict[str, dict], warnings: list[str]):
        self._specs = specs
        self._warnings = warnings
        self._columns: dict[str, list] = defaultdict(list)
        self._combos: dict[tuple, tuple[list[str], list[dict]]] = {}
        self._unknown: set[str] = set()
        self.count = 0

    def add_file(self, path: Path, machine: str, result: Results, fingerprint: dict) -> None:
        # asv loads these fields unchecked; a hand-edited or foreign file breaks the frame later
        if not isinstance(result.date, (int, float)) or isinstance(result.date, bool):
            self._warnings.append(f"{path}: skipped, its date {result.date!r} is not a timestamp")
            return
        if not DATE_RANGE_MS[0] <= result.date <= DATE_RANGE_MS[1]:  # NaN too
            self._warnings.append(f"{path}: skipped, its date {result.date!r} is outside the years 1677 to 2262")
            return
        if not isinstance(result.commit_hash, str) or not isinstance(result.env_name, str):
            self._warnings.append(f"{path}: skipped, it names no commit or environment")
            return
        file_info = {
            "machine": machine,
            "env_name": result.env_name,
            "commit_hash": result.commit_hash,
            "commit_date": result.date,
            "file": path.name,
        } | {name: fingerprint.get(name) for name in FINGERPRINT_COLUMNS}
        names = list(result.get_all_result_keys())
        if not names:
            self._warnings.append(f"{path}: skipped, it holds no benchmark results")
        for name in names:
            try:
                self._add_checked(path, name, result, file_info)
            except (TypeError, ValueError, AttributeError) as exc:  # parameters or values of another shape
                self._warnings.append(f"{path}: skipped {name}, not asv's layout ({_one_line(exc)})")

    def _add_checked(self, path: Path, name: str, result: Results, file_info: dict) -> None:
        """One benchmark, its parameter grid counted before any combination is built: 8 lists of
        100 values in a 5 KB file would be 10^16 combinations."""
        params = result.get_result_params(name) or []
        count = math.prod(len(values) for values in params)
        # asv pads a short value list with None; a mismatch means the file was cut short.
        raw = raw_result(result, name)
        if count > MAX_COMBINATIONS:
            self._warnings.append(
                f"{path}: skipped {name}, {count:.3g} parameter combinations (at most {MAX_COMBINATIONS:,} are read)"
            )
            return
        if raw is not None and len(raw) != count:
            self._warnings.append(f"{path}: skipped {name}, {len(raw)} values for {count} parameter combinations")
            return
        labels, _ = self._combinations(name, params)
        self._add_benchmark(path, name, result, params, labels, file_info)

    def _add_benchmark(self, path, name, result, params, labels, file_info) -> None:
        n = len(labels)
        values = [_number(v) for v in result.get_result_value(name, params)]
        started_at = _number(result.started_at.get(name))
        if any(v is not None and isinstance(v, str) for v in (*values, started_at)):
            self._warnings.append(f"{path}: {name} holds text where asv stores numbers; read as missing")
        stats = result.get_result_stats(name, params)
        samples = result.get_result_samples(name, params)  # None unless asv ran with --record-samples
        columns = self._columns
        for key, value in file_info.items():
            columns[key].extend([value] * n)
        columns["benchmark"].extend([name] * n)
        columns["params"].extend(labels)
        columns["value"].extend(v if isinstance(v, float) else math.nan for v in values)
        columns["error"].extend(v is None for v in values)  # asv: None failed, NaN skipped or not a number
        in_range = isinstance(started_at, float) and DATE_RANGE_MS[0] <= started_at <= DATE_RANGE_MS[1]
        columns["started_at"].extend([started_at if in_range else None] * n)
        columns["version"].extend([result.benchmark_version.get(name)] * n)
        for stat in STAT_NAMES:
            columns[stat].extend(s.get(stat) if s else None for s in stats)
        columns["samples"].extend(tuple(s) if s else None for s in samples)
        self.count += n

    def _combinations(self, name: str, params: list[list[str]]) -> tuple[list[str], list[dict]]:
        """Readable labels and per-name values of each parameter combination, cached."""
        key = (name, json.dumps(params))
        if key not in self._combos:
            names = self._param_names(name, len(params))
            combos = [
                dict(zip(names, (_readable(v) for v in combo), strict=False)) for combo in itertools.product(*params)
            ]
            labels = [", ".join(f"{k}={v}" for k, v in combo.items()) for combo in combos]
            self._combos[key] = (labels, combos)
        return self._combos[key]

    def _param_names(self, name: str, count: int) -> list[str]:
        names = list(self.spec(name).get("param_names") or [])[:count]
        return names + [f"param{i + 1}" for i in range(len(names), count)]

    def spec(self, name: str) -> dict:
        """benchmarks.json entry; for a benchmark missing there, asv's naming convention."""
        if name in self._specs:
            return self._specs[name]
        if name not in self._unknown:
            self._unknown.add(name)
            self._warnings.append(f"{name}: not in {BENCHMARKS_FILE}; kind guessed from its name")
        short = name.rsplit(".", 1)[-1]
        return {"type": "time" if short.startswith("time") else "track", "unit": "unit"}

    def frame(self) -> pd.DataFrame:
        frame = pd.DataFrame(self._columns)
        frame["failed"] = frame["value"].isna()
        for column in ("commit_date", "started_at"):
            frame[column] = pd.to_datetime(frame[column], unit="ms", utc=True)
        kinds = {name: self.spec(name) for name in frame["benchmark"].unique()}
        frame["kind"] = frame["benchmark"].map({k: s.get("type") for k, s in kinds.items()})
        frame["unit"] = frame["benchmark"].map({k: s.get("unit") for k, s in kinds.items()})
        frame["version"] = frame["version"].fillna(
            frame["benchmark"].map({k: s.get("version") for k, s in kinds.items()})
        )
        frame["metric"] = metric_column(frame)
        frame = with_gflops(frame.merge(self._param_table(), on=["benchmark", "params"], how="left"))
        return frame.sort_values([*SERIES_KEYS, "commit_date"], ignore_index=True)

    def _param_table(self) -> pd.DataFrame:
        """One column per parameter name, numeric where every value is a number."""
        table = pd.DataFrame(
            [
                {"benchmark": name, "params": label} | combo
                for (name, _), (labels, combos) in self._combos.items()
                for label, combo in zip(labels, combos, strict=False)
            ]
        ).drop_duplicates(["benchmark", "params"])
        for column in table.columns.difference(["benchmark", "params"]):
            try:
                table[column] = pd.to_numeric(table[column])
            except (ValueError, TypeError):
                table[column] = table[column].astype("string")
        return table


def _number(value) -> float | str | None:
    """A stored number as a float; None stays None, anything else (text a hand-edited or foreign
    file holds, which pandas' date parsing and arithmetic choke on) comes back as its repr."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return repr(value)


def _readable(value_repr: str) -> object:
    """asv stores parameters as reprs ("'float32'", "256"); show the value itself."""
    try:
        value = ast.literal_eval(value_repr)
    except (ValueError, SyntaxError):
        return value_repr
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
