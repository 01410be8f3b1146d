"""Install opbench into an asv matrix environment whose matrix owns some of opbench's own pins.

asv installs a matrix's packages (torch and torchvision in `asv.torch-upgrade.conf.json`) before
the project; installing the project as usual (`pip install -c constraints.txt wheel[extras]`)
would put back constraints.txt's torch and pyproject's `torch==2.13.0`, and every environment
would run the same torch. So asv installs the wheel without its dependencies, and then this,
run by asv inside the environment, installs the dependencies and extras the wheel declares under
constraints.txt, with each held package kept at the version the environment has:

    python -m accuracy.run.matrix_install CONSTRAINTS EXTRAS HELD...

`packaging` is there before any of opbench's dependencies: asv installs `build`, which needs it.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

PROJECT = "opbench"


def held_versions(names: list[str]) -> dict[str, str]:
    """The installed version of each held package; a held package that is absent is an error."""
    versions: dict[str, str] = {}
    for name in names:
        try:
            versions[canonicalize_name(name)] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            raise SystemExit(f"matrix_install: {name} is held but not installed (is it in the asv matrix?)") from None
    return versions


def mismatched(held: dict[str, str]) -> list[str]:
    """Where one held package's own requirement on another is not met by the version the environment
    has (a torchvision built for another torch), one line each."""
    out = []
    for name, version in held.items():
        for text in importlib.metadata.requires(name) or []:
            requirement = Requirement(text)
            other = canonicalize_name(requirement.name)
            if other in held and requirement.marker is None and held[other] not in requirement.specifier:
                out.append(f"{name} {version} requires {requirement}; the environment has {other} {held[other]}")
    return out


def requirements(extras: list[str], held: dict[str, str]) -> list[str]:
    """The project's requirements with `extras`, less the held packages (already installed)."""
    out = []
    for text in importlib.metadata.requires(PROJECT) or []:
        requirement = Requirement(text)
        if canonicalize_name(requirement.name) in held:
            continue
        marker = requirement.marker
        if marker is None or any(marker.evaluate({"extra": extra}) for extra in ("", *extras)):
            requirement.marker = None  # chosen here: pip would read `extra == "blas"` as false
            out.append(str(requirement))
    return out


def constraints(lines: list[str], held: dict[str, str]) -> list[str]:
    """constraints.txt's pins, with each held package pinned to the environment's version instead."""
    out = []
    for line in lines:
        text = line.split("#", 1)[0].strip()
        try:
            name = canonicalize_name(Requirement(text).name) if text else None
        except InvalidRequirement:
            name = None
        if name not in held:
            out.append(line)
    return out + [f"{name}=={version}" for name, version in held.items()]


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    source, extras, names = Path(argv[0]), [e for e in argv[1].split(",") if e], argv[2:]
    held = held_versions(names)
    if wrong := mismatched(held):
        print(f"matrix_install: {'; '.join(wrong)}", file=sys.stderr)
        return 2
    pins = constraints(source.read_text().splitlines(), held)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "constraints.txt"
        path.write_text("\n".join(pins) + "\n")
        pip = [sys.executable, "-m", "pip", "install", "-q", "-c", str(path), *requirements(extras, held)]
        return subprocess.run(pip, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
