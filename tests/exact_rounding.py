"""Correct rounding of a rational to a float format: the specification the metrics and references are checked
against."""

import math
from fractions import Fraction


def exact_round(fmt, q: Fraction) -> float:
    """Round the rational `q` to `fmt`, nearest-even, with subnormals and overflow (a spec)."""
    if q == 0:
        return 0.0
    sign = -1 if q < 0 else 1
    a = abs(q)
    e = max(math.floor(math.log2(a)), fmt.emin)
    # correct the float log2 estimate
    while Fraction(2) ** e > a and e > fmt.emin:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    quantum = Fraction(2) ** (e - fmt.precision + 1)
    n, rem = divmod(a, quantum)
    if rem * 2 > quantum or (rem * 2 == quantum and n % 2 == 1):
        n += 1
    v = n * quantum
    overflow_threshold = Fraction(fmt.max_finite) + Fraction(2) ** (fmt.emax - fmt.precision)
    if v > fmt.max_finite or a >= overflow_threshold:
        return sign * math.inf
    return sign * float(v)
