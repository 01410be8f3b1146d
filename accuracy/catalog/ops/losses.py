"""Losses: cross_entropy (mean over rows, class-index targets) and mse_loss.

References from 200-bit mpmath; bounds from the log_softmax and sum bounds.
"""

from __future__ import annotations

import mpmath
import numpy as np
import scipy

from accuracy.catalog.ops.common import IN_STORAGE
from accuracy.catalog.registry import Impl, OpInfo
from accuracy.core.dtypes import ALL_DTYPES, IEEE_DTYPES
from accuracy.judge.error_metrics import gamma
from accuracy.reference.exact import Exact, mp_rows
from accuracy.reference.inputs import normal
from accuracy.reference.oracles import mp, mp_list

CE_BATCH = 64


def _ce_inputs(rng, n):
    # class indices travel as floats: exact in every format for n <= 256
    return {"x": normal(rng, (CE_BATCH, n)) * 2.0, "target": rng.integers(0, n, CE_BATCH).astype(np.float64)}


def _ce_exact(inputs, fmt):
    x, t = inputs["x"], inputs["target"].astype(int)
    with mpmath.workprec(200):
        total = mpmath.fsum(
            mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(float(v))) for v in row)) - mpmath.mpf(float(row[ti]))
            for row, ti in zip(x, t, strict=False)
        )
        return Exact.from_mpf([total / len(t)], ())


def _ce_bound(inputs, exact, fmt):
    """Each row's -log_softmax errs by gamma_{n+3}(|l| + spread + 1); their mean adds gamma_B."""
    x, t = inputs["x"], inputs["target"].astype(int)
    n, batch = x.shape[-1], x.shape[0]
    lse = scipy.special.logsumexp(x, axis=-1)
    loss = lse - x[np.arange(batch), t]
    spread = x.max(axis=-1) - x.min(axis=-1)
    per_row = gamma(n + 3, fmt.u) * (np.abs(loss) + spread + 1.0)
    return per_row.mean() + gamma(batch, fmt.u) * np.abs(loss).mean()


def _np_ce(ns, x, target):
    shifted = x - x.max(axis=-1, keepdims=True)
    logp = shifted - ns.log(ns.exp(shifted).sum(axis=-1, keepdims=True))
    return -logp[ns.arange(x.shape[0]), target.astype(int)].mean()


def _ce_oracle(inputs):
    """-mean log(p_t) with p the unshifted softmax probability of the target class."""
    x, t = inputs["x"], inputs["target"].astype(int)
    logps = [
        mpmath.log(mpmath.exp(mp(row[ti])) / mpmath.fsum(mpmath.exp(v) for v in mp_list(row)))
        for row, ti in zip(x, t, strict=False)
    ]
    return [-mpmath.fsum(logps) / len(t)]


CROSS_ENTROPY = OpInfo(
    name="cross_entropy",
    doc=f"mean cross-entropy of {CE_BATCH} rows of N(0, 2**2) logits over n classes (class-index targets)",
    generate=_ce_inputs,
    exact=_ce_exact,
    fp64=lambda x, target: _np_ce(np, x, target),
    bound=_ce_bound,
    bound_doc="mean over rows of gamma_{n+3}(|loss| + max x - min x + 1) + gamma_B * mean|loss|",
    impls=(
        Impl(
            "torch",
            "F.cross_entropy",
            lambda ns, x, target: ns.nn.functional.cross_entropy(x, target.long()),
            ALL_DTYPES,
        ),
        Impl(
            "torch",
            "F.nll_loss(F.log_softmax)",
            lambda ns, x, target: ns.nn.functional.nll_loss(ns.nn.functional.log_softmax(x, -1), target.long()),
            ALL_DTYPES,
            compute=IN_STORAGE,
        ),
        Impl("numpy", "-mean(log_softmax[t])", _np_ce, IEEE_DTYPES),
    ),
    default_size=256,
    bench_sizes=(128, 256),
    oracle=_ce_oracle,
    test_size=8,
    flops=lambda n: 4.0 * CE_BATCH * n,
)


def _mse_exact(inputs, fmt):
    return mp_rows(
        lambda xs, ys: [mpmath.fsum((a - b) ** 2 for a, b in zip(xs, ys, strict=False)) / len(xs)],
        inputs["x"],
        inputs["y"],
    )


def _mse_by_moments(inputs):
    """(sum x^2 - 2 sum x y + sum y^2) / n: expanded, unlike the reference's sum of squared differences."""
    x, y = mp_list(inputs["x"]), mp_list(inputs["y"])
    sq = [mpmath.fsum(a * b for a, b in zip(u, v, strict=False)) for u, v in ((x, x), (x, y), (y, y))]
    return [(sq[0] - 2 * sq[1] + sq[2]) / len(x)]


MSE_LOSS = OpInfo(
    name="mse_loss",
    doc="mean((x - y)**2) of N(0,1) vectors",
    generate=lambda rng, n: {"x": normal(rng, n), "y": normal(rng, n)},
    exact=_mse_exact,
    fp64=lambda x, y: np.mean((x - y) ** 2),
    bound=lambda inputs, exact, fmt: gamma(inputs["x"].size + 3, fmt.u) * np.abs(exact.hi),
    bound_doc="gamma_{n+3} * mse: each (x-y)**2 is 2 roundings of non-negative terms, the sum n-1, the division 1",
    impls=(
        Impl("torch", "F.mse_loss", lambda ns, x, y: ns.nn.functional.mse_loss(x, y), ALL_DTYPES),
        Impl("numpy", "mean((x - y)**2)", lambda ns, x, y: ns.mean((x - y) ** 2), IEEE_DTYPES),
    ),
    default_size=1024,
    bench_sizes=(1 << 16, 1 << 20),
    oracle=_mse_by_moments,
    test_size=64,  # float16's gamma_n is vacuous beyond n = 2048
    flops=lambda n: 3.0 * n,
)


OPS = [CROSS_ENTROPY, MSE_LOSS]
