"""Monte Carlo runs in stages (typical.RUN_STAGES): a unit's runs stop once every output to judge
is below sqrt(k/64) of the k-run threshold, which the 64 runs' threshold cannot be below by the
inequality in docs/verdicts.md. So the verdict is always the 64 runs' verdict, and runs that go
on to 64 give bitwise the 64 runs of one call."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.catalog.registry import get_op
from accuracy.core.dtypes import FORMATS
from accuracy.judge import typical
from accuracy.judge.emulation import emulate
from accuracy.judge.function_tier import function_evidence
from accuracy.judge.torch_emulation import MonteCarloRuns, monte_carlo_runs
from accuracy.judge.verdicts import Evidence
from accuracy.reference.exact import Exact

FLOAT32 = FORMATS["float32"]


def _softmax_block(in0: torch.Tensor) -> torch.Tensor:
    """One error reaching an op twice (softmax over a scaled input): judged by the runs."""
    return torch.softmax(in0 * 3, -1) * in0


def _case(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = np.random.default_rng(seed).standard_normal((6, 24)).astype(np.float32)
    own = _softmax_block(torch.from_numpy(x)).numpy()
    reference = _softmax_block(torch.from_numpy(x.astype(np.float64))).numpy()
    return x, own, reference


def _judged(x, own, reference, outputs):
    evidence = function_evidence(_softmax_block, "block", "torch", {"in0": x}, FLOAT32, own, reference, None, outputs)
    return evidence, [evidence.judge(o) for o in outputs]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), scale=st.floats(0.0, 40.0), spread=st.floats(0.0, 1.0))
def test_the_verdict_is_the_64_runs_verdict(seed, scale, spread):
    x, own, reference = _case(seed)
    rng = np.random.default_rng(seed + 1)
    # an error of `scale` times the deterministic run's own, on a share `spread` of the elements
    bump = (own.astype(np.float64) - reference) * scale * (rng.random(own.shape) < spread)
    output = (reference + bump + (own - reference)).astype(np.float32)
    staged, (verdict,) = _judged(x, own, reference, [output])
    full, _ = _judged(x, own, reference, [])  # no outputs known: all 64 runs, as before stages
    verdict64 = full.judge(output)
    assert verdict.verdict == verdict64.verdict
    runs = int(staged.op.basis.split("RMS error of ")[1].split(" Monte Carlo")[0])
    assert runs in (8, 16, 32, 64) and "RMS error of 64 Monte Carlo runs" in full.op.basis
    if runs < 64:  # stopped: within, and the 64 runs' ratio at most sqrt(64/k) times its own
        assert verdict.verdict.value == "within rounding"
        assert verdict64.typical_ratio <= verdict.typical_ratio * np.sqrt(64 / runs) * (1 + 1e-12)
    else:
        assert verdict.typical_ratio == verdict64.typical_ratio


def test_a_correct_output_stops_at_8_runs_and_a_wrong_one_takes_64():
    x, own, reference = _case(3)
    staged, (verdict,) = _judged(x, own, reference, [own])
    assert "RMS error of 8 Monte Carlo runs" in staged.op.basis and verdict.verdict.value == "within rounding"
    wrong = (own * np.float32(1 + 1e-4)).astype(np.float32)
    staged, verdicts = _judged(x, own, reference, [own, wrong])  # one port unsettled: all 64 runs
    assert "RMS error of 64 Monte Carlo runs" in staged.op.basis
    assert verdicts[0].verdict.value == "within rounding"
    assert verdicts[1].verdict.value != "within rounding"


def test_continued_runs_are_bitwise_one_calls_runs():
    x = {"in0": np.random.default_rng(5).standard_normal((4, 16))}
    seeds = [[20190, i] for i in range(16)]
    whole, *_ = monte_carlo_runs(_softmax_block, x, FLOAT32, seeds)
    staged = MonteCarloRuns(_softmax_block, x, FLOAT32)
    staged.extend(seeds[:8])
    staged.extend(seeds[8:])
    assert all(np.array_equal(a, b) for a, b in zip(whole, staged.results, strict=True))


LINEAR = get_op("linear")


def _linear_case(seed: int) -> tuple[dict[str, np.ndarray], np.ndarray, Exact]:
    """A registry linear on float32 inputs, its float32 result and its exact value."""
    inputs = {k: FLOAT32.round(v) for k, v in LINEAR.generate(np.random.default_rng(seed), 24).items()}
    own = np.asarray(F.linear(*(torch.from_numpy(inputs[k].astype(np.float32)) for k in ("x", "W", "b"))))
    return inputs, own, LINEAR.exact(inputs, FLOAT32)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), scale=st.floats(0.0, 12.0), spread=st.floats(0.0, 1.0))
def test_a_registry_units_verdict_in_stages_is_the_64_runs_verdict(seed, scale, spread):
    """A model unit that is a registry op (a linear layer) takes its op's runs in stages too: the
    same verdict as the 64 runs that asv's tracks and explain use, and where it stopped early, the
    64 runs' ratio at most sqrt(64/k) times its own."""
    inputs, own, exact = _linear_case(seed)
    rng = np.random.default_rng(seed + 1)
    bump = (own.astype(np.float64) - exact.hi) * scale * (rng.random(own.shape) < spread)
    output = (own.astype(np.float64) + bump).astype(np.float32)
    staged = Evidence(LINEAR, inputs, FLOAT32, judged=[output]).judge(output)
    full = Evidence(LINEAR, inputs, FLOAT32).judge(output)
    assert staged.verdict == full.verdict
    if staged.typical_ratio != full.typical_ratio and not np.isnan(full.typical_ratio):  # NaN: judged by the bound
        assert staged.verdict.value == "within rounding"
        assert full.typical_ratio <= staged.typical_ratio * np.sqrt(64 / 8) * (1 + 1e-12)


def test_a_correct_linear_unit_takes_8_runs_and_a_wrong_one_all_64(cache_path, monkeypatch):
    calls = []
    monkeypatch.setattr(typical, "emulate", lambda *a, **k: calls.append(k.get("rng")) or emulate(*a, **k))
    inputs, own, exact = _linear_case(7)
    assert Evidence(LINEAR, inputs, FLOAT32, judged=[own]).judge(own).verdict.value == "within rounding"
    assert len([rng for rng in calls if rng is not None]) == 8
    calls.clear()
    wrong = (own + (own.astype(np.float64) - exact.hi) * 8).astype(np.float32)  # 8x a correct error
    verdict = Evidence(LINEAR, inputs, FLOAT32, judged=[own, wrong]).judge(wrong)
    assert verdict.verdict.value != "within rounding"
    assert len([rng for rng in calls if rng is not None]) == 64  # 8 runs' stage read, then runs 0 to 63 taken
