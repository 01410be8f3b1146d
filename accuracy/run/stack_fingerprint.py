"""The fingerprint `opbench run` files beside each results file, and how a run gets it early.

The fingerprint is `opbench info --json --full` from a fresh process: every framework's runtime
details, 3 s here (most of it importing torch; 7.5 s while it imported TensorFlow). Its digest
names the asv environment a run in this environment files under, so it is needed before asv
starts. A run therefore starts on the fingerprint this stack had last time, found by a cheap key
(the interpreter, the installed distributions, the process-start knobs and the CPU), while a fresh
one is taken beside asv's discovery of the suite; before the first benchmark runs, the fresh one
must give the same digest, and it is the one filed. A stack changed in a way the key misses is
caught there: nothing is run or saved, one line says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from accuracy.backends.environment import RECORDED_ENV_PREFIXES
from accuracy.core.errors import OpbenchError
from accuracy.core.files import write_atomic

SAFE_PATH = ("-P",)  # Python 3.11: the current directory is not put on the import path of a subprocess
# what the fingerprint records of the environment, and what else changes the libraries a process loads
KEYED_ENV_PREFIXES = (*RECORDED_ENV_PREFIXES, "OPBENCH_BLAS")
KEYED_ENV = ("LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH")
NICE = 10  # the background fingerprint's niceness


def _command(python: str) -> list[str]:
    return [python, *SAFE_PATH, "-m", "accuracy", "info", "--json", "--full"]


def _parsed(proc: subprocess.CompletedProcess, python: str) -> dict:
    try:
        if proc.returncode == 0:
            return json.loads(proc.stdout)
    except ValueError:
        pass
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    raise OpbenchError(f"cannot fingerprint the environment of {python} (`opbench info --json --full` failed: {last})")


def take_fingerprint(python: str, env: dict) -> dict:
    """`opbench info --json --full` from a fresh process of `python` with `env`: the stack as it
    starts, the frameworks' runtime details included.

    A fresh process, because the knobs (OPENBLAS_CORETYPE, ...) only act at process start; with
    -P (safe_path), so that an accuracy.py or asv.py in the current directory is never imported
    in place of the real one. A fingerprint that cannot be taken is an error, never filed as one.
    """
    return FingerprintJob(env, python).result()


class FingerprintJob:
    """`take_fingerprint` in the background, while asv does work that times nothing (the discovery,
    a read pass); niced, so that work keeps its core. The run waits for it before it is filed."""

    def __init__(self, env: dict, python: str = sys.executable):
        self._python, self._env = python, env
        self._proc: subprocess.Popen | None = None
        self._error = ""
        try:
            self._proc = subprocess.Popen(
                _command(python),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        except OSError as exc:  # an environment asv could not create
            self._error = exc.strerror or str(exc)
            return
        with contextlib.suppress(OSError):  # not where priorities cannot be changed: it only runs sooner
            os.setpriority(os.PRIO_PROCESS, self._proc.pid, NICE)

    def result(self) -> dict:
        """The fingerprint; an older opbench (a history run's commit) has no --full: its
        `info --json` was always full."""
        if self._proc is None:
            raise OpbenchError(f"cannot fingerprint the environment of {self._python}: {self._error}")
        out, err = self._proc.communicate()
        proc = subprocess.CompletedProcess(self._proc.args, self._proc.returncode, out, err)
        if proc.returncode == 2 and "unrecognized arguments: --full" in err:
            proc = subprocess.run(_command(self._python)[:-1], capture_output=True, text=True, env=self._env)
        return _parsed(proc, self._python)

    def cancel(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.communicate()


def stack_key(env: dict) -> str:
    """What decides this interpreter's fingerprint, read without importing any framework (~0.1 s)."""
    from accuracy.backends.environment import first_core_cpuinfo, installed_packages

    key = {
        # the environment's own path too: a second clone's venv resolves to the same interpreter,
        # but its libraries' paths (in the label) differ, and the two clones took turns failing
        "python": [sys.executable, os.path.realpath(sys.executable), sys.prefix, sys.version],
        "packages": installed_packages(),
        "env": {k: v for k, v in sorted(env.items()) if k.startswith(KEYED_ENV_PREFIXES) or k in KEYED_ENV},
        # model, flags, microcode; not the clock, which moves
        "cpu": {k: v for k, v in first_core_cpuinfo().items() if k not in ("cpu MHz", "bogomips")},
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def _saved_path(key: str) -> Path:
    from accuracy.reference.cache import cache_dir

    return cache_dir() / "fingerprints" / f"{key}.json"


def last_fingerprint(key: str) -> dict | None:
    """The fingerprint this stack had last time, or None (none saved, or unreadable)."""
    try:
        data = json.loads(_saved_path(key).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def save_fingerprint(key: str, fingerprint: dict) -> None:
    """Keep the fingerprint for the next run; a cache that cannot be written only costs time."""
    path = _saved_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(fingerprint))
    except (OSError, OpbenchError):
        pass
