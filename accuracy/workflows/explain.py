"""`opbench explain`: every implementation of one op on the same inputs, and what the gaps mean.

Three answers to "bug or rounding?": each implementation's verdict (accuracy.judge.verdicts) with
its reason and the element that decided it, each pair's class following both sides' verdicts,
and whether results are bitwise reproducible run to run and between one thread and all cores
(both judged).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from accuracy.backends import get_backend
from accuracy.core.threads import all_cores
from accuracy.judge.error_metrics import ulps_apart
from accuracy.judge.verdicts import WITHIN, Evidence, Judgement, pair_verdict
from accuracy.reference.inputs import DEFAULT_CONDITION
from accuracy.workflows.evaluation import Case, make_case


def _bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def _measure_all(case: Case, evidence: Evidence, threads: int):
    rows, outputs, judgements = [], {}, {}
    for impl in case.op.available_impls(case.fmt.name):
        row = {"impl": impl.name, "note": impl.note}
        try:
            outputs[impl.name] = case.run(impl, threads)
            summary = case.measure(impl, outputs[impl.name])
            judgements[impl.name] = evidence.judge(outputs[impl.name], impl)
            row.update(summary.as_dict())
            row.update(judgements[impl.name].as_dict())  # its bound ratio is the precision model's
        except Exception as exc:  # a crashing implementation is a finding, not a crash of explain
            row.update(verdict="error", label="error", error=f"{type(exc).__name__}: {exc}".splitlines()[0])
            outputs.pop(impl.name, None)
        rows.append(row)
    return rows, outputs, judgements


def pairwise(outputs: dict[str, np.ndarray], judgements: dict[str, Judgement]) -> list[dict]:
    """Each pair of outputs: how far apart, and its class (identical, or the worse side's verdict)."""
    pairs = []
    for a, b in combinations(outputs, 2):
        apart = ulps_apart(outputs[a], outputs[b])
        finite = apart[np.isfinite(apart)]
        identical = _bitwise_equal(outputs[a], outputs[b])
        pairs.append(
            {
                "a": a,
                "b": b,
                "max_ulp_apart": float(finite.max()) if finite.size else 0.0,
                "nonfinite_apart": int(np.count_nonzero(~np.isfinite(apart))),
                "differing_elements": int(np.count_nonzero(apart)),
                "class": "identical" if identical else pair_verdict(judgements[a], judgements[b]),
                "failing": [] if identical else [s for s in (a, b) if judgements[s].verdict != WITHIN],
            }
        )
    return pairs


def _reproducibility(case: Case, evidence: Evidence, outputs: dict[str, np.ndarray], threads: int) -> list[dict]:
    """Run to run at the main thread count; then 1 thread against all cores, whatever the main
    run used, each judged: a thread count whose result is not within rounding is named."""
    cores = all_cores()
    out = []
    for impl in case.op.available_impls(case.fmt.name):
        if impl.name not in outputs:
            continue
        again = case.run(impl, threads)
        single = outputs[impl.name] if threads == 1 else case.run(impl, 1)
        full = outputs[impl.name] if threads == cores else case.run(impl, cores)
        out.append(
            {
                "impl": impl.name,
                "run_to_run": _bitwise_equal(outputs[impl.name], again),
                "one_vs_all_threads": _bitwise_equal(single, full),
                "verdict_1_thread": evidence.judge(single, impl).label,
                f"verdict_{cores}_threads": evidence.judge(full, impl).label,
                "threads_note": get_backend(impl.backend).threads_note,
            }
        )
    return out


def explain(
    op_name: str,
    dtype: str = "float32",
    size: int | None = None,
    threads: int | None = None,
    condition: str = DEFAULT_CONDITION,
) -> dict:
    case = make_case(op_name, dtype, size, condition)
    threads = threads or all_cores()
    evidence = Evidence(case.op, case.inputs, case.fmt, case.exact)
    rows, outputs, judgements = _measure_all(case, evidence, threads)
    return {
        "op": case.op.name,
        "doc": case.op.doc,
        "dtype": case.fmt.name,
        "size": case.size,
        "condition": case.condition,
        "threads": threads,
        "all_cores": all_cores(),
        "bound": case.op.bound_doc,
        "implementations": rows,
        "pairs": pairwise(outputs, judgements),
        "reproducibility": _reproducibility(case, evidence, outputs, threads),
    }
