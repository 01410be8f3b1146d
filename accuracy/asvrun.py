"""Drive asv for `opbench run`: machine info, the run itself, fingerprints, HTML, report.

asv does the benchmarking and keeps the results; this module only makes the calls
non-interactive and reproducible: a private copy of asv.conf.json with absolute paths (so
results can go to any directory), the current commit recorded for in-place runs, and the
environment fingerprint written beside each results file the run touched.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from accuracy.errors import OpbenchError

FINGERPRINT_SUFFIX = ".fingerprint"  # not .json: asv reads every .json in a machine folder


def load_asv_config(path: Path) -> dict:
    """asv.conf.json allows // comments; asv's own loader reads them."""
    from asv.util import load_json

    if not path.is_file():
        raise OpbenchError(f"asv config not found: {path}")
    try:
        return load_json(str(path), js_comments=True)
    except Exception as exc:  # asv raises its own UserError types for malformed files
        raise OpbenchError(f"cannot read asv config {path}: {exc}") from None


def write_private_config(config_path: Path, results: Path, html: Path, workdir: Path) -> Path:
    """A copy of the project's asv config with every path absolute and results redirected."""
    root = config_path.resolve().parent
    conf = load_asv_config(config_path)
    for key, default in (("repo", "."), ("benchmark_dir", "benchmarks"), ("env_dir", "env")):
        conf[key] = str((root / conf.get(key, default)).resolve())
    conf["results_dir"] = str(results.resolve())
    conf["html_dir"] = str(html.resolve())
    out = workdir / "asv.conf.json"
    out.write_text(json.dumps(conf, indent=2))
    return out


def default_machine_name() -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", platform.node() or "machine")


def _asv(args: list[str], env: dict | None = None) -> int:
    """Run `python -m asv ...` in this interpreter, output straight to the terminal."""
    return subprocess.call([sys.executable, "-m", "asv", *args], env=env)


def head_commit(repo: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        raise OpbenchError(f"{repo} is not a git checkout with a commit; asv records results per commit") from None
    return out.stdout.strip()


def _result_files(results: Path, machine: str) -> dict[Path, float]:
    folder = results / machine
    if not folder.is_dir():
        return {}
    return {p: p.stat().st_mtime for p in folder.glob("*.json") if p.name != "machine.json"}


def environment_pythons(private_config: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """asv environment name -> (its python, its matrix env vars), from asv's own matrix expansion."""
    from asv.config import Config
    from asv.environment import get_environments

    conf = Config.load(str(private_config))
    return {
        env.name: (str(Path(conf.env_dir) / env.dir_name / "bin" / "python"), env.env_vars)
        for env in get_environments(conf, None, verbose=False)
    }


def write_fingerprints(changed: list[Path], pythons: dict[str, tuple[str, dict]] | None, env: dict) -> None:
    """Save the environment fingerprint beside each results file this run wrote.

    It is taken by a fresh process of the python that ran the benchmarks (this one for in-place
    runs, else the results' asv environment), with that environment's variables, so it shows
    the BLAS kernel the knobs selected.
    """
    for path in changed:
        env_name = json.loads(path.read_text()).get("env_name")
        python, extra = (sys.executable, {}) if pythons is None else pythons.get(env_name, (None, {}))
        if python is None:
            text = json.dumps({"error": f"no asv environment named {env_name!r} to fingerprint"})
        else:
            proc = subprocess.run([python, "-m", "accuracy", "info", "--json"], capture_output=True, text=True,
                                  env={**env, **extra})
            text = proc.stdout if proc.returncode == 0 else json.dumps({"error": proc.stderr.strip()[-500:]})
        path.with_suffix(FINGERPRINT_SUFFIX).write_text(text)


def run_suite(*, config: Path, results: Path, html: Path, machine: str, quick: bool, bench: str | None,
              commits: str | None, profile: str | None, knobs: dict[str, str]) -> tuple[int, list[Path]]:
    """Run the asv suite; returns (asv's exit status, results files written).

    `knobs` are environment variables that only act at process start (OPENBLAS_CORETYPE, ...):
    they are set for asv's benchmark processes, and the fingerprint records them.
    """
    results.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="opbench-asv-") as tmp:
        # OPBENCH_RUN_DIR lets the paired accuracy tracks share one measurement (benchmarks/common.py)
        env = dict(os.environ, OPBENCH_PROFILE=profile or ("quick" if quick else "default"),
                   OPBENCH_RUN_DIR=tmp, **knobs)
        private = write_private_config(config, results, html, Path(tmp))
        conf = json.loads(private.read_text())
        if _asv(["machine", "--yes", "--machine", machine, "--config", str(private)], env) != 0:
            raise OpbenchError("`asv machine` failed; see its message above")
        before = _result_files(results, machine)
        args = ["run", "--config", str(private), "--machine", machine, "--show-stderr"]
        if commits:
            args += [commits]
        else:
            args += ["--python=same", "--set-commit-hash", head_commit(Path(conf["repo"])),
                     "--launch-method", "forkserver"]
        if quick:
            args.append("--quick")
        if bench:
            args += ["--bench", bench]
        status = _asv(args, env)
        after = _result_files(results, machine)
        changed = [p for p, mtime in after.items() if before.get(p) != mtime]
        write_fingerprints(changed, environment_pythons(private) if commits else None, env)
        if changed and _asv(["publish", "--config", str(private)], env) != 0:
            raise OpbenchError("`asv publish` failed; results are kept, see its message above")
    return status, changed
