"""Per-provider thread control and the 1-thread vs all-threads reproducibility check."""

import shutil
from pathlib import Path

import numpy as np
import pytest

from accuracy.blas import discover_providers, gemm_thread_reproducibility, load_provider
from accuracy.blas.reproducibility import available_threads

PROVIDERS = discover_providers(environ={}).providers
THREADED = sorted(name for name, p in PROVIDERS.items() if p.report.threads.source != "none")
pytestmark = pytest.mark.skipif(not THREADED, reason="no provider with a threading API")


@pytest.mark.parametrize("name", THREADED)
def test_threads_round_trip(name):
    p = PROVIDERS[name]
    before = p.num_threads
    with p.threads(1):
        assert p.num_threads == 1
        with p.threads(2):
            assert p.num_threads == 2
        assert p.num_threads == 1
    assert p.num_threads == before


@pytest.mark.parametrize("name", THREADED)
def test_threads_restored_after_exception(name):
    p = PROVIDERS[name]
    before = p.num_threads
    with pytest.raises(RuntimeError), p.threads(1):
        raise RuntimeError
    assert p.num_threads == before


def test_limit_touches_only_its_own_library():
    if len(THREADED) < 2:
        pytest.skip("needs two threaded providers")
    first, second = (PROVIDERS[n] for n in THREADED[:2])
    with second.threads(1):
        before = first.num_threads
        with first.threads(2):
            assert second.num_threads == 1
        assert first.num_threads == before


@pytest.fixture(scope="module")
def unrecognised_openblas(tmp_path_factory):
    """An OpenBLAS under a name threadpoolctl does not know, so control must go native."""
    names = [n for n in PROVIDERS if n.startswith("scipy-openblas")]
    if not names:
        pytest.skip("needs scipy's bundled OpenBLAS or a scipy-openblas wheel")
    source = Path(PROVIDERS[names[-1]].path)
    target = tmp_path_factory.mktemp("native")
    for dep in source.parent.glob("lib*.so*"):
        shutil.copy(dep, target / dep.name)
    shutil.copy(source, target / "libmystery.so")
    return load_provider(target / "libmystery.so")


def test_native_thread_control_round_trip(unrecognised_openblas):
    p = unrecognised_openblas
    assert p.report.threads.source == "native" and p.vendor == "OpenBLAS" and p.architecture
    before = p.num_threads
    with p.threads(1):
        assert p.num_threads == 1
    assert p.num_threads == before


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", THREADED)
def test_reproducibility_report_is_consistent(name, dtype):
    result = gemm_thread_reproducibility(PROVIDERS[name], n=96, dtype=dtype)
    assert result.threads == available_threads()
    assert result.bitwise_identical == (result.max_abs_diff == 0)
    assert result.max_abs_diff <= 96 * np.finfo(dtype).eps * 96  # |A||B| ~ n for N(0,1) inputs


@pytest.mark.parametrize("name", THREADED)
def test_same_thread_count_is_bitwise_identical(name):
    assert gemm_thread_reproducibility(PROVIDERS[name], n=64, threads=1).bitwise_identical
