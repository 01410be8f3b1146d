"""The quick key a run finds its stack's last fingerprint by: it changes with what changes the stack's
numbers (a knob, a preloaded library, a package) and with nothing else; a saved fingerprint that
cannot be read is no fingerprint."""

from __future__ import annotations

import os
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.backends import environment
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
