"""Provider discovery, description and clean failure of the ctypes ``blas`` backend."""

import ctypes.util
import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from threadpoolctl import threadpool_info

from accuracy.backends.blas import ProviderLoadError, discover_providers, load_provider
from accuracy.backends.blas.providers import ENV_VAR, candidates, parse_env
from accuracy.core.errors import OpbenchError


@pytest.fixture(scope="module")
def discovery():
    return discover_providers(environ={})


def _provider(discovery, name):
    if name not in discovery.providers:
        pytest.skip(f"{name} not installed here (errors: {[str(e) for e in discovery.load_errors]})")
    return discovery.providers[name]


def _wheel_provider(discovery, prefix):
    names = [n for n in discovery.providers if n.startswith(prefix)]
    if not names:
        pytest.skip(f"no {prefix}* wheel installed")
    return discovery.providers[names[0]]


def test_numpy_openblas_is_ilp64_with_suffixed_symbols(discovery):
    p = _provider(discovery, "numpy-openblas")
    assert (p.vendor, p.abi.integer_width, p.abi.prefix, p.abi.suffix) == ("OpenBLAS", "ILP64", "scipy_", "64_")
    assert p.missing_ops == []


def test_scipy_openblas_is_lp64(discovery):
    p = _provider(discovery, "scipy-openblas")
    assert (p.vendor, p.abi.integer_width, p.abi.suffix) == ("OpenBLAS", "LP64", "")


def test_architecture_is_what_threadpoolctl_reports(discovery):
    seen = {os.path.realpath(i["filepath"]): i for i in threadpool_info()}
    openblas = [p for p in discovery.providers.values() if p.vendor == "OpenBLAS"]
    assert openblas
    for p in openblas:
        assert p.architecture and p.architecture == seen[os.path.realpath(p.path)]["architecture"]
        assert p.version == seen[os.path.realpath(p.path)]["version"]


def test_mkl_wheel_reports_its_code_path(discovery):
    p = _provider(discovery, "mkl")
    assert (p.vendor, p.abi.integer_width, p.abi.suffix) == ("MKL", "LP64", "")
    assert p.architecture  # MKL_Get_Version's Processor: the branch MKL dispatched to
    assert p.threading_layer in {"intel", "sequential", "gnu", "tbb"}


def test_scipy_openblas32_wheel_is_named_by_package_and_reports_its_version(discovery):
    p = _wheel_provider(discovery, "scipy-openblas32")
    assert p.name == "scipy-openblas32"  # stable across environments with other versions
    wheel_version = ".".join(importlib.metadata.version("scipy-openblas32").split(".")[:3])
    assert p.version.startswith(wheel_version)
    assert p.abi.integer_width == "LP64"


def test_info_records_provenance(discovery):
    info = _provider(discovery, "numpy-openblas").info()
    assert {
        "name",
        "path",
        "vendor",
        "version",
        "architecture",
        "threading_layer",
        "num_threads",
        "integer_width",
        "symbol_prefix",
        "symbol_suffix",
        "missing_ops",
        "kernel_env",
    } <= info.keys()
    assert all(os.environ[k] == v for k, v in info["kernel_env"].items())


def test_candidates_are_unique_files():
    real = [os.path.realpath(path) for _, path in candidates()]
    assert len(real) == len(set(real))


def test_missing_file_is_one_line_error():
    with pytest.raises(ProviderLoadError) as exc:
        load_provider("/nonexistent/libnothing.so", "ghost")
    message = str(exc.value)
    assert "\n" not in message and "ghost" in message and "cannot load" in message
    assert isinstance(exc.value, OpbenchError)


def test_not_a_library_is_one_line_error(tmp_path):
    fake = tmp_path / "libfake.so"
    fake.write_text("not an ELF file")
    with pytest.raises(ProviderLoadError, match="cannot load"):
        load_provider(fake)


def test_library_without_blas_symbols_is_rejected():
    libm = ctypes.util.find_library("m")
    with pytest.raises(ProviderLoadError, match="exports no CBLAS"):
        load_provider(libm, "libm")


def test_bad_env_entries_are_reported_and_skipped():
    discovery = discover_providers(environ={ENV_VAR: "/nonexistent/libx.so:broken"}, lib_dirs=())
    assert [e.name for e in discovery.load_errors] == ["broken"]
    assert "numpy-openblas" in discovery.providers


def test_env_entry_loads_under_given_name(discovery):
    path = _provider(discovery, "scipy-openblas").path
    loaded = discover_providers(environ={ENV_VAR: f"{path}:mine"}, lib_dirs=()).providers
    assert loaded["mine"].path == path and loaded["mine"].vendor == "OpenBLAS"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/a/libx.so", [(None, "/a/libx.so")]),
        ("/a/libx.so:fast", [("fast", "/a/libx.so")]),
        ("/a/libx.so:fast, /b/liby.so.3", [("fast", "/a/libx.so"), (None, "/b/liby.so.3")]),
        ("", []),
    ],
)
def test_parse_env(value, expected):
    assert parse_env(value) == expected


@pytest.fixture(scope="module")
def copied_openblas(tmp_path_factory, discovery):
    """The scipy-openblas32 library copied under Debian's layout, with its gfortran beside it."""
    source = Path(_wheel_provider(discovery, "scipy-openblas32").path)
    root = tmp_path_factory.mktemp("syslib")
    target = root / "openblas-pthread"
    target.mkdir()
    for dep in source.parent.glob("lib*.so*"):
        shutil.copy(dep, target / dep.name)
    shutil.copy(source, target / "libblas.so.3")
    return root


def test_system_layout_is_discovered_and_named(copied_openblas):
    discovery = discover_providers(environ={}, lib_dirs=(str(copied_openblas),))
    p = discovery.providers["system-openblas-pthread"]
    assert p.vendor == "OpenBLAS" and p.path.endswith("openblas-pthread/libblas.so.3")


SMALL_CNN_BITS = """
import hashlib, sys
if sys.argv[1] == "providers-first":
    from accuracy.backends.blas import discover_providers
    assert "mkl" in discover_providers(environ={}).providers
from accuracy.core.dtypes import FORMATS
from accuracy.workflows.model import zoo
from accuracy.workflows.model.trace import generated_inputs, run_in
_, out = run_in(zoo.small_cnn().eval(), generated_inputs("x=2x3x8x8"), FORMATS["float32"])
print(hashlib.sha256(out.detach().numpy().tobytes()).hexdigest())
"""


@pytest.mark.slow  # two fresh processes, each loading torch
def test_listing_the_providers_before_torch_loads_changes_nothing_torch_computes():
    """MKL's runtime opens its layers into the global symbol scope on its first call; a torch loaded
    after them ran MKL's kernels and Intel's OpenMP in place of its own (small_cnn's float32 output:
    7.38e-8 of float64 against 6.39e-8). Issue 60's Dask sweep tests saw it in a test worker, which
    had imported tests/backends/test_blas_threads.py (its providers listed at import) first."""
    if "mkl" not in discover_providers(environ={}).providers:
        pytest.skip("MKL (the blas extra's pip package) is not installed: nothing opens global layers")
    runs = {
        order: subprocess.run(
            [sys.executable, "-c", SMALL_CNN_BITS, order],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[2],
        ).stdout
        for order in ("torch-alone", "providers-first")
    }
    assert runs["providers-first"] == runs["torch-alone"]
