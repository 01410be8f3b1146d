"""A cause finding is a frozen CauseFinding in Python and a dict only in JSON: `--json` writes its
`to_json()` (json_ready, at the edge), and reading that JSON back gives the same finding."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from accuracy.core.json_output import dumps
from accuracy.judge.verdicts import Verdict
from accuracy.workflows.model.unit import CauseFinding, NamedCause, SkippedCause

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
PARAMETERS = st.dictionaries(TEXT, st.one_of(st.integers(-5, 5), st.floats(allow_nan=False, allow_infinity=False)))
FINDINGS = st.builds(
    CauseFinding,
    name=st.one_of(st.none(), TEXT),
    words=st.one_of(st.none(), TEXT),
    parameters=PARAMETERS,
    verdict=st.one_of(st.none(), st.sampled_from(Verdict)),
    ratio=st.one_of(st.none(), st.floats(0, 1e6)),
    explains=st.booleans(),
    alternatives=st.lists(st.builds(NamedCause, TEXT, st.one_of(st.none(), TEXT), PARAMETERS), max_size=2).map(tuple),
    skipped=st.lists(st.builds(SkippedCause, TEXT, TEXT), max_size=2).map(tuple),
    positions=st.one_of(st.none(), st.fixed_dictionaries({"shape": TEXT, "words": TEXT})),
)
# a clipping cause's quantize point and the unit it feeds (the path only beside a point)
POINTS = st.one_of(st.just((None, None)), st.tuples(TEXT, st.one_of(st.none(), TEXT)))


@given(FINDINGS, POINTS)
def test_a_finding_read_back_from_its_json_is_the_same_finding(found, point):
    found = replace(found, value=point[0], path=point[1])
    written = json.loads(dumps({"cause": found}))["cause"]
    assert CauseFinding.of(written) == found
    assert list(written)[:6] == ["name", "words", "parameters", "verdict", "ratio", "explains"]
    assert ("value" in written) == (found.value is not None)
    assert ("positions" in written) == (found.positions is not None)


def test_a_rows_missing_cause_stays_missing():
    assert CauseFinding.of(None) is None and CauseFinding.of({}) is None
