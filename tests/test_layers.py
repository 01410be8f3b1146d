"""The package's layer order holds: a lower layer never imports an upper one, at module level or inside a
function (a function-level import is still a dependency; it only hides it from import-time cycles);
and no modules import one another in a cycle, within a layer as across."""

from __future__ import annotations

import ast
import graphlib
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "accuracy"
LAYERS = ("core", "reference", "judge", "backends", "catalog", "workflows", "report", "run", "cli")
# The public top: `import accuracy`, `python -m accuracy` and `accuracy.testing` may use every layer.
TOP = ("__init__", "__main__", "testing")


def _imported_modules(tree: ast.Module, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of everything a module imports, anywhere in it, relative imports resolved."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            if "." in base:
                yield node.lineno, base
            else:  # `from accuracy import judge` imports the layer judge, not just the top package
                yield from ((node.lineno, f"{base}.{alias.name}") for alias in node.names)


def _layer(dotted: str, package: str) -> str | None:
    """The layer a dotted name lies in; the top's modules count as above every layer; None outside."""
    parts = dotted.split(".")
    if parts[0] != package or len(parts) == 1:
        return None
    if parts[1] in LAYERS:
        return parts[1]
    return "top" if parts[1] in TOP else None


def _rank(layer: str) -> int:
    return len(LAYERS) if layer == "top" else LAYERS.index(layer)


def layer_violations(package_dir: Path) -> list[str]:
    """Every import by which a module reaches a layer above its own, as 'file:line: a imports b'."""
    package = package_dir.name
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        relative = path.relative_to(package_dir.parent).with_suffix("")
        is_package = relative.name == "__init__"
        module = ".".join(relative.parts[:-1] if is_package else relative.parts)
        own = _layer(module, package) if module != package else "top"
        if own is None:
            found.append(f"{path}: module {module} is in no layer (add it to one)")
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        if module == package:  # `import accuracy` must stay cheap: its layers load on first use
            found += [
                f"{path}:{node.lineno}: {module} imports {PACKAGE} layers at module level"
                for node in tree.body
                if isinstance(node, ast.Import | ast.ImportFrom)
                and (node.level or (node.module or "").startswith(package))
            ]
        for line, target in _imported_modules(tree, module, is_package):
            layer = _layer(target, package)
            if layer is not None and _rank(layer) > _rank(own):
                found.append(f"{path}:{line}: {module} ({own}) imports {target} ({layer})")
    return sorted(set(found))


def test_no_layer_imports_an_upper_layer():
    assert layer_violations(ROOT / PACKAGE) == []


def import_cycle(package_dir: Path) -> list[str]:
    """One cycle of modules importing one another, anywhere in them (function-level imports
    included), as [a, b, ..., a]; [] where there is none. `workflows.check` once reached
    `model.op_causes`, whose catalogue reached `model.units`, which imported `check` back: seven
    modules, the closing imports hidden inside functions."""
    package = package_dir.name
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        relative = path.relative_to(package_dir.parent).with_suffix("")
        is_package = relative.name == "__init__"
        modules[".".join(relative.parts[:-1] if is_package else relative.parts)] = (path, is_package)
    graph: dict[str, set[str]] = {}
    for module, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        graph[module] = set()
        imported = [target for _, target in _imported_modules(tree, module, is_package)]
        imported += [  # `from accuracy.workflows.model import units`: the module units, not only the package
            f"{node.module}.{alias.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and not node.level
            for alias in node.names
        ]
        for target in imported:
            parts = target.split(".")
            while parts and ".".join(parts) not in modules:  # a name imported from a module: the module
                parts.pop()
            if parts and parts[0] == package and ".".join(parts) != module:
                graph[module].add(".".join(parts))
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as cycle:
        return list(cycle.args[1])
    return []


def test_no_modules_import_one_another_in_a_cycle():
    assert import_cycle(ROOT / PACKAGE) == []


def test_a_planted_cycle_through_a_function_level_import_is_found(tmp_path):
    package = _write(
        tmp_path,
        {
            **CLEAN,
            "judge/typical.py": "from accuracy.judge.verdicts import Judgement\n",
            "judge/verdicts.py": "def judge():\n    from accuracy.judge import typical\n",
        },
    )
    cycle = import_cycle(package)
    assert sorted(set(cycle)) == ["accuracy.judge.typical", "accuracy.judge.verdicts"] and cycle[0] == cycle[-1]
    assert import_cycle(_write(tmp_path / "clean", CLEAN)) == []


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = root / PACKAGE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root / PACKAGE


CLEAN = {
    "__init__.py": "def __getattr__(name):\n    from accuracy.cli import main\n    return main\n",
    "core/__init__.py": "",
    "core/errors.py": "import os\n",
    "judge/__init__.py": "",
    "judge/verdicts.py": "from accuracy.core import errors\nfrom ..reference import exact\n",
    "reference/__init__.py": "",
    "reference/exact.py": "from . import cache\n",
    "reference/cache.py": "",
    "cli/__init__.py": "",
    "cli/main.py": "import accuracy.judge.verdicts\n",
}


def test_a_clean_package_passes(tmp_path):
    assert layer_violations(_write(tmp_path, CLEAN)) == []


@pytest.mark.parametrize(
    ("name", "source", "reached"),
    [
        ("core/errors.py", "import accuracy.judge.verdicts\n", "accuracy.judge.verdicts (judge)"),
        ("core/errors.py", "def f():\n    from accuracy.cli.main import main\n", "accuracy.cli.main (cli)"),
        ("reference/exact.py", "from ..judge import verdicts\n", "accuracy.judge (judge)"),
        ("reference/exact.py", "from accuracy import judge\n", "accuracy.judge (judge)"),
        ("judge/verdicts.py", "import accuracy.testing\n", "accuracy.testing (top)"),
    ],
)
def test_a_planted_upward_import_is_found(tmp_path, name, source, reached):
    package = _write(tmp_path, {**CLEAN, name: source})
    module = "accuracy." + name.removesuffix(".py").replace("/", ".")
    (violation,) = layer_violations(package)
    assert violation.startswith(f"{package / name}:")
    assert violation.endswith(f": {module} ({name.split('/')[0]}) imports {reached}")


def test_an_eager_import_in_the_top_package_is_found(tmp_path):
    package = _write(tmp_path, {**CLEAN, "__init__.py": "from accuracy.core import errors\n"})
    assert layer_violations(package) == [
        f"{package / '__init__.py'}:1: accuracy imports accuracy layers at module level"
    ]


def test_a_module_outside_every_layer_is_found(tmp_path):
    package = _write(tmp_path, {**CLEAN, "helpers.py": ""})
    assert layer_violations(package) == [
        f"{package / 'helpers.py'}: module accuracy.helpers is in no layer (add it to one)"
    ]


# The model workflow's floors, lowest first: a module imports its own floor and those below, never
# one above. Ports see what a unit is, not how it is judged; the causes are tried on judged units;
# the sweep runs ports, judge and causes and makes the report's rows; the self-tests drive sweeps.
MODEL = f"{PACKAGE}.workflows.model"
MODEL_FLOORS = (
    (
        "calls and models",
        (
            "trace",
            "kinds",
            "activations_file",
            "state_key",
            "unit",
            "rows",
            "answer",
            "zoo",
            "torchvision_import",
            "census_models",
            "decoders",
        ),
    ),
    (
        "ports",
        (
            "ports",
            "onnx_graph",
            "onnx_noise",
            "export_cache",
            "generation_cache",
            "generation_onnx_cache",
            "generation_ports",
            "memory",
        ),
    ),
    ("judging", ("units", "unit_cache", "quantization", "quantization_causes", "positions")),
    ("causes", ("causes", "op_causes", "preprocessing")),
    ("sweep and rows", ("schedulers", "sweep", "report", "generation", "census")),
    ("self-tests", ("cause_selftest", "family_selftest", "quantization_selftest")),
)


def _model_floor(module: str) -> int | None:
    """The floor of a module of the model workflow (its package itself is the lowest); None outside."""
    if module == MODEL:
        return 0
    if not module.startswith(f"{MODEL}."):
        return None
    first = module[len(MODEL) + 1 :].split(".")[0]
    return next((i for i, (_, names) in enumerate(MODEL_FLOORS) if first in names), len(MODEL_FLOORS))


def _names_imported(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """`from package import module`: the module, not only the package."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield from ((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)


def _module_of(dotted: str, package_dir: Path) -> str:
    """The module a dotted name lies in: a function or class imported from it names its module."""
    parts = dotted.split(".")
    while len(parts) > 1:
        path = package_dir.parent.joinpath(*parts)
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            break
        parts.pop()
    return ".".join(parts)


def model_floor_violations(package_dir: Path) -> list[str]:
    """Every import by which a model module reaches a floor above its own, function-level imports
    included; a module on no floor is named, so that a new one is given its place."""
    found = []
    for path in sorted((package_dir / "workflows" / "model").rglob("*.py")):
        relative = path.relative_to(package_dir.parent).with_suffix("")
        is_package = relative.name == "__init__"
        module = ".".join(relative.parts[:-1] if is_package else relative.parts)
        own = _model_floor(module)
        assert own is not None
        if own == len(MODEL_FLOORS):
            found.append(f"{path}: module {module} is on no floor of the model workflow (add it to one)")
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        imported = [*_imported_modules(tree, module, is_package), *_names_imported(tree)]
        for line, target in imported:
            name = _module_of(target, package_dir)
            floor = _model_floor(name)
            if floor is not None and own < floor < len(MODEL_FLOORS):
                found.append(
                    f"{path}:{line}: {module} ({MODEL_FLOORS[own][0]}) imports {name} ({MODEL_FLOORS[floor][0]})"
                )
    return sorted(set(found))


def test_the_model_workflows_floors_hold():
    assert model_floor_violations(ROOT / PACKAGE) == []


def test_a_port_that_imports_the_judge_of_units_is_found(tmp_path):
    """The floor test sees a port reaching `units` (how a unit is judged), at module level or in a
    function, and a module given no floor."""
    model = tmp_path / PACKAGE / "workflows" / "model"
    files = {
        "__init__.py": "",
        "unit.py": "",
        "units.py": "from accuracy.workflows.model.unit import Unit\n",
        "ports/__init__.py": "",
        "ports/base.py": "def f():\n    from accuracy.workflows.model.units import judge_unit\n",
        "ports/onnx.py": "from accuracy.workflows.model import units\n",
        "helpers.py": "",
    }
    for name, source in files.items():
        (model / name).parent.mkdir(parents=True, exist_ok=True)
        (model / name).write_text(source)
    found = model_floor_violations(tmp_path / PACKAGE)
    assert [line.split(": ", 1)[1] for line in found] == [
        f"module {MODEL}.helpers is on no floor of the model workflow (add it to one)",
        f"{MODEL}.ports.base (ports) imports {MODEL}.units (judging)",
        f"{MODEL}.ports.onnx (ports) imports {MODEL}.units (judging)",
    ]
