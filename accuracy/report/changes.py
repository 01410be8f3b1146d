"""The one change detector: is the difference between two measurements of a series real?

Deterministic metrics (errors against an exact reference) change when their values differ.
Noisy ones (timings) change only when asv's 99% confidence intervals separate AND the ratio
passes the threshold; without intervals there is no evidence either way. Both the report's
steps and `opbench compare` decide with these functions and this threshold.
"""

from __future__ import annotations

import numpy as np

DEFAULT_THRESHOLD = 1.10  # the smallest ratio of two timings that counts as a change


def beyond(ratio, threshold: float = DEFAULT_THRESHOLD):
    """The ratio is at least `threshold` away from 1, either way."""
    return (ratio >= threshold) | (ratio <= 1 / threshold)


def separated(old_a, old_b, new_a, new_b):
    """Two confidence intervals [a, b] do not overlap."""
    return (new_a > old_b) | (new_b < old_a)


def timing_change(old, new, old_ci, new_ci, threshold: float = DEFAULT_THRESHOLD) -> str:
    """"slower", "faster", "same" or "inconclusive" for one pair of timings (lower is better).

    `old_ci`/`new_ci` are (low, high) 99% intervals. A change needs the intervals to separate
    and the ratio to pass the threshold. "same" needs intervals narrow enough to have seen a
    change of that size; a single sample (no finite interval) or an interval wider than the
    threshold is no evidence either way.
    """
    bounds = [*old_ci, *new_ci] if old_ci is not None and new_ci is not None else [None]
    if any(v is None or not np.isfinite(v) or v <= 0 for v in bounds):
        return "inconclusive"
    ratio = new / old
    if separated(*old_ci, *new_ci) and beyond(ratio, threshold):
        return "slower" if ratio > 1 else "faster"
    too_wide = max(old_ci[1] / old_ci[0], new_ci[1] / new_ci[0]) > threshold
    return "inconclusive" if too_wide else "same"
