"""The one way tests run opbench's CLI: in this process (fast; `main(argv)` as the console script calls it)
or as `python -m accuracy` in a child process (for what only a real process shows: exit on signals,
environment variables read at import, plugins found on a fresh sys.path)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from accuracy.cli.main import main

ROOT = Path(__file__).resolve().parents[1]


class CliResult(NamedTuple):
    """What a command left: its exit status and everything it wrote (names as subprocess's)."""

    returncode: int
    stdout: str
    stderr: str


def run_main(capsys: pytest.CaptureFixture[str], *args: object) -> CliResult:
    """`opbench ARGS` in this process; argparse's own exits (usage errors, --help) are statuses too."""
    capsys.readouterr()  # only this command's output
    try:
        code = main([str(a) for a in args])
    except SystemExit as exit_:  # as the interpreter reads it: None is success, a message is failure
        code = 0 if exit_.code is None else exit_.code if isinstance(exit_.code, int) else 1
    out, err = capsys.readouterr()
    return CliResult(code, out, err)


def start_opbench(
    *args: object, env: dict[str, str] | None = None, cwd: Path | str = ROOT, **popen: object
) -> subprocess.Popen[str]:
    """`python -m accuracy ARGS` started in a child process (os.environ plus `env`), output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "accuracy", *map(str, args)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        **popen,  # type: ignore[call-overload]
    )


def run_opbench(
    *args: object, env: dict[str, str] | None = None, cwd: Path | str = ROOT, timeout: float = 600
) -> CliResult:
    """`python -m accuracy ARGS` run to the end in a child process."""
    proc = start_opbench(*args, env=env, cwd=cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return CliResult(proc.returncode, out, err)
