"""Measure the typical-error candidates of issue #10 against each other, on the selftest's cases.

    PYTHONPATH=. python scripts/typical_study.py [--dtype float32] [OP ...]

For each accumulating op (n known from its contraction length) and each candidate threshold:
- probabilistic: lambda sqrt(n) u D, D the data factor of the op's gamma_n bound (bound / gamma_n),
  lambda for a failure probability of 1e-6 (Higham & Mary 2019: P <= 2n exp(-lambda^2 (1-u)^2 / 2));
- fp64 rule: RMSE(result - fp64) <= m * RMSE(eager - fp64), m = 2 (float32) or 3 (float16/bfloat16),
  eager = the op's formula evaluated by numpy in the stored format (torch/_dynamo/utils.py `same`);
- data-specific (shipped): the typical tier of accuracy.judge.typical.
it prints the alarms on correct implementations and the share of must-catch mutants
(error >= 16x the least accurate correct algorithm) each catches. Results are in docs/verdicts.md.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from accuracy.catalog.registry import get_op
from accuracy.core.dtypes import get_format
from accuracy.judge.error_metrics import gamma
from accuracy.judge.verdicts import Evidence, rounding_error
from accuracy.workflows.evaluation import Case
from accuracy.workflows.selftest import ALARMS, MUST_CATCH, _correct, mutants, selftest_case

STUDY_OPS = ("sum", "mean", "dot", "gemv", "matmul", "linear", "bmm")


def _rmse(values, reference) -> float:
    d = np.asarray(values, dtype=np.float64) - reference
    return float(np.sqrt(np.mean(np.square(d))))


def _lambda(n: int, failure: float = 1e-6) -> float:
    return math.sqrt(2 * math.log(2 * n / failure))


def study(op_name: str, dtype: str, condition: str = "random") -> dict:
    op, fmt = get_op(op_name), get_format(dtype)
    report = selftest_case(op, dtype, condition=condition)
    case = Case(op, fmt, op.default_size, condition)
    ev = Evidence(op, case.inputs, fmt, case.exact)
    n = next(iter(case.inputs.values())).shape[-1]
    bound = op.bound(ev.inputs64, ev.exact, fmt)
    probabilistic = bound / gamma(n, fmt.u) * _lambda(n) * math.sqrt(n) * fmt.u
    fp64 = np.asarray(op.fp64(**ev.inputs64), dtype=np.float64)
    with np.errstate(all="ignore"):
        eager = np.asarray(
            op.fp64(
                **{
                    k: v.astype(fmt.np_dtype) if fmt.precision >= 11 and dtype != "bfloat16" else v.astype(np.float32)
                    for k, v in ev.inputs64.items()
                }
            )
        )
    eager_error = _rmse(fmt.round(eager.astype(np.float64)), fp64)
    multiplier = 2.0 if dtype in ("float32", "float64") else 3.0
    correct = _correct(op, dtype, False)
    base = correct[0]
    outputs = [case.run(impl) for impl in correct]
    muts = list(mutants(case, base, outputs[0], ev))
    in_scope = [
        m
        for m in muts
        if float(np.max(rounding_error(m.output, ev.exact, fmt) / ev.ulp)) >= MUST_CATCH * report.least_ulp
    ]

    def flags(candidate, output) -> bool:
        err = rounding_error(output, ev.exact, fmt)
        if candidate == "probabilistic":
            return bool(np.any(err > probabilistic))
        if candidate == "fp64 rule":
            return _rmse(output, fp64) > multiplier * eager_error
        return ev.judge(output, base).verdict in ALARMS

    row = {"op": op_name, "dtype": dtype, "n": n, "lambda": _lambda(n), "must_catch": len(in_scope)}
    middle = float(np.median(np.abs(ev.exact.hi)))
    model = ev.typical(fmt)
    row["flags"] = {  # the error (ulps) each candidate flags at the median element
        "probabilistic": float(np.median(probabilistic / ev.ulp)),
        "fp64 rule": multiplier * eager_error / float(np.spacing(np.asarray(middle, dtype=fmt.np_dtype)))
        if dtype != "bfloat16"
        else float("nan"),
        "data-specific": model.threshold_ulps(ev.exact, fmt)[0] if model is not None else float("nan"),
    }
    for candidate in ("probabilistic", "fp64 rule", "data-specific"):
        row[candidate] = (sum(flags(candidate, o) for o in outputs), sum(flags(candidate, m.output) for m in in_scope))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ops", nargs="*", default=list(STUDY_OPS))
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    print(
        "| op | dtype | n | must catch | probabilistic: flags >= (ulp), false alarms, caught | fp64 rule (RMSE) | "
        "data-specific |"
    )
    print("|---|---|---|---|---|---|---|")
    totals = {c: [0, 0] for c in ("probabilistic", "fp64 rule", "data-specific")}
    scope = 0
    for name in args.ops:
        r = study(name, args.dtype)
        scope += r["must_catch"]
        for c in totals:
            totals[c][0] += r[c][0]
            totals[c][1] += r[c][1]
        cells = " | ".join(f"{r['flags'][c]:.3g}, {r[c][0]}, {r[c][1]}/{r['must_catch']}" for c in totals)
        print(f"| {r['op']} | {r['dtype']} | {r['n']} | {r['must_catch']} | {cells} |")
    cells = " | ".join(f"-, {totals[c][0]}, {totals[c][1]}/{scope}" for c in totals)
    print(f"| all | {args.dtype} | | {scope} | {cells} |")


if __name__ == "__main__":
    main()
