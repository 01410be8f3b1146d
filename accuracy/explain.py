"""`opbench explain`: every implementation of one op on the same inputs, and what the gaps mean.

Three answers to "bug or rounding?": each implementation's error against its provable bound,
each pair's discrepancy classed by whether both parties are within their bounds, and whether
results are bitwise reproducible across runs and across thread counts.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from accuracy.evaluate import Case, make_case
from accuracy.registry import DEFAULT_CONDITION
from accuracy.metrics import ulp_error
from accuracy.threads import all_cores


def _bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def _measure_all(case: Case, threads: int) -> tuple[list[dict], dict[str, np.ndarray]]:
    rows, outputs = [], {}
    for impl in case.op.available_impls(case.fmt.name):
        row = {"impl": impl.name, "note": impl.note}
        try:
            outputs[impl.name] = case.run(impl, threads)
            summary = case.measure(impl, outputs[impl.name])
            row.update(summary.as_dict(), verdict=summary.verdict)
        except Exception as exc:  # a crashing implementation is a finding, not a crash of explain
            row.update(verdict="error", error=f"{type(exc).__name__}: {exc}".splitlines()[0])
        rows.append(row)
    return rows, outputs


def _pairs(rows: list[dict], outputs: dict[str, np.ndarray]) -> list[dict]:
    verdicts = {r["impl"]: r["verdict"] for r in rows}
    pairs = []
    for a, b in combinations(outputs, 2):
        apart = ulp_error(outputs[a], outputs[b].astype(np.float64))
        finite = apart[np.isfinite(apart)]
        if _bitwise_equal(outputs[a], outputs[b]):
            cls = "identical"
        elif verdicts[a] == verdicts[b] == "within rounding":
            cls = "within rounding"
        else:
            cls = "beyond rounding"
        pairs.append({
            "a": a, "b": b,
            "max_ulp_apart": float(finite.max()) if finite.size else 0.0,
            "differing_elements": int(np.count_nonzero(outputs[a].astype(np.float64) != outputs[b].astype(np.float64))),
            "class": cls,
        })
    return pairs


def _reproducibility(case: Case, outputs: dict[str, np.ndarray], threads: int) -> list[dict]:
    out = []
    for impl in case.op.available_impls(case.fmt.name):
        if impl.name not in outputs:
            continue
        again = case.run(impl, threads)
        single = case.run(impl, 1)
        out.append({
            "impl": impl.name,
            "run_to_run": _bitwise_equal(outputs[impl.name], again),
            "one_vs_all_threads": _bitwise_equal(single, outputs[impl.name]),
        })
    return out


def explain(op_name: str, dtype: str = "float32", size: int | None = None, threads: int | None = None,
            condition: str = DEFAULT_CONDITION) -> dict:
    case = make_case(op_name, dtype, size, condition)
    threads = threads or all_cores()
    rows, outputs = _measure_all(case, threads)
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
        "pairs": _pairs(rows, outputs),
        "reproducibility": _reproducibility(case, outputs, threads),
    }
