"""Name a result set the way a user thinks of it: a machine, an environment, a commit, a stack.

`resolve` tries, in order: an exact machine or asv environment name, an environment's stack label
as `opbench run` prints it (`env-3f2a9c1b`), or a commit hash prefix;
then a unique prefix of a machine or environment name (`virtualenv-py3.11-numpy2.3`); then a
`package==version` alias (`numpy==2.4.6`, several joined by commas), matched against each results
file's fingerprint and, for asv matrix environments, the package versions in its name. A name
that covers several commits means its latest one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from accuracy.core.errors import OpbenchError
from accuracy.core.fingerprints import label_of, short_env_name
from accuracy.report.stack import normal_package, read_stack

KEY_DIMS = ("machine", "env_name")
VARIES = "(varies)"  # a part of the stack that differs between the files of one set
_HEX = re.compile(r"^[0-9a-fA-F]{4,40}$")
_WORDS = {"machine": "machine", "env_name": "environment", "commit": "commit hash prefix", "alias": "package versions"}


@dataclass
class ResultSet:
    """The rows one name (BASE or NEW) stands for, at a single commit."""

    role: str  # "BASE" or "NEW"
    spec: str
    matched_on: str  # "machine", "env_name", "commit" or "alias"
    commit_hash: str
    frame: pd.DataFrame
    stack: dict[str, str] | None = field(default=None)  # flattened fingerprint; None if none readable

    def describe(self) -> dict:
        return {
            "spec": self.spec,
            "matched_on": _WORDS[self.matched_on],
            "commit_hash": self.commit_hash,
            "machines": sorted(self.frame["machine"].unique()),
            "env_names": sorted(self.frame["env_name"].unique()),
        }


def file_stacks(results_dir: Path, frame: pd.DataFrame) -> dict[tuple[str, str], dict | None]:
    """(machine, results file name) -> the flattened stack of its fingerprint."""
    pairs = frame[["machine", "file"]].drop_duplicates().itertuples(index=False)
    return {(m, f): read_stack(Path(results_dir) / m / f) for m, f in pairs}


def resolve(
    frame: pd.DataFrame, spec: str, role: str, stacks: dict[tuple[str, str], dict | None], warnings: Sequence[str] = ()
) -> ResultSet:
    """The rows `spec` names, at their latest commit."""
    matches = _exact(frame, spec, role) or _prefix(frame, spec, role) or _alias(frame, spec, role, stacks)
    if not matches:
        hint = f"; {len(warnings)} files/benchmarks were skipped, first: {warnings[0]}" if warnings else ""
        raise OpbenchError(f"{role} {spec!r} names no result set; {_available(frame)}{hint}")
    if len(matches) > 1:
        kinds = " and ".join(_WORDS[k] for k in matches)
        raise OpbenchError(f"{role} {spec!r} is ambiguous: it names both a {kinds}; {_available(frame)}")
    ((matched_on, hit),) = matches.items()
    rows = frame.loc[hit]
    latest = rows.sort_values(["commit_date", "started_at"], na_position="first").iloc[-1]["commit_hash"]
    rows = rows.loc[rows["commit_hash"] == latest]
    files = [stacks.get(key) for key in rows[["machine", "file"]].drop_duplicates().itertuples(index=False)]
    return ResultSet(role, spec, matched_on, latest, rows, _merged(files))


def _exact(frame: pd.DataFrame, spec: str, role: str) -> dict[str, pd.Series]:
    matches = {column: frame[column] == spec for column in KEY_DIMS if (frame[column] == spec).any()}
    labelled = frame["env_name"].map(label_of) == spec  # env-<digest>, as `opbench run` prints it
    if labelled.any():
        matches["env_name"] = labelled
    if _HEX.match(spec):
        hit = frame["commit_hash"].str.lower().str.startswith(spec.lower())
        if hit.any():
            _unique(frame.loc[hit, "commit_hash"].str[:12], spec, role, "commits", "give more of the hash")
            matches["commit"] = hit
    return matches


def _prefix(frame: pd.DataFrame, spec: str, role: str) -> dict[str, pd.Series]:
    matches = {}
    for column in KEY_DIMS:
        hit = frame[column].str.startswith(spec)
        if hit.any():
            _unique(frame.loc[hit, column], spec, role, f"{_WORDS[column]}s", "give more of the name")
            matches[column] = hit
    return matches


def _alias(frame: pd.DataFrame, spec: str, role: str, stacks: dict) -> dict[str, pd.Series]:
    """Files whose stack (or asv matrix environment name) has every `package==version` of spec."""
    parts = [part.strip().partition("==") for part in spec.split(",")]
    if not all(name and sep and version for name, sep, version in parts):
        return {}
    pins = [(normal_package(name), version) for name, _, version in parts]
    files = frame[["machine", "file", "env_name"]].drop_duplicates()
    chosen = [
        (m, f)
        for m, f, env in files.itertuples(index=False)
        if all(_has(stacks.get((m, f)) or {}, env, name, version) for name, version in pins)
    ]
    if not chosen:
        return {}
    keys = pd.MultiIndex.from_frame(frame[["machine", "file"]])
    hit = pd.Series(keys.isin(chosen), index=frame.index)
    _unique(
        frame.loc[hit, "env_name"] + " on " + frame.loc[hit, "machine"],
        spec,
        role,
        "environments",
        "add another package==version, comma-separated",
    )
    return {"alias": hit}


def _has(stack: dict[str, str], env_name: str, name: str, version: str) -> bool:
    installed = {
        normal_package(key.split(" ", 1)[1]): value for key, value in stack.items() if key.startswith("package ")
    }
    if name in installed:
        return _version_matches(installed[name], version)
    # asv names matrix environments by concatenating each requirement with its version
    return re.search(rf"(^|-){re.escape(name + version)}([.+-]|$)", env_name.lower()) is not None


def _version_matches(installed: str, wanted: str) -> bool:
    return installed == wanted or installed.startswith((wanted + ".", wanted + "+"))


def _unique(values: pd.Series, spec: str, role: str, what: str, advice: str) -> None:
    names = sorted(values.unique())
    if len(names) > 1:
        shown = ", ".join(names[:8]) + (f" (+{len(names) - 8} more)" if len(names) > 8 else "")
        raise OpbenchError(f"{role} {spec!r} is ambiguous: it matches {len(names)} {what} ({shown}); {advice}")


def _merged(stacks: list[dict | None]) -> dict[str, str] | None:
    """One stack for a set of files: a part that differs between them reads VARIES."""
    known = [s for s in stacks if s is not None]
    if not known:
        return None
    merged = dict(known[0])
    for stack in known[1:]:
        for key in merged.keys() | stack.keys():
            if merged.get(key) != stack.get(key):
                merged[key] = VARIES
    return merged


def _available(frame: pd.DataFrame) -> str:
    machines = ", ".join(sorted(frame["machine"].unique()))
    envs = ", ".join(sorted({short_env_name(name) for name in frame["env_name"].unique()}))
    commits = frame.drop_duplicates("commit_hash").sort_values("commit_date", ascending=False)["commit_hash"].str[:8]
    more = f" (+{len(commits) - 10} older)" if len(commits) > 10 else ""
    return f"machines: {machines}; environments: {envs}; commits: {', '.join(commits[:10])}{more}"
