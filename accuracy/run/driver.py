"""Drive asv for `opbench run`: machine info, the run itself, fingerprints, HTML, report.

asv does the benchmarking and keeps the results; this module makes the calls non-interactive,
reproducible and safe: a private copy of asv.conf.json with absolute paths, asv writing into a
staging copy, the run split into batches (whole benchmark modules, accuracy/run/batches.py) whose
results are copied into the results directory as each batch ends (under a lock, with the
environment fingerprint beside each results file), so a Ctrl-C keeps every finished batch, and
the results of a changed environment filed under a new asv environment instead of over the old
ones (accuracy/run/environment_python.py).

A history run goes commit by commit (each batch and pass of one commit, then the next): asv
installs the commit once, in its first call. Given the whole range, each of asv's calls
reinstalled every commit of it in turn (4-7 s each, and a batch and pass is one call).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from accuracy.core.errors import OpbenchError
from accuracy.core.files import os_error_line, replace_atomic, write_atomic
from accuracy.core.fingerprints import (
    FINGERPRINT_SUFFIX,
    PENDING_SUFFIX,
    RESULTS_DIGEST,
    environment_label,
    results_digest,
)
from accuracy.run.batches import Batch, batch_benchmark_dir, describe, plan_batches
from accuracy.run.environment_python import environment_python, refile, relabel_python
from accuracy.run.offline_pages import finish_pages
from accuracy.run.profiles import DEFAULT, PROFILE_VAR, PROFILES, QUICK
from accuracy.run.progress import LOG_DIR, AsvLog, ClassProgress, measured_costs
from accuracy.run.results_store import (
    check_no_links,
    merge_benchmarks_json,
    read_benchmarks_json,
    recover_interrupted_saves,
    results_lock,
)
from accuracy.run.stack_fingerprint import (
    FingerprintJob,
    last_fingerprint,
    save_fingerprint,
    stack_key,
    take_fingerprint,
)
from accuracy.run.suite_passes import MEASURE, MEASUREMENTS_VAR, PASS_VAR, PASSES, PRELOAD_VAR, READ


def load_asv_config(path: Path) -> dict:
    """asv.conf.json allows // comments; asv's own loader reads them."""
    from asv.util import load_json

    if not path.is_file():
        raise OpbenchError(f"asv config not found: {path}")
    try:
        conf = load_json(str(path), js_comments=True)
    except Exception as exc:  # asv raises its own UserError types for malformed files
        raise OpbenchError(f"cannot read asv config {path}: {exc}") from None
    if not isinstance(conf, dict):
        raise OpbenchError(f"asv config {path} holds a JSON {type(conf).__name__}, not an object of settings")
    return conf


def project_repo(config_path: Path) -> Path:
    """The repository asv benchmarks, as the config names it (relative to the config file)."""
    return (config_path.resolve().parent / load_asv_config(config_path).get("repo", ".")).resolve()


def graph_branches(config_path: Path) -> list[str]:
    """The branches `asv publish` should graph: the branch checked out first (asv's pages open on
    the first), then the configured ones. asv graphs only commits of configured branches, so a run
    on a feature branch would publish empty graphs. A detached HEAD has no branch to add."""
    configured = list(load_asv_config(config_path).get("branches", ["main"]))
    head = subprocess.run(
        ["git", "-C", str(project_repo(config_path)), "symbolic-ref", "--short", "-q", "HEAD"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return ([head] if head and head not in configured else []) + configured


def write_private_config(
    config_path: Path,
    results: Path,
    html: Path,
    workdir: Path,
    benchmark_dir: Path | None = None,
    branches: list[str] | None = None,
) -> Path:
    """A copy of the project's asv config with every path absolute and results redirected
    (and the benchmark directory, for a batch; the branches to graph, for a publish)."""
    root = config_path.resolve().parent
    conf = load_asv_config(config_path)
    if branches is not None:
        conf["branches"] = branches
    for key, default in (("repo", "."), ("benchmark_dir", "benchmarks"), ("env_dir", "env")):
        conf[key] = str((root / conf.get(key, default)).resolve())
    if benchmark_dir is not None:
        conf["benchmark_dir"] = str(benchmark_dir.resolve())
    conf["results_dir"] = str(results.resolve())
    conf["html_dir"] = str(html.resolve())
    workdir.mkdir(parents=True, exist_ok=True)
    return write_atomic(workdir / "asv.conf.json", json.dumps(conf, indent=2))


def default_machine_name() -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", platform.node() or "machine")


def register_machine(machine: str) -> None:
    """Record this machine for asv under `machine`, with asv's own description of it.

    `asv machine --yes --machine NAME` records the name alone (asv 0.6.6 fills in its defaults
    only when no field is given), and asv's pages then show [none] for arch, cpu, os and ram.
    Fields already recorded under the name are kept.
    """
    from asv.machine import Machine, MachineCollection
    from asv.util import UserError

    try:
        known = MachineCollection.load(machine)
    except UserError:
        known = {}
    info = Machine.get_defaults() | {k: v for k, v in known.items() if v} | {"machine": machine}
    try:
        MachineCollection.save(machine, info)
    except OSError as exc:
        raise OpbenchError(
            os_error_line("record the machine in", MachineCollection.get_machine_file_path(), exc)
        ) from None


def head_commit(repo: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        raise OpbenchError(f"{repo} is not a git checkout with a commit; asv records results per commit") from None
    return out.stdout.strip()


def environment_pythons(private_config: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """asv environment name -> (its python, its matrix env vars), from asv's own matrix expansion."""
    from asv.config import Config
    from asv.environment import get_environments

    conf = Config.load(str(private_config))
    return {
        env.name: (str(Path(conf.env_dir) / env.dir_name / "bin" / "python"), env.env_vars)
        for env in get_environments(conf, None, verbose=False)
    }


def check_commit_range(repo: Path, commits: str) -> None:
    """asv takes git's range syntax; asking git first turns a typo into one clear line."""
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-list", "--max-count=1", commits, "--"], capture_output=True, text=True
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        reason = (proc.stderr.strip().splitlines() or ["it selects no commits"])[0]
        raise OpbenchError(f"--commits {commits!r} is not a commit range of {repo}: {reason}")


def history_commits(private_config: Path, commits: str | None) -> list[str | None]:
    """The commits of a history run, as asv selects them from the range (newest first); [None]
    for a run in this environment."""
    if not commits:
        return [None]
    from asv.config import Config
    from asv.repo import get_repo

    return list(get_repo(Config.load(str(private_config))).get_hashes_from_range(commits))


@dataclass(frozen=True)
class Step:
    """One batch of the run, at one commit of a history run (None: this environment)."""

    commit: str | None
    batch: Batch

    @property
    def at(self) -> str:
        """` at 1a2b3c4d` for a history run's commit, nothing in this environment."""
        return f" at {self.commit[:8]}" if self.commit else ""

    def __str__(self) -> str:
        return describe([self.batch]) + self.at


def _result_files(results: Path, machine: str) -> dict[Path, float]:
    folder = results / machine
    if not folder.is_dir():
        return {}
    return {p: p.stat().st_mtime_ns for p in folder.glob("*.json") if p.name != "machine.json"}


def _stage(results: Path, staging: Path, machine: str) -> None:
    """Give asv a private copy of what it merges into: this machine's results and benchmarks.json.
    A full disk here changes nothing in the results directory: one line."""
    try:
        staging.mkdir()
        if (results / "benchmarks.json").is_file():
            shutil.copy2(results / "benchmarks.json", staging / "benchmarks.json")
        if (results / machine).is_dir():
            shutil.copytree(results / machine, staging / machine)
    except (OSError, shutil.Error) as exc:
        reason = os_error_line("copy the results to", staging, exc) if isinstance(exc, OSError) else str(exc)
        raise OpbenchError(f"{reason}; nothing was run and {results} is unchanged") from None


def _commit(
    staging: Path, results: Path, machine: str, changed: list[Path], fingerprints: dict[Path, str]
) -> tuple[list[Path], list[str]]:
    """Copy a batch's files into the results directory, each by an atomic rename; return the
    results files written and the warnings to show.

    Copies, not moves: the next batch's asv merges into the staged files. A results file and
    its fingerprint are committed as a pair: the fingerprint, holding the digest of its results,
    goes to X.fingerprint.pending, then X.json is replaced, then the pending file is renamed.
    A kill between any two steps leaves a state `fingerprint_path` reads right and
    `recover_interrupted_saves` completes. Files the run did not touch are left alone.
    """
    target = results / machine
    try:
        target.mkdir(parents=True, exist_ok=True)
        merged, warnings = merge_benchmarks_json(staging / "benchmarks.json", results / "benchmarks.json")
        machine_info = (staging / machine / "machine.json").read_bytes()
    except OSError as exc:
        raise OpbenchError(os_error_line("save into", target, exc)) from None
    write_atomic(results / "benchmarks.json", merged)
    write_atomic(target / "machine.json", machine_info)
    written = []
    for path in changed:
        content = path.read_bytes()
        fingerprint = json.loads(fingerprints[path]) | {RESULTS_DIGEST: results_digest(content)}
        final = target / path.with_suffix(FINGERPRINT_SUFFIX).name
        pending = final.with_name(final.name + PENDING_SUFFIX)
        write_atomic(pending, json.dumps(fingerprint, indent=2))
        write_atomic(target / path.name, content)
        replace_atomic(pending, final)
        written.append(target / path.name)
    return written, warnings


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # each ends a run the way Ctrl-C does


@contextmanager
def _stop_deferred():
    """Ctrl-C, SIGTERM and SIGHUP wait until a batch's files are all in place (delivered right after)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(STOP_SIGNALS))


@contextmanager
def _terminate_as_interrupt(received: list[str]):
    """SIGTERM and SIGHUP (a closed terminal, a job scheduler, `kill`) raise KeyboardInterrupt as
    Ctrl-C does, so that they too stop asv, keep every finished batch, remove the staging
    directory and clear the lock file. `received` gets the signal's name. Python only lets
    the main thread set handlers; elsewhere the defaults stay."""

    def interrupt(signum: int, _frame) -> None:
        received.append(signal.Signals(signum).name)
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass
class RunOutcome:
    status: int  # asv's exit status, the worst of the batches
    machine: str  # the machine name the results are filed under
    label: str | None  # the environment's stack label (env-<digest>); None for a history run
    written: list[Path]
    log: Path
    warnings: list[str]  # files that could not be read, pages that still need the internet, ...


@dataclass
class _SuiteRun:
    """One `run_suite` call's state, carried from batch to batch: asv's arguments and environment,
    the stack's label and fingerprints, and the steps saved so far (what a Ctrl-C keeps)."""

    config: Path
    results: Path
    html: Path
    machine: str
    bench: str | None
    commits: str | None
    knobs: dict[str, str]
    append_samples: bool
    tmp: Path
    plan: list[Step] = field(default_factory=list)
    saved: list[Step] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    written: dict[Path, None] = field(default_factory=dict)
    status: int = 0  # asv's exit status, the worst of the calls
    fresh: FingerprintJob | None = None  # this environment's, taken beside the first read pass
    jobs: dict[str, FingerprintJob] = field(default_factory=dict)  # a history run's, beside its first read pass
    env_fingerprints: dict[str, str] = field(default_factory=dict)
    here: str | None = None  # this environment's fingerprint, once taken
    label: str | None = None
    key: str = ""

    @property
    def staging(self) -> Path:
        return self.tmp / "results"

    def prepare(self, repo: Path, profile: str | None, quick: bool, verbose: bool) -> None:
        """The staging copy, the private config, the stack's label and asv's arguments."""
        check_no_links(self.results, self.machine)
        self.warnings += recover_interrupted_saves(self.results, self.tmp)
        # the paired accuracy tracks share one measurement through asv's setup_cache (benchmarks/common.py)
        self.env = dict(
            os.environ,
            **{PROFILE_VAR: profile or (QUICK.name if quick else DEFAULT.name)},
            PYTHONIOENCODING="utf-8",
            **self.knobs,
        )
        if not self.commits:  # this environment: its last fingerprint names it now, a fresh one is filed
            self.key = stack_key(self.env)
            last = last_fingerprint(self.key)
            if last is None:
                last = take_fingerprint(sys.executable, self.env)
                save_fingerprint(self.key, last)
                self.here = json.dumps(last, indent=2)
            self.label = environment_label(last, self.knobs)
        _stage(self.results, self.staging, self.machine)
        self.private = write_private_config(self.config, self.staging, self.html, self.tmp)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        self.log = AsvLog(self.results / LOG_DIR / f"{stamp}-{self.machine}.log", verbose)
        register_machine(self.machine)
        # raw timing samples let `opbench compare` apply asv's Mann-Whitney test
        self.args = ["run", "--machine", self.machine, "--show-stderr", "--record-samples"]
        if not self.commits:
            assert self.label is not None  # a run in this environment has its fingerprint
            python = environment_python(self.config, self.label)
            self.args += [f"--environment=existing:{python}", "--set-commit-hash", head_commit(repo)]
            self.args += ["--launch-method", "forkserver"]
        self.args += ["--quick"] if quick else []
        self.args += ["--append-samples"] if self.append_samples else []

    def discover(self) -> None:
        """asv's discovery, then the plan: each batch at each commit, and the progress to show."""
        commits = [self.commits] if self.commits else []
        # a history run discovers as asv does over the range: in the newest commit that installs
        discover = [*self.args, *commits, "--config", str(self.private), "--bench", "just-discover"]
        if self.commits:  # asv builds or updates a virtualenv per environment first: minutes, silent
            print(
                f"opbench: asv sets up the run's environments first (minutes for each new one); log: {self.log.path}",
                flush=True,
            )
        if self.log.call(discover, self.env, progress=ClassProgress([])) != 0:
            raise OpbenchError(f"asv could not discover the benchmarks; see {self.log.path}")
        chosen = PROFILES[self.env[PROFILE_VAR]]
        batches = plan_batches(self.private, self.bench, chosen.history_batches if self.commits else chosen.batches)
        at_commits = history_commits(self.private, self.commits)
        self.plan = [Step(commit, batch) for commit in at_commits for batch in batches]
        self.suite = [name for name in json.loads((self.staging / "benchmarks.json").read_text()) if name != "version"]
        self.modules = {name.split(".", 1)[0] for name in self.suite}
        classes = [owner for batch in batches for owner in batch.classes]
        costs = measured_costs(self.staging / self.machine, classes)
        self.progress = ClassProgress(classes, passes=PASSES, commits=len(at_commits), costs=costs)
        self.measurements = self.tmp / "measurements"  # what the measure pass leaves for the read pass
        self.measurements.mkdir()
        self.pythons = environment_pythons(self.private) if self.commits else {}
        self.busiest = os.getloadavg()[0]
        self.benchmark_dir = Path(load_asv_config(self.private)["benchmark_dir"])
        self.batch_configs: dict[Batch, Path] = {}  # each batch's, made once: a history run runs it at every commit

    def run_step(self, index: int, step: Step) -> None:
        """One batch at one commit: its passes, then its results saved with their fingerprints."""
        if step.batch not in self.batch_configs:
            workdir = self.tmp / f"batch-{len(self.batch_configs)}"
            folder = batch_benchmark_dir(self.benchmark_dir, step.batch, self.modules, workdir)
            self.batch_configs[step.batch] = write_private_config(
                self.config, self.staging, self.html, workdir, benchmark_dir=folder
            )
        before = _result_files(self.staging, self.machine)
        discovered = self._passes(index, step)
        write_atomic(self.staging / "benchmarks.json", json.dumps(discovered, indent=4, sort_keys=True))
        self.busiest = max(self.busiest, os.getloadavg()[0])
        changed = [p for p, mtime in _result_files(self.staging, self.machine).items() if before.get(p) != mtime]
        fingerprints = self._fingerprints(changed, discovered)
        if self.append_samples:  # the samples of both runs are compared: so is the busier one's load
            saved = self.results / self.machine
            fingerprints = {p: _with_saved_load(f, saved / p.name) for p, f in fingerprints.items()}
        with _stop_deferred():
            try:
                files, batch_warnings = _commit(
                    self.staging, self.results, self.machine, list(fingerprints), fingerprints
                )
            except OpbenchError as exc:
                raise OpbenchError(f"{exc}; {_kept(self.results, self.machine, self.plan, self.saved)}") from None
            self.written.update(dict.fromkeys(files))
            self.warnings += batch_warnings
            self.saved.append(step)

    def _passes(self, index: int, step: Step) -> dict:
        """asv's calls for one batch, pass by pass; the benchmarks they discovered (asv rewrites
        benchmarks.json with each pass's benchmarks only)."""
        batch = step.batch
        discovered: dict = {}
        preload = {} if batch.backends is None else {PRELOAD_VAR: ",".join(sorted(batch.backends))}
        at_commit = [f"{step.commit}^!"] if step.commit else []
        bench = ["--bench", self.bench] if self.bench else []
        for suite_pass in PASSES:
            if suite_pass == READ and _ran_whole(self.suite, batch, discovered):
                self.progress.skip(batch.classes)  # a suite without passes ran whole in the first
                break
            self.progress.stage = f"{suite_pass} pass, "
            running = batch.classes if suite_pass == MEASURE else _left_to_read(self.suite, batch, discovered)
            self.progress.skip(tuple(c for c in batch.classes if c not in running))
            self.progress.expect(running)
            command = [*self.args, *at_commit, "--config", str(self.batch_configs[batch]), *bench]
            env = self.env | {PASS_VAR: suite_pass, MEASUREMENTS_VAR: str(self.measurements), **preload}
            self.status = max(self.status, self.log.call(command, env, progress=self.progress))
            discovered |= read_benchmarks_json(self.staging / "benchmarks.json") or {}
            if index == 0 and suite_pass == MEASURE:  # beside the read pass, which times nothing
                if self.commits:
                    self.jobs = _fingerprint_jobs(self.pythons, self.env)
                elif self.here is None:
                    self.fresh = FingerprintJob(self.env)
        return discovered

    def _fingerprints(self, changed: list[Path], discovered: dict) -> dict[Path, str]:
        """Each changed results file's stack fingerprint, with the run's busiest load. A fresh
        fingerprint that names another stack refiles this environment's results under its label."""
        if self.commits:
            return {
                p: _with_load(_env_fingerprint(p, self.jobs, self.env_fingerprints, self.warnings), self.busiest)
                for p in changed
            }
        assert self.label is not None  # named by the stack's last fingerprint
        if self.here is None:  # the fresh one, which names the stack this batch measured
            assert self.fresh is not None
            fingerprint, self.fresh = self.fresh.result(), None
            save_fingerprint(self.key, fingerprint)
            self.here, now = json.dumps(fingerprint, indent=2), environment_label(fingerprint, self.knobs)
            if now != self.label:
                changed = [refile(path, self.label, now, discovered) for path in changed]
                self.warnings.append(_relabelled(self.label, now))
                self.label, python = now, environment_python(self.config, now)
                self.args = [
                    f"--environment=existing:{python}" if a.startswith("--environment=") else a for a in self.args
                ]
        for path in changed:
            relabel_python(path, self.label)
        return dict.fromkeys(changed, _with_load(self.here, self.busiest))

    def cancel_fingerprints(self) -> None:
        for job in [self.fresh, *self.jobs.values()]:
            if job is not None:
                job.cancel()

    def publish(self) -> None:
        """asv's pages from every result saved, the run's beside the older ones."""
        publish_config = write_private_config(
            self.config, self.results, self.html, self.tmp / "publish", branches=graph_branches(self.config)
        )
        if self.log.call(["publish", "--config", str(publish_config)], self.env) != 0:
            raise OpbenchError(f"`asv publish` failed; the results are saved, see {self.log.path}")


def run_suite(
    *,
    config: Path,
    results: Path,
    html: Path,
    machine: str,
    quick: bool,
    bench: str | None,
    commits: str | None,
    profile: str | None,
    knobs: dict[str, str],
    verbose: bool,
    append_samples: bool = False,
    publish: bool = True,
) -> RunOutcome:
    """Run the asv suite batch by batch into a staging copy, saving each batch into `results`.

    `knobs` are environment variables that only act at process start (OPENBLAS_CORETYPE, ...):
    they are set for asv's benchmark processes, and the fingerprint records them. A run in this
    environment goes to asv as the environment `env-<digest>` of the stack (environment_python.py),
    so a changed stack (an upgraded package, another BLAS kernel, a knob) files its results beside
    the old ones, under the same machine. Each batch runs as two passes (suite_passes.py).
    `append_samples` adds the timing samples beside those already saved for the same commit and
    environment (`opbench compare --confirm`), and `publish=False` leaves the HTML as it is.
    """
    repo = project_repo(config)  # reads and checks the config before anything is locked or written
    if commits:
        check_commit_range(repo, commits)
    signals: list[str] = []
    with results_lock(results), _terminate_as_interrupt(signals), _staging_dir(results) as tmp:
        run = _SuiteRun(config, results, html, machine, bench, commits, knobs, append_samples, tmp)
        try:
            run.prepare(repo, profile, quick, verbose)
            run.discover()
            for index, step in enumerate(run.plan):
                run.run_step(index, step)
        except KeyboardInterrupt:
            by = f" by {signals[0]}" if signals else ""
            raise OpbenchError(_interrupted(results, machine, run.plan, run.saved, by)) from None
        finally:
            run.cancel_fingerprints()
        if run.written and publish:
            run.publish()
    if run.written and publish:
        run.warnings += finish_pages(html)  # again: a config without the plugin (accuracy.run.asv_pages)
    return RunOutcome(run.status, machine, run.label, list(run.written), run.log.path, run.warnings)


def _left_to_read(suite: list[str], batch: Batch, discovered: dict) -> tuple[str, ...]:
    """The batch's classes with benchmarks the measure pass did not run: the read pass's. A
    hand-written module runs whole in the measure pass (benchmarks/common.py,
    `hide_outside_measure_pass`): the read pass said "no output from" its classes, which had run."""
    left = {name.rsplit(".", 1)[0] for name in suite if name not in discovered}
    left |= {name.split(".", 1)[0] for name in suite if name not in discovered}  # a module's free functions
    return tuple(c for c in batch.classes if c in left)


def _ran_whole(suite: list[str], batch: Batch, discovered: dict) -> bool:
    """Whether the measure pass ran every benchmark of the batch's modules: a suite that does not
    split into passes (any other project's) then has nothing left for the read pass."""
    return all(name in discovered for name in suite if name.split(".", 1)[0] in batch.modules)


@contextmanager
def _staging_dir(results: Path):
    """asv's private working copy, beside the results directory (the same file system)."""
    try:
        tmp = tempfile.TemporaryDirectory(prefix=f".{results.name}-staging-", dir=results.resolve().parent)
    except OSError as exc:
        raise OpbenchError(f"{os_error_line('create a staging directory beside', results, exc)}") from None
    with tmp as folder:
        yield Path(folder)


def _relabelled(last: str, now: str) -> str:
    """The fresh fingerprint (taken beside the first batch's read pass, which times nothing) names
    another stack than the last one did: the batch measured the stack it names, so it is filed
    there, as a rerun would file it, never thrown away."""
    return (
        f"this environment's stack is {now} now, not {last} as when it last ran (a change opbench's quick "
        f"check of the installed packages, knobs, interpreter and CPU does not see): results filed under {now}"
    )


def _with_load(fingerprint: str, busiest: float) -> str:
    """The fingerprint plus how busy the machine was (1-minute load average, sampled as each batch
    starts and ends): `opbench compare` will not call a timing change real when other work was
    competing for the CPUs (accuracy/report/compare.py)."""
    return json.dumps(
        json.loads(fingerprint) | {"load": {"max_1min": round(busiest, 2), "cpus": os.cpu_count()}}, indent=2
    )


def _with_saved_load(fingerprint: str, saved_results: Path) -> str:
    """The fingerprint with the higher of its load and the one saved beside `saved_results`."""
    from accuracy.core.fingerprints import read_load

    saved = read_load(saved_results)
    data = json.loads(fingerprint)
    if saved is None or "load" not in data or data["load"]["max_1min"] >= saved[0]:
        return fingerprint
    return json.dumps(data | {"load": {"max_1min": saved[0], "cpus": data["load"]["cpus"]}}, indent=2)


def _interrupted(results: Path, machine: str, plan: list[Step], saved: list[Step], by: str = "") -> str:
    """The one line after a Ctrl-C (or SIGTERM, SIGHUP: `by`): exactly which batches are in the results directory."""
    if not saved:
        return f"interrupted{by} before any batch finished: nothing was saved; {results} is unchanged"
    return f"interrupted{by}: {_kept(results, machine, plan, saved)}"


def _kept(results: Path, machine: str, plan: list[Step], saved: list[Step]) -> str:
    """Which batches (at which commits) are in the results directory and which are not."""
    if not saved:
        return f"no batch was saved; the results in {results} are as before"
    left = [module + step.at for step in plan if step not in saved for module in step.batch.modules]
    return (
        f"kept {len(saved)} of {len(plan)} batches in {results / machine}: {', '.join(map(str, saved))}; "
        f"not run or not finished, so not saved: {', '.join(left)}; HTML not published"
    )


def _fingerprint_jobs(pythons: dict[str, tuple[str, dict]], env: dict) -> dict[str, FingerprintJob]:
    """A history run's environments, each fingerprinted once per run (every batch runs in the
    same environments), as they are once the first batch's commits are installed."""
    return {name: FingerprintJob({**env, **extra}, python) for name, (python, extra) in pythons.items()}


def _env_fingerprint(path: Path, jobs: dict[str, FingerprintJob], cache: dict[str, str], warnings: list[str]) -> str:
    """The fingerprint of the asv environment that wrote a history run's results file. One that
    cannot be taken is recorded as an error and shown as a warning, never silently."""
    env_name = json.loads(path.read_text()).get("env_name")
    if env_name not in cache:
        try:
            if env_name not in jobs:
                raise OpbenchError(f"no asv environment named {env_name!r} to fingerprint")
            cache[env_name] = json.dumps(jobs[env_name].result(), indent=2)
        except OpbenchError as exc:
            warnings.append(f"{exc}; its results are saved without a fingerprint of their stack")
            cache[env_name] = json.dumps({"error": str(exc)})
    return cache[env_name]
