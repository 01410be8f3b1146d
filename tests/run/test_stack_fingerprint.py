"""The quick key a run finds its stack's last fingerprint by: it changes with what changes the stack's
numbers (a knob, a preloaded library, a package) and with nothing else; a saved fingerprint that
cannot be read is no fingerprint."""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.backends import environment
from accuracy.report.synthetic import SyntheticBenchmark, write_result_file
from accuracy.run.environment_python import refile
from accuracy.run.stack_fingerprint import KEYED_ENV, KEYED_ENV_PREFIXES, last_fingerprint, save_fingerprint, stack_key

BASE = {"HOME": "/root", "PATH": "/usr/bin"}
NAMES = st.from_regex(r"[A-Z][A-Z0-9_]{0,20}", fullmatch=True)


@settings(max_examples=30, deadline=None)
@given(name=NAMES, value=st.text(st.characters(codec="ascii", exclude_characters="\0"), max_size=8))
def test_only_the_variables_that_change_a_stack_change_its_key(name, value):
    keyed = name.startswith(KEYED_ENV_PREFIXES) or name in KEYED_ENV
    with mock.patch.object(environment, "installed_packages", lambda: {"numpy": "2.4.6"}):  # read once is enough
        assert (stack_key(BASE | {name: value + "x"}) != stack_key(BASE)) == keyed


def test_a_knob_a_preloaded_library_and_a_package_each_change_the_key(monkeypatch):
    key = stack_key(BASE)
    assert stack_key(dict(BASE)) == key
    assert stack_key(BASE | {"OPENBLAS_CORETYPE": "Haswell"}) != key
    assert stack_key(BASE | {"LD_PRELOAD": "/opt/libmkl_rt.so"}) != key
    upgraded = environment.installed_packages() | {"numpy": "0.0.1"}
    monkeypatch.setattr(environment, "installed_packages", lambda: upgraded)
    assert stack_key(BASE) != key


def test_a_saved_fingerprint_round_trips_and_a_damaged_one_is_none(cache_path):
    assert last_fingerprint("k") is None
    save_fingerprint("k", {"packages": {"numpy": "2.4.6"}})
    assert last_fingerprint("k") == {"packages": {"numpy": "2.4.6"}}
    saved = cache_path / "fingerprints" / "k.json"
    for damaged in ("{not json", "[1, 2]", ""):
        saved.write_text(damaged)
        assert last_fingerprint("k") is None
    assert os.listdir(saved.parent) == ["k.json"]  # atomic saves leave no temporary files


def test_installed_packages_are_what_importlib_metadata_parses(tmp_path, monkeypatch):
    """Read from the metadata's header lines, they are what `Distribution.metadata` gives, for every
    distribution here and for the shapes it reads: folded fields, a description that repeats a
    header, PKG-INFO instead of METADATA, a distribution without a name."""
    from importlib.metadata import distributions

    site = tmp_path / "site"
    for folder, file, text in [
        (
            "Folded_Pkg-1.0.dist-info",
            "METADATA",
            "Metadata-Version: 2.1\nName: Folded_Pkg\nVersion: 1.0\n"
            "Summary: one\n  continued\n\nName: not-this\nVersion: 9\n",
        ),
        (
            "old_egg-2.0.egg-info",
            "PKG-INFO",
            "Metadata-Version: 1.0\r\nName: Old_Egg\r\nVersion: 2.0rc1\r\n\r\nVersion: 9\r\n",
        ),
        ("nameless-0.dist-info", "METADATA", "Metadata-Version: 2.1\nVersion: 3\n"),
    ]:
        (site / folder).mkdir(parents=True)
        (site / folder / file).write_text(text)
    monkeypatch.syspath_prepend(str(site))
    named = [d for d in distributions() if d.metadata.get("Name")]
    expected = dict(sorted((d.metadata["Name"].lower(), d.version) for d in named))
    assert environment.installed_packages() == expected
    assert expected["folded_pkg"] == "1.0" and expected["old_egg"] == "2.0rc1" and len(expected) > 100


def test_a_second_clone_has_its_own_key(monkeypatch):
    """Issue 40 item 21: two clones' venvs resolve to one interpreter, so they shared a key; but
    their libraries' paths are in the label, and each clone's run failed after the other's."""
    with mock.patch.object(environment, "installed_packages", lambda: {"numpy": "2.4.6"}):
        key = stack_key(BASE)
        monkeypatch.setattr(sys, "prefix", "/elsewhere/second-clone/.venv")
        assert stack_key(BASE) != key


def test_a_batch_timed_under_a_stale_label_is_refiled_under_the_fresh_one(tmp_path):
    """Issue 40 item 21: "nothing was saved; run again" threw a finished batch away, though the
    batch had measured the stack the fresh label names. Only this batch's benchmarks move; those
    already filed under the fresh label for the commit stay."""
    old, new = "env-aaaaaaaa", "env-bbbbbbbb"
    bench = {name: SyntheticBenchmark(f"bench_x.X.{name}", "track", "ulp", ("n",), ((1,),)) for name in "abc"}
    when = datetime.datetime(2026, 3, 1, tzinfo=datetime.UTC)

    def file(label: str, names: str, value: float) -> Path:
        env = f"existing-py_clone_.asv_python_{label}_python"
        return write_result_file(tmp_path, "box", env, "c" * 40, when, [bench[n] for n in names], lambda b, c: value)

    earlier_old, earlier_new = file(old, "ab", 1.0), file(new, "c", 3.0)
    before = earlier_old.read_text()
    moved = refile(earlier_old, old, new, {"bench_x.X.b"})
    assert moved == earlier_new and earlier_old.read_text() == before
    data = json.loads(moved.read_text())
    assert data["env_name"] == f"existing-py_clone_.asv_python_{new}_python" and data["python"] == f"3.11 {new}"
    assert {name: row[0] for name, row in data["results"].items()} == {"bench_x.X.b": [1.0], "bench_x.X.c": [3.0]}
