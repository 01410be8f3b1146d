"""One thread controller: threadpoolctl sees and limits every loaded BLAS, torch's pool is its backend's.

Libraries under names threadpoolctl cannot recognise are loaded in a subprocess: registering their
controllers is process-wide and permanent.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from accuracy.backends import get_backend
from accuracy.backends.blas import discover_providers, gemm_thread_reproducibility, load_provider
from accuracy.backends.blas.controllers import SerialBLASController
from accuracy.core.threads import all_cores, thread_limit

PROVIDERS = discover_providers(environ={}).providers
NAMES = sorted(PROVIDERS)
THREADED = [n for n in NAMES if not isinstance(PROVIDERS[n].controller.lib_controllers[0], SerialBLASController)]
# Loads what OPBENCH_BLAS and the system dirs in argv name, then reports threadpoolctl's view of
# every library before, inside and after a limit of 1 (from a starting count of 3, whatever the cores).
PROBE = """
import json, sys
from threadpoolctl import threadpool_info
from accuracy.backends.blas import discover_providers
from accuracy.core.threads import thread_limit

discovery = discover_providers(lib_dirs=tuple(sys.argv[1:]))
view = lambda: {lib["filepath"]: lib for lib in threadpool_info()}
with thread_limit(3):
    before = view()
    with thread_limit(1):
        limited = view()
    after = view()
print(json.dumps({
    "providers": {name: {"path": p.path, "vendor": p.vendor, "num_threads": p.num_threads}
                  for name, p in discovery.providers.items()},
    "errors": {e.name: e.reason for e in discovery.load_errors},
    "before": before, "limited": limited, "after": after,
}))
"""
REFERENCE_DDOT = """
double ddot_(const int *n, const double *x, const int *incx, const double *y, const int *incy) {
    double sum = 0;
    for (int i = 0; i < *n; i++) sum += x[i * *incx] * y[i * *incy];
    return sum;
}
"""


def probe(opbench_blas: str = "", lib_dirs: tuple[str, ...] = ()) -> dict:
    env = {**os.environ, "OPBENCH_BLAS": opbench_blas}
    proc = subprocess.run([sys.executable, "-c", PROBE, *lib_dirs], env=env, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def numpy_openblas() -> Path:
    if "numpy-openblas" not in PROVIDERS:
        pytest.skip("numpy has no bundled OpenBLAS here")
    return Path(PROVIDERS["numpy-openblas"].path)


def copy_with_dependencies(source: Path, target: Path) -> Path:
    """``source`` copied to ``target``, with the libraries beside it that it loads from $ORIGIN."""
    target.parent.mkdir(parents=True, exist_ok=True)
    for dependency in source.parent.glob("lib*.so*"):
        shutil.copy(dependency, target.parent / dependency.name)
    shutil.copy(source, target)
    return target


@pytest.fixture(scope="module")
def reference_blas(tmp_path_factory) -> Path:
    """A serial Fortran-ABI BLAS (one ddot_) where Debian puts its reference BLAS: blas/libblas.so.3."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("needs a C compiler")
    root = tmp_path_factory.mktemp("reference")
    source = root / "ddot.c"
    source.write_text(REFERENCE_DDOT)
    (root / "blas").mkdir()
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(root / "blas" / "libblas.so.3"), str(source)], check=True)
    return root / "blas" / "libblas.so.3"


def test_threadpoolctl_lists_every_provider():
    listed = {os.path.realpath(lib["filepath"]): lib for lib in threadpool_info()}
    for p in PROVIDERS.values():
        lib = listed[os.path.realpath(p.path)]
        assert (lib["version"], lib["num_threads"]) == (p.version, p.num_threads)
        assert lib.get("architecture") in (None, p.architecture)  # threadpoolctl omits MKL's code path


@pytest.mark.slow  # end to end: a fresh Python process loads the libraries
def test_library_under_an_unrecognised_name_is_listed_and_limited(numpy_openblas, tmp_path):
    odd = copy_with_dependencies(numpy_openblas, tmp_path / "vendor_kernels.so")
    seen = probe(f"{odd}:odd")
    path = os.path.realpath(odd)
    lib = seen["before"][path]
    numpy = PROVIDERS["numpy-openblas"]
    assert seen["providers"]["odd"]["vendor"] == "OpenBLAS"
    assert (lib["internal_api"], lib["version"], lib["architecture"]) == ("openblas", numpy.version, numpy.architecture)
    assert "USE64BITINT" in lib["config"]  # OpenBLAS's own report, added by the registered controller
    assert (lib["num_threads"], seen["limited"][path]["num_threads"], seen["after"][path]["num_threads"]) == (3, 1, 3)


@pytest.mark.slow  # end to end: a fresh Python process loads the libraries
def test_every_pool_is_limited_and_restored(numpy_openblas, tmp_path):
    seen = probe(f"{copy_with_dependencies(numpy_openblas, tmp_path / 'kernels.so')}:odd")
    assert set(seen["before"]) == set(seen["limited"]) == set(seen["after"])
    assert {lib["num_threads"] for lib in seen["limited"].values()} == {1}
    assert {path: lib["num_threads"] for path, lib in seen["after"].items()} == {
        path: lib["num_threads"] for path, lib in seen["before"].items()
    }


@pytest.mark.slow  # end to end: a fresh Python process loads the libraries
def test_serial_library_is_listed_with_one_thread(reference_blas):
    seen = probe(lib_dirs=(str(reference_blas.parent.parent),))
    lib = seen["before"][os.path.realpath(reference_blas)]
    assert seen["providers"]["system-reference-blas"]["vendor"] == "reference"
    assert (lib["internal_api"], lib["num_threads"], seen["limited"][lib["filepath"]]["num_threads"]) == (
        "reference",
        1,
        1,
    )


@pytest.mark.slow  # end to end: a fresh Python process loads the libraries
@pytest.mark.parametrize("reference_first", [True, False])
def test_files_sharing_a_base_name_get_their_own_controllers(reference_blas, numpy_openblas, tmp_path, reference_first):
    """Debian's alternatives all name their library libblas.so.3; threadpoolctl matches base names."""
    openblas = copy_with_dependencies(numpy_openblas, tmp_path / "openblas-pthread" / "libblas.so.3")
    entries = [f"{reference_blas}:ref", f"{openblas}:fast"]
    seen = probe(",".join(entries if reference_first else entries[::-1]))
    assert not seen["errors"]
    assert {name: p["vendor"] for name, p in seen["providers"].items() if name in ("ref", "fast")} == {
        "ref": "reference",
        "fast": "OpenBLAS",
    }
    assert seen["before"][os.path.realpath(openblas)]["num_threads"] == 3
    assert seen["before"][os.path.realpath(reference_blas)]["num_threads"] == 1


@pytest.mark.slow  # end to end: a fresh Python process loads the libraries
def test_file_threadpoolctl_cannot_list_is_one_load_error(numpy_openblas, tmp_path):
    hidden = copy_with_dependencies(numpy_openblas, tmp_path / "kernels.bin")  # it lists only *.so*
    seen = probe(f"{hidden}:hidden")
    assert "hidden" not in seen["providers"]
    assert "threadpoolctl does not list it" in seen["errors"]["hidden"]


@pytest.mark.parametrize("name", THREADED)
def test_provider_limit_nests_and_restores(name):
    p = PROVIDERS[name]
    with thread_limit(3):
        with p.threads(1):
            assert p.num_threads == 1
            with p.threads(2):
                assert p.num_threads == 2
            assert p.num_threads == 1
        assert p.num_threads == 3


@pytest.mark.parametrize("name", THREADED)
def test_provider_limit_restored_after_exception(name):
    p = PROVIDERS[name]
    with thread_limit(3):
        with pytest.raises(RuntimeError), p.threads(1):
            raise RuntimeError
        assert p.num_threads == 3


def test_provider_limit_touches_only_its_own_library():
    if len(THREADED) < 2:
        pytest.skip("needs two threaded providers")
    first, second = (PROVIDERS[n] for n in THREADED[:2])
    with thread_limit(3), second.threads(1), first.threads(2):
        assert (first.num_threads, second.num_threads) == (2, 1)


@pytest.mark.parametrize("name", THREADED)
def test_blas_backend_limits_its_provider(name):
    backend = get_backend(f"blas-{name}")
    with thread_limit(3):
        with backend.thread_limit(1):
            assert backend.provider.num_threads == 1
        assert backend.provider.num_threads == 3


def torch_pools(torch) -> dict[str, int]:
    """torch's own report of its pools: at::get_num_threads and, where built in, OpenMP's and MKL's."""
    pools = (line.strip().split(" : ") for line in torch.__config__.parallel_info().splitlines())
    wanted = ("at::get_num_threads()", "omp_get_max_threads()", "mkl_get_max_threads()")
    return {pool[0]: int(pool[1]) for pool in pools if pool[0] in wanted}


def test_torch_pools_are_set_and_restored_by_the_torch_backend():
    torch = pytest.importorskip("torch")
    previous = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        with get_backend("torch").thread_limit(1):
            assert set(torch_pools(torch).values()) == {1}
            assert {lib["num_threads"] for lib in threadpool_info()} == {1}
        assert set(torch_pools(torch).values()) == {3}
    finally:
        torch.set_num_threads(previous)


def test_generic_limit_reaches_torch_only_through_openmp_and_restores_it():
    """Without the torch backend, torch's pools follow only the OpenMP runtime threadpoolctl limits."""
    torch = pytest.importorskip("torch")
    previous = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        openmp = "ATen parallel backend: OpenMP" in torch.__config__.parallel_info()
        with thread_limit(1):
            assert torch.get_num_threads() == (1 if openmp else 3)
        assert set(torch_pools(torch).values()) == {3}
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", NAMES)
def test_reproducibility_report_is_consistent(name, dtype):
    result = gemm_thread_reproducibility(PROVIDERS[name], n=96, dtype=dtype)
    assert result.threads == all_cores()
    assert result.bitwise_identical == (result.max_abs_diff == 0)
    assert result.max_abs_diff <= 96 * np.finfo(dtype).eps * 96  # |A||B| ~ n for N(0,1) inputs


@pytest.mark.parametrize("name", NAMES)
def test_same_thread_count_is_bitwise_identical(name):
    assert gemm_thread_reproducibility(PROVIDERS[name], n=64, threads=1).bitwise_identical


def test_a_library_loaded_by_path_after_a_limit_is_limited_by_the_next(numpy_openblas, tmp_path):
    """thread_limit keeps threadpoolctl's cached controller, which lists the loaded libraries
    again only after an import: a BLAS the backend loads by path under a name threadpoolctl
    knows (nothing registered) must still be in the next limit."""
    with thread_limit(2):
        pass  # the cache now holds the libraries loaded so far
    late = load_provider(copy_with_dependencies(numpy_openblas, tmp_path / "libopenblas_late.so"))
    with late.threads(3):
        with thread_limit(1):
            inside = late.num_threads
        assert (inside, late.num_threads) == (1, 3)
