"""Known hard float64 inputs of elementwise functions, for `opbench scan --dtype float64 --sample N`.

A random sample almost never meets the inputs where libraries go wrong, so a float64 sample
starts with them:

- hard to round: inputs whose exact f(x) lies within 2**-40 ulp of a float64 rounding midpoint,
  picked from the worst-case lists of the CORE-MATH project (src/binary64/<f>/<f>.wc, from
  Lefèvre's and Zimmermann's exhaustive searches), spread over the magnitudes; a test checks each
  against mpmath;
- edges: the float64 neighbours of a function's thresholds (exp's overflow, subnormal and
  underflow-to-zero points, the x where tanh rounds to 1, log around 1), computed here in mpmath;
- sin: the doubles nearest to multiples of pi/2, where argument reduction cancels, up to
  6381956970095103 * 2**797, the double closest to one (within 2**-60.9).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np

NEIGHBOURS = 3  # float64 steps either side of each threshold

HARD_TO_ROUND = {
    "exp": (
        "-0x1.ffffffffffe06p-55",
        "-0x1.780000000000ap-49",
        "-0x1.81a0000000245p-43",
        "-0x1.475d8000068a8p-37",
        "-0x1.a5907e02b6349p-31",
        "0x1.ccae9e60beffbp-25",
        "0x1.96341f0ea7844p-19",
        "-0x1.ad7dbf90c4b25p-13",
        "0x1.8ecc8e9f799afp-7",
        "0x1.6f62306ce4423p-2",
        "-0x1.dbe8fad998ce2p+3",
        "0x1.554e75ba4d44bp+9",
    ),
    "log": (
        "0x1.e2af89e8730c5p-1021",
        "0x1.4fd559a5314d0p-855",
        "0x1.0e7502c560aedp-665",
        "0x1.0c1a5fb2a3a0fp-465",
        "0x1.62d7e666bd3bbp-283",
        "0x1.83a8ca7077fdcp-122",
        "0x1.be09c6acf8d44p+58",
        "0x1.3f351fc43612cp+253",
        "0x1.365ea40c58fe6p+452",
        "0x1.2402926170284p+641",
        "0x1.ffc94d2e4a6d9p+833",
        "0x1.c27f5de361788p+1023",
    ),
    "sin": (
        "0x1.7137449123f1dp-26",
        "0x1.2ea64bf5eb0c4p-22",
        "0x1.c47e6f5cc273cp-19",
        "0x1.0ebb00905e61fp-15",
        "0x1.6d8fdfc2ac9c8p-12",
        "0x1.b1feea0f64537p-9",
        "0x1.f9921c329dbbep-6",
        "0x1.299bf9c5c6b7ep-2",
        "0x1.ab50df063af5fp+1",
        "0x1.20f0bcf84216bp+5",
        "0x1.56899b11e3eaep+8",
        "0x1.f5961912b5ca1p+1023",
    ),
    "tanh": (
        "0x1.d12ed0af1a291p-27",
        "0x1.daadd3a1416bep-25",
        "0x1.ab2f0ea7ad2a9p-22",
        "0x1.c74661fca1267p-19",
        "0x1.af31618b0a087p-16",
        "0x1.78af8d6e40acep-13",
        "0x1.226ee752a7470p-10",
        "0x1.0c6ff1bafa227p-7",
        "0x1.421fcca3fe560p-4",
        "0x1.ef6b11c6f067cp-2",
        "0x1.ae35aab7435abp+1",
        "0x1.30fc1931f09cbp+4",
    ),
}


def _thresholds(name: str) -> list[mpmath.mpf]:
    """The exact points (mpmath values) where the function's float64 result changes regime."""
    two = mpmath.mpf(2)
    if name == "exp":  # overflow (largest finite + half an ulp), first subnormal, rounding to 0
        return [mpmath.log((2 - two**-53) * two**1023), mpmath.log(two**-1022), mpmath.log(two**-1075)]
    if name == "tanh":  # tanh(x) rounds to 1 from here on
        return [mpmath.atanh(1 - two**-54)]
    if name == "log":  # log(x) ~ x - 1 cancels around 1
        return [mpmath.mpf(1)]
    return []


def _pi_half_multiples() -> list[float]:
    """Doubles nearest to k*pi/2 for small and large k, and the closest double to any multiple."""
    ks = [*range(1, 17), 2**20 + 1, 2**30 + 3, 2**52 + 1, 2**100 + 1]
    with mpmath.workprec(4000):  # k*pi/2 to well below an ulp for k up to 2**100
        near = [float(k * mpmath.pi / 2) for k in ks]
    return [*near, math.ldexp(6381956970095103, 797)]


def hard_inputs(name: str) -> np.ndarray:
    """The known hard float64 inputs of function `name` (none for a function not listed)."""
    values = [float.fromhex(h) for h in HARD_TO_ROUND.get(name, ())]
    with mpmath.workprec(200):
        for point in _thresholds(name):
            centre = np.float64(float(point))
            for step in range(-NEIGHBOURS, NEIGHBOURS + 1):
                v = centre
                for _ in range(abs(step)):
                    v = np.nextafter(v, np.inf if step > 0 else -np.inf)
                values.append(float(v))
    if name in ("sin", "cos"):
        values += _pi_half_multiples()
    return np.array(values, dtype=np.float64)
