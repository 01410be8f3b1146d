"""A port in an environment of its own: `env:PINS` (any pinned set, comma-separated) and
`torch==VERSION` (this model stack with torch moved), built by uv and run as a child process
(child_process.py).

uv builds the environment from the pins with this interpreter, from its own cache alone first
(`--offline`: a release it has seen installs in about a second, hard-linked), and from the package
index only where that fails; its lines are shown while it builds, and the time it took is measured
and told in the port's description. Environments are kept under the user's cache directory, one
per hash of their pins and the interpreter's version, and made ready in a folder of their own
then renamed: a build that failed or was interrupted is never used. Pins that do not resolve make
the port absent with uv's one line.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from accuracy.core.files import cache_home, check_private_directory
from accuracy.workflows.model.ports.base import Port
from accuracy.workflows.model.ports.child_process import ChildPort, Rebuild, run_child

ENV_PREFIX = "env:"
TORCH_PREFIX = "torch=="
READY = "opbench-environment.json"  # written last: the environment is whole
# What the child runner needs (safetensors) and what opbench's own factories import (the zoo:
# numpy, ml_dtypes, threadpoolctl), at this environment's versions unless the pins name them.
HELPERS = ("safetensors", "numpy", "ml_dtypes", "threadpoolctl")
# What a user's factory imports beside torch, carried into a `torch==VERSION` environment:
# torchvision resolved to the release built for that torch, transformers at this one's version.
MODEL_STACK = ("torchvision", "transformers")


def environments_root() -> Path:
    return cache_home() / "opbench" / "environments"


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def pins_for(name: str) -> list[str]:
    """The environment's pins: the port's own, then the helpers at this environment's versions
    where the port names no version of them. One line for a pin that is not a requirement."""
    if name.startswith(TORCH_PREFIX):
        own = [name, *("torchvision" if pin.startswith("torchvision==") else pin for pin in stack_pins(MODEL_STACK))]
    else:
        own = [p.strip() for p in name.removeprefix(ENV_PREFIX).split(",") if p.strip()]
    if not own:
        raise ValueError(f"--port {name}: no pins; e.g. env:torch==2.12.0,numpy==2.3.5")
    return with_helpers(name, own)


def stack_pins(names: tuple[str, ...]) -> list[str]:
    """Those of `names` installed here, at their versions here."""
    return [f"{name}=={_installed(name)}" for name in names if _installed(name)]


def with_helpers(name: str, own: list[str]) -> list[str]:
    """`own`, then the helpers at this environment's versions where `own` names no version of them."""
    named = set()
    for pin in own:
        try:
            named.add(canonicalize_name(Requirement(pin).name))
        except InvalidRequirement as exc:
            raise ValueError(f"--port {name}: {pin!r} is not a requirement: {exc}") from None
    helpers = [f"{h}=={_installed(h)}" for h in HELPERS if canonicalize_name(h) not in named and _installed(h)]
    return own + helpers


def _uv() -> str | None:
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def _uv_environ() -> dict[str, str]:
    """uv reads no pip configuration: pip's find-links (a local torch wheel) are handed over."""
    environ = dict(os.environ)
    if "UV_FIND_LINKS" not in environ and environ.get("PIP_FIND_LINKS"):
        environ["UV_FIND_LINKS"] = ",".join(environ["PIP_FIND_LINKS"].split())
    return environ


def _install(uv: str, python: Path, pins: list[str], overrides: Path | None, offline: bool, say) -> str | None:
    """uv's install of the pins, its lines shown as they come; None, or its last line where it failed."""
    command = [
        uv,
        "pip",
        "install",
        "--python",
        str(python),
        *pins,
        *(["--override", str(overrides)] if overrides else []),
    ]
    process = subprocess.Popen(
        [*command, "--offline"] if offline else command,
        env=_uv_environ(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    lines = []
    for line in process.stderr:
        lines.append(line.strip())
        if not offline:  # the cache-only try is quick and its failure expected: shown only when it is the build
            say(line.rstrip())
    process.wait()
    said = [line for line in lines if line and not line.startswith("hint:")]  # the error, not uv's advice
    return None if process.returncode == 0 else (said[-1] if said else f"uv exited with status {process.returncode}")


def environment(pins: list[str], say, overrides: tuple[str, ...] = ()) -> tuple[Path, dict] | str:
    """(the environment's python, what its build measured), built now or found built; or why not.
    `overrides`: uv's overrides, for a conflict that is only in a package's metadata."""
    uv = _uv()
    if uv is None:
        return "uv is not installed (pip install uv): it builds a port's environment"
    key = json.dumps([sys.version, sorted(pins)] + ([sorted(overrides)] if overrides else []))
    root = environments_root()
    folder = root / hashlib.sha256(key.encode()).hexdigest()[:16]
    if (folder / READY).is_file():
        return folder / "bin" / "python", json.loads((folder / READY).read_text()) | {"cached": True}
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    check_private_directory(root, "the environments cache")
    building = Path(tempfile.mkdtemp(prefix=f"{folder.name}.building-", dir=root))
    started = time.perf_counter()
    say(f"building its environment with uv: {' '.join(pins)}")
    try:
        made = subprocess.run(
            [uv, "venv", "--quiet", "--python", sys.executable, str(building / "venv")],
            env=_uv_environ(),
            capture_output=True,
            text=True,
        )
        if made.returncode != 0:
            return f"uv venv failed: {(made.stderr.strip().splitlines() or ['?'])[-1]}"
        python = building / "venv" / "bin" / "python"
        listed = building / "overrides.txt" if overrides else None
        if listed:
            listed.write_text("\n".join(overrides) + "\n")
        failed = _install(uv, python, pins, listed, True, say) and _install(uv, python, pins, listed, False, say)
        if failed:
            return f"its pins do not install: {failed}"
        _bytecode_shared(building / "venv", folder)
        facts = {"pins": pins, "overrides": list(overrides), "seconds": round(time.perf_counter() - started, 1)}
        (building / "venv" / READY).write_text(json.dumps(facts))
        with contextlib.suppress(OSError):  # another opbench built it meanwhile: theirs is as good
            (building / "venv").rename(folder)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    say(f"environment built in {facts['seconds']:g} s")
    return folder / "bin" / "python", facts | {"cached": False}


def _bytecode_shared(venv: Path, folder: Path) -> None:
    """The bytecode this environment's child would compile first, linked from this one's where a
    source file is this environment's own file (uv hard-links both from its cache): torch imported
    from source in a new environment took 5-6 CPU-s more than from bytecode. Python checks each
    file's bytecode against its source (mtime and size) as it always does, and writes a new file
    in its place, never into the linked one. `venv` is built to be renamed `folder`: the
    bytecode's paths are those of the sources in `folder`, as the child imports them."""
    here = Path(sysconfig.get_paths()["purelib"])
    site = Path("lib", f"python{sys.version_info.major}.{sys.version_info.minor}", "site-packages")
    tag = sys.implementation.cache_tag
    for source in (venv / site).rglob("*.py"):
        relative = source.relative_to(venv / site)
        mine = here / relative
        compiled = mine.parent / "__pycache__" / f"{mine.stem}.{tag}.pyc"
        target = venv / "bytecode" / str(folder / site / relative.parent).lstrip(os.sep) / f"{mine.stem}.{tag}.pyc"
        with contextlib.suppress(OSError):  # not here, not the same file, or not compiled here: compiled there
            if compiled.is_file() and os.path.samefile(source, mine):
                target.parent.mkdir(parents=True, exist_ok=True)
                os.link(compiled, target)


def shown(name: str):
    """Where the build's lines go: stderr, each after the port's name (stdout is the report)."""

    def say(line: str) -> None:
        print(f"opbench: --port {name}: {line}", file=sys.stderr, flush=True)

    return say


def bytecode(python: Path) -> dict[str, str]:
    """The child writes its bytecode, into the environment's own folder only: torch imported from
    source took 11-13 s here, from bytecode 5-6 s; compiling it at build time instead (uv's
    --compile-bytecode) took a torch environment's build from 1 s to 57 s."""
    return {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(python.parents[1] / "bytecode")}


def environment_port(name: str, model, inputs: dict, rebuild: Rebuild) -> Port | str:
    """The model rebuilt by its factory in an environment built from the port's pins."""
    try:
        pins = pins_for(name)
    except ValueError as exc:
        return str(exc)

    def describe(child: dict, build: str) -> str:
        own = f"PyTorch {child['torch']} in its own environment ({', '.join(pins)}; {build})"
        return f"{own} on {child['capability']} kernels"

    return run_in_environment(name, environment(pins, shown(name)), model, inputs, rebuild, describe)


def run_in_environment(
    name: str, built: tuple[Path, dict] | str, model, inputs: dict, rebuild: Rebuild, describe, convert=None
) -> Port | str:
    """The port of a child run in a built environment (`environment`'s answer), or why there is none.
    `describe(the child's facts, how the environment was built)` words the port's description."""
    if isinstance(built, str):
        return built
    python, facts = built
    done = run_child(str(python), bytecode(python), model, inputs, rebuild, same=False, convert=convert)
    if isinstance(done, str):
        return done
    arrays, child, seconds = done
    build = f"built by uv in {facts['seconds']:g} s" + (", cached" if facts["cached"] else "")
    return ChildPort(name, describe(child, build), arrays, seconds, child["reasons"])
