"""The one change detector: is the difference between two measurements of a series real?

Deterministic metrics (errors against an exact reference) change when their values differ.
Timings are noisy and are decided by asv's own test (`asv compare`'s `is_different`: a
Mann-Whitney U test on the raw samples where there are enough of them, else the 99% confidence
intervals must separate) AND the ratio threshold. Both the report's steps and `opbench compare`
decide with `timing_change` and `DEFAULT_THRESHOLD`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_THRESHOLD = 1.10  # the smallest ratio of two timings that counts as a change
DEFAULT_MAX_PLOTS = 12  # history figures in the report: the largest steps get one each
MIN_SAMPLES = 2  # with one sample asv computes no statistics at all

SLOWER, FASTER, SAME, INCONCLUSIVE = "slower", "faster", "same", "inconclusive"


@dataclass(frozen=True)
class Timing:
    """One timing as asv stores it: the median, its 99% interval, the sample count, the samples
    (asv keeps them only with --record-samples)."""

    value: float
    ci: tuple[float, float] | None = None
    repeat: int | None = None
    samples: tuple[float, ...] | None = None

    @classmethod
    def of(cls, value, ci_99_a=None, ci_99_b=None, repeat=None, samples=None) -> Timing:
        """From asv's stored statistics, where a missing one may be None or NaN."""

        def number(v):
            return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)

        repeat = number(repeat)
        return cls(
            float(value),
            (number(ci_99_a), number(ci_99_b)),
            None if repeat is None else int(repeat),
            tuple(samples) if isinstance(samples, (tuple, list)) else None,
        )

    @property
    def usable(self) -> bool:
        """Enough samples for a test: two or more, a positive median and a finite interval (asv's
        interval for few noisy samples may reach below zero; its test handles that)."""
        if self.ci is None or not (self.repeat or 0) >= MIN_SAMPLES or not self.value > 0:
            return False
        return all(v is not None and math.isfinite(v) for v in self.ci)

    def scaled(self, factor: float) -> Timing:
        """The same timing as if the machine ran `factor` times slower: `opbench compare` judges
        NEW against BASE scaled by its controls' drift."""
        if factor == 1.0:
            return self

        def times(values):
            return None if values is None else tuple(None if v is None else v * factor for v in values)

        return Timing(self.value * factor, times(self.ci), self.repeat, times(self.samples))

    def stats(self) -> dict:
        assert self.ci is not None, "stats() of a timing without an interval"
        return {"ci_99_a": self.ci[0], "ci_99_b": self.ci[1]}


def ratio_interval(old: Timing, new: Timing) -> tuple[float, float] | None:
    """The new/old time ratios both 99% intervals allow (None where either has no usable interval)."""
    if not (old.usable and new.usable) or old.ci is None or new.ci is None or old.ci[0] <= 0:
        return None
    return max(new.ci[0], 0.0) / old.ci[1], new.ci[1] / old.ci[0]


def beyond(ratio, threshold: float = DEFAULT_THRESHOLD):
    """The ratio is at least `threshold` away from 1, either way."""
    return (ratio >= threshold) | (ratio <= 1 / threshold)


def timing_change(old: Timing, new: Timing, threshold: float = DEFAULT_THRESHOLD) -> str:
    """SLOWER, FASTER, SAME or INCONCLUSIVE for one pair of timings (lower is better).

    A change needs asv's test to find the two different AND the median ratio to pass the
    threshold. A ratio past the threshold that asv's test does not confirm, and a timing with
    fewer than two samples, are INCONCLUSIVE: no evidence either way, never "slower". A ratio
    inside the threshold is SAME, as in `asv compare`.
    """
    if not (old.usable and new.usable):
        return INCONCLUSIVE
    ratio = new.value / old.value
    if not beyond(ratio, threshold):
        return SAME
    # asv's statistics, the test `asv compare` applies (no public API exposes it); imported here,
    # since importing asv loads its plugins, which `opbench --help` must not wait for
    from asv import _stats

    if not _stats.is_different(old.samples, new.samples, old.stats(), new.stats()):
        return INCONCLUSIVE
    return SLOWER if ratio > 1 else FASTER
