"""The on-disk reference cache: hits skip the computation, corrupt entries are recomputed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from accuracy.catalog.registry import get_op
from accuracy.core.dtypes import get_format
from accuracy.reference import cache as refcache
from accuracy.reference.exact import Exact
from accuracy.workflows.evaluation import Case


class Counter:
    def __init__(self, exact):
        self.exact, self.calls = exact, 0

    def __call__(self):
        self.calls += 1
        return self.exact


def _exact():
    return Exact(np.linspace(-1, 1, 50), np.full(50, 2.0**-60))


def test_cache_dir_follows_env(cache_path):
    assert refcache.cache_dir() == cache_path


def test_second_call_hits_cache(cache_path):
    compute = Counter(_exact())
    a = refcache.cached("k1", compute)
    b = refcache.cached("k1", compute)
    assert compute.calls == 1
    assert (cache_path / "k1.npz").exists()
    assert a.hi.tobytes() == b.hi.tobytes() == compute.exact.hi.tobytes()
    assert b.lo.tobytes() == compute.exact.lo.tobytes()


def _corruptions(data: bytes):
    mid = len(data) // 2
    flipped = bytearray(data)
    flipped[mid] ^= 0xFF
    return {"truncated": data[:mid], "empty": b"", "flipped": bytes(flipped), "garbage": b"PK\x03\x04" + b"\x00" * 64}


@pytest.mark.parametrize("kind", ["truncated", "empty", "flipped", "garbage"])
def test_corrupt_entry_is_recomputed_not_trusted(cache_path, kind):
    compute = Counter(_exact())
    refcache.cached("k2", compute)
    path = cache_path / "k2.npz"
    path.write_bytes(_corruptions(path.read_bytes())[kind])
    got = refcache.cached("k2", compute)
    assert compute.calls == 2
    assert got.hi.tobytes() == compute.exact.hi.tobytes()
    # the entry was rewritten and is good again
    refcache.cached("k2", compute)
    assert compute.calls == 2


def test_entry_with_valid_zip_but_wrong_payload_fails_digest(cache_path):
    """A well-formed npz whose arrays no longer match the stored digest is not trusted."""
    compute = Counter(_exact())
    refcache.cached("k3", compute)
    path = cache_path / "k3.npz"
    with np.load(path) as data:
        hi, lo, digest = data["hi"].copy(), data["lo"], data["digest"]
    hi[7] = np.nextafter(hi[7], np.inf)  # one ulp: still a perfectly readable file
    with open(path, "wb") as f:
        np.savez(f, hi=hi, lo=lo, digest=digest)
    got = refcache.cached("k3", compute)
    assert compute.calls == 2
    assert got.hi[7] == compute.exact.hi[7]


def test_cache_key_depends_on_everything():
    x = {"x": np.arange(4, dtype=np.float32)}
    base = refcache.cache_key("exp", 1, "float32", x)
    assert base == refcache.cache_key("exp", 1, "float32", {"x": np.arange(4, dtype=np.float32)})
    assert base != refcache.cache_key("exp", 2, "float32", x)  # op version
    assert base != refcache.cache_key("log", 1, "float32", x)
    assert base != refcache.cache_key("exp", 1, "float64", x)
    assert base != refcache.cache_key("exp", 1, "float32", {"y": x["x"]})
    assert base != refcache.cache_key("exp", 1, "float32", {"x": np.arange(4, dtype=np.float64)})
    assert base != refcache.cache_key("exp", 1, "float32", {"x": x["x"].reshape(2, 2)})
    y = x["x"].copy()
    y[3] = np.nextafter(y[3], np.float32(np.inf))
    assert base != refcache.cache_key("exp", 1, "float32", {"x": y})


def test_case_uses_cache_and_a_new_op_version_recomputes(cache_path):
    op = get_op("softmax")
    fmt = get_format("float32")
    calls = []

    def counting(inputs, f):
        calls.append(1)
        return op.exact(inputs, f)

    v1 = dataclasses.replace(op, exact=counting)
    a = Case(v1, fmt, 8).exact
    b = Case(v1, fmt, 8).exact
    assert len(calls) == 1 and a.hi.tobytes() == b.hi.tobytes()
    v2 = dataclasses.replace(v1, version=op.version + 1)
    c = Case(v2, fmt, 8).exact
    assert len(calls) == 2 and c.hi.tobytes() == a.hi.tobytes()  # recomputed, to the same values
    assert len(list(cache_path.glob("*.npz"))) == 2


def test_read_only_cache_still_computes(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    monkeypatch.setenv("OPBENCH_CACHE", str(ro / "sub"))
    try:
        compute = Counter(_exact())
        got = refcache.cached("k4", compute)
        assert compute.calls == 1 and got.hi.size == 50
    finally:
        ro.chmod(0o700)


def test_a_valid_entry_copied_onto_another_key_is_recomputed_and_verdicts_stay_right(cache_path):
    """Issue 22 #13: float64 exp's reference stored under float32 exp's key made every
    implementation "beyond rounding"; the digest now binds the entry to its key."""
    from accuracy.judge.verdicts import WITHIN, Evidence

    op = get_op("exp")
    _ = Case(op, get_format("float64"), 8).exact
    (entry64,) = cache_path.glob("*.npz")
    case32 = Case(op, get_format("float32"), 8)
    right = case32.exact
    (entry32,) = set(cache_path.glob("*.npz")) - {entry64}
    entry32.write_bytes(entry64.read_bytes())

    fresh = Case(op, get_format("float32"), 8)
    assert fresh.exact.hi.tobytes() == right.hi.tobytes() and fresh.exact.lo.tobytes() == right.lo.tobytes()
    numpy_exp = next(i for i in op.available_impls("float32") if i.backend == "numpy")
    evidence = Evidence(op, fresh.inputs, fresh.fmt, fresh.exact)
    assert evidence.judge(fresh.run(numpy_exp), numpy_exp).verdict == WITHIN
    elsewhere = "0" * 64  # the repaired entry is bound to its own key: read under another, it misses
    (cache_path / f"{elsewhere}.npz").write_bytes(entry32.read_bytes())
    assert refcache.load_arrays(entry32.stem) is not None and refcache.load_arrays(elsewhere) is None
