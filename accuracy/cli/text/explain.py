"""`opbench explain`'s text: the verdicts first, then why, the pairs and reproducibility."""

from __future__ import annotations

from accuracy.core.formatting import format_number, format_table
from accuracy.judge.metric_table import cli_columns
from accuracy.workflows.model.answer import explanation


def _why(r: dict) -> list[str]:
    """The reason, and the element that decided it: the largest error over its limit (not always
    the largest error in ulps, where the limit varies by element)."""
    lines = [f"  {r['impl']}: {r['label']}: {explanation(r.get('cause'), r['reason'])}"]
    w = r.get("worst") or {}
    if w:
        at = ", ".join(f"{k}={v:.9g}" for k, v in w.get("inputs", {}).items())
        where = f"[{', '.join(map(str, w['index']))}]" if w["index"] else "(the single output)"
        lines.append(
            f"      element nearest its limit {where}{' (' + at + ')' if at else ''}: "
            f"result {w['result']:.9g}, exact {w['exact']:.9g}, error {format_number(w['error_ulp'])} ulp, "
            f"allowed there {format_number(w['allowed_ulp'])} ulp"
        )
    return lines


def _grouped(notes: dict[str, str]) -> list[str]:
    """One line per distinct note, naming every implementation it applies to."""
    by_note: dict[str, list[str]] = {}
    for impl, note in notes.items():
        if note:
            by_note.setdefault(note, []).append(impl)
    return [f"  {', '.join(impls)}: {note}" for note, impls in by_note.items()]


def _header(report: dict) -> list[str]:
    from accuracy.judge.verdicts import ERROR  # the judge loads numpy: only when a report is rendered

    impls = report["implementations"]
    failed = sum(r["verdict"] == ERROR for r in impls)
    ran = f"{len(impls)} implementation{'s' if len(impls) != 1 else ''}" + (
        f" ({failed} failed to run)" if failed else ""
    )
    return [
        f"{report['op']} [{report['dtype']}, size {report['size']}, {report['condition']} inputs, "
        f"{report['threads']} thread(s)]: {report['doc']}",
        f"{ran}; bound: {report['bound']}",
        "",
    ]


def _verdicts(report: dict, verbose: bool) -> list[str]:
    """The answer: every implementation's verdict and numbers, then why for those that need it
    (every implementation under -v)."""
    from accuracy.judge.verdicts import ERROR, WITHIN

    impls = report["implementations"]
    columns = cli_columns()
    rows = [
        [
            r["impl"],
            r.get("compute", "-"),
            *(format_number(r.get(m.field)) for m in columns),
            r["label"] if r["verdict"] != ERROR else f"error: {r['error']}",
        ]
        for r in impls
    ]
    lines = format_table(["implementation", "computes in", *(m.label for m in columns), "verdict"], rows)
    lines += _grouped({r["impl"]: r.get("relative_note", "") for r in impls})
    explained = [r for r in impls if r["verdict"] not in (ERROR, WITHIN) or (verbose and r["verdict"] != ERROR)]
    if explained:
        lines += ["", "why:"] + [line for r in explained for line in _why(r)]
    elif all(r["verdict"] == WITHIN for r in impls):
        lines += ["", f"every implementation is {WITHIN} (-v says why for each)"]
    notes = _grouped({r["impl"]: r.get("note", "") for r in impls})
    if notes:
        lines += ["", "notes:", *notes]
    return lines


def _reproducibility(report: dict, verbose: bool) -> list[str]:
    cores, rows = report["all_cores"], report["reproducibility"]
    verdict = {r["impl"]: r["label"] for r in report["implementations"]}
    all_threads = f"verdict_{cores}_threads"
    irregular = [
        r
        for r in rows
        if not (r["run_to_run"] and r["one_vs_all_threads"])
        or {r["verdict_1_thread"], r[all_threads]} != {verdict[r["impl"]]}
    ]
    head = f"bitwise reproducibility (run to run at {report['threads']} thread(s); 1 vs {cores} threads, each judged)"
    shown = rows if verbose else irregular
    if not shown:
        return ["", f"{head}: every implementation is reproducible, with the same verdict at both thread counts"]
    lines = ["", f"{head}:"]
    lines += format_table(
        ["implementation", "run to run", f"1 vs {cores} threads", "verdict at 1 thread", f"verdict at {cores} threads"],
        [
            [
                r["impl"],
                "yes" if r["run_to_run"] else "NO",
                "yes" if r["one_vs_all_threads"] else "NO",
                r["verdict_1_thread"],
                r[all_threads],
            ]
            for r in shown
        ],
    )
    by_note: dict[str, list[str]] = {}
    for r in shown:
        if r.get("threads_note"):
            by_note.setdefault(r["threads_note"], []).append(r["impl"].split(":")[0])
    lines += [f"  {', '.join(dict.fromkeys(backends))}: {note}" for note, backends in by_note.items()]
    return lines


def render(report: dict, verbose: bool = False) -> str:
    """The answer first (verdicts, and the pairs whose difference is not rounding); every pair,
    every reason and the whole reproducibility table under -v."""
    from accuracy.workflows.explain import pairs_section

    lines = _header(report) + _verdicts(report, verbose) + pairs_section(report["pairs"], verbose)
    return "\n".join(lines + _reproducibility(report, verbose))
