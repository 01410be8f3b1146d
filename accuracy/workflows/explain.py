"""`opbench explain`: every implementation of one op on the same inputs, and what the gaps mean.

Three answers to "bug or rounding?": each implementation's verdict (accuracy.judge.verdicts) with
its reason and the element that decided it, each pair's class following both sides' verdicts,
and whether results are bitwise reproducible run to run and between one thread and all cores
(both judged).
"""

from __future__ import annotations

from contextlib import ExitStack
from itertools import combinations

import numpy as np

from accuracy.backends import get_backend
from accuracy.backends.startup_threads import StartupThreadsBackend
from accuracy.core.dtypes import FloatFormat, ulp
from accuracy.core.errors import first_line
from accuracy.core.formatting import format_number, format_table
from accuracy.core.threads import all_cores
from accuracy.judge.error_metrics import ErrorSummary, relative_error, ulps_apart
from accuracy.judge.verdicts import ERROR, WITHIN, Evidence, Judgement, pair_verdict
from accuracy.reference.exact import Exact
from accuracy.reference.inputs import DEFAULT_CONDITION
from accuracy.workflows.evaluation import Case, make_case


def _bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def _measure_all(case: Case, evidence: Evidence, threads: int):
    from accuracy.workflows.model.op_causes import with_cause  # the catalogue imports check, which imports this

    rows, outputs, judgements = [], {}, {}
    for impl in case.op.available_impls(case.fmt.name):
        row = {"impl": impl.name, "note": impl.note}
        try:
            outputs[impl.name] = case.run(impl, threads)
            summary = case.measure(impl, outputs[impl.name])
            judgements[impl.name] = evidence.judge(outputs[impl.name], impl)
            row.update(summary.as_dict())
            row.update(judgements[impl.name].as_dict())  # its bound ratio is the precision model's
            row["relative_note"] = relative_gap_note(outputs[impl.name], case.exact, case.fmt, summary)
            with_cause(row, case.op.name, case.inputs, case.fmt, outputs[impl.name])
        except Exception as exc:  # a crashing implementation is a finding, not a crash of explain
            row.update(verdict=ERROR, label=ERROR, error=first_line(exc, typed=True))
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


IDENTICAL = "identical"
PAIR_HEADER = ["a", "b", "max ulp apart", "elements differing", "class", "failing side"]


def pairs_that_matter(pairs: list[dict]) -> list[dict]:
    """The pairs whose difference is not explained by both sides being within rounding."""
    return [p for p in pairs if p["class"] not in (IDENTICAL, WITHIN)]


def pairs_table(pairs: list[dict]) -> list[str]:
    """The pairwise table `explain` and `check` print."""
    rows = [
        [
            p["a"],
            p["b"],
            format_number(p["max_ulp_apart"]),
            str(p["differing_elements"]),
            p["class"],
            ", ".join(p["failing"]) or "-",
        ]
        for p in pairs
    ]
    return format_table(PAIR_HEADER, rows)


def pairs_summary(pairs: list[dict]) -> str:
    """How many pairs are identical, differ by rounding alone, or differ otherwise, in one line."""
    identical = sum(p["class"] == IDENTICAL for p in pairs)
    rounding = sum(p["class"] == WITHIN for p in pairs)
    other = len(pairs) - identical - rounding
    return (
        f"{len(pairs)} pairs: {identical} bitwise identical, {rounding} differ by rounding alone (both sides "
        f"within rounding), {other} differ with a side that is not within rounding"
    )


def pairs_section(pairs: list[dict], verbose: bool = True) -> list[str]:
    """The pairwise section of `explain` and `check`: the counts, then the pairs that matter (every
    pair when `verbose`)."""
    if not pairs:
        return []
    lines = ["", f"pairwise discrepancy (ulps at the larger magnitude): {pairs_summary(pairs)}"]
    shown = pairs if verbose else pairs_that_matter(pairs)
    if shown:
        lines += pairs_table(shown)
    if len(shown) < len(pairs):
        lines.append("  (-v lists every pair)")
    return lines


def relative_gap_note(output: np.ndarray, exact: Exact, fmt: FloatFormat, summary: ErrorSummary) -> str:
    """Why max rel can be large beside a small max ulp, where it is: at a normal number one ulp is
    at most 2u of the value, so max rel > 2u * max ulp happens only at outputs below the smallest
    normal number, where one ulp is a large fraction of a tiny value. Empty elsewhere."""
    if not summary.max_rel_exact > 2 * fmt.u * summary.max_ulp:
        return ""
    rel = relative_error(output, exact)
    rel = np.where(np.isfinite(rel), rel, -1.0)
    at = np.unravel_index(int(np.argmax(rel)), rel.shape) if rel.ndim else ()
    value = abs(float(exact.hi[at]))
    if value >= 2.0**fmt.emin:  # rounding in the two ratios, not a tiny output
        return ""
    step = float(ulp(np.float64(value), fmt))
    return (
        f"max rel {format_number(summary.max_rel_exact)} is at an output of {value:.3g}, below {fmt.name}'s "
        f"smallest normal {2.0**fmt.emin:.3g}: one ulp there is {step / value:.3g} of the value, so a small "
        "error in ulps is a large relative one"
    )


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
    load_in_background: bool = False,
) -> dict:
    """With `load_in_background`, TensorFlow and JAX load on other cores while the references and
    the other frameworks run here (their imports took 5 of `opbench explain linear`'s 14 s), and
    their calls run in worker processes (nothing is timed): for a process that explains once, as
    the command does. A process that goes on to use them itself would import them twice."""
    case = make_case(op_name, dtype, size, condition)
    threads = threads or all_cores()
    with ExitStack() as background:
        if load_in_background:
            for name in dict.fromkeys(impl.backend for impl in case.op.available_impls(case.fmt.name)):
                backend = get_backend(name)
                if isinstance(backend, StartupThreadsBackend):
                    background.enter_context(backend.in_background())
        evidence = Evidence(case.op, case.inputs, case.fmt, case.exact)
        rows, outputs, judgements = _measure_all(case, evidence, threads)
        reproducibility = _reproducibility(case, evidence, outputs, threads)
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
        "reproducibility": reproducibility,
    }
