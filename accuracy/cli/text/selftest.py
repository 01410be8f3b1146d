"""`opbench selftest`'s text: one row per case, the alarms and missed mutants, and the
`--markdown` table of docs/verdicts.md."""

from __future__ import annotations

from accuracy.core.dtypes import ALL_DTYPES
from accuracy.core.formatting import format_table


def _smallest(d: dict) -> str:
    s = d["smallest_caught"]
    return "-" if s is None else f"{s['error_ulp']:.3g} ulp ({s['mutant']})"


def render(reports: list[dict], total: dict) -> str:
    rows = [
        [
            d["op"],
            d["dtype"],
            d["condition"],
            str(d["size"]),
            str(d["correct_impls"]),
            str(len(d["false_alarms"])),
            str(len(d["alarms"]) - len(d["false_alarms"])),
            f"{d['least_accurate_correct_ulp']:.3g}",
            f"{d['caught']}/{d['must_catch']}",
            _smallest(d),
        ]
        for d in reports
    ]
    lines = format_table(
        [
            "op",
            "dtype",
            "condition",
            "size",
            "correct",
            "false alarms",
            "confirmed alarms",
            "least accurate correct (ulp)",
            "caught (>= 16x)",
            "smallest caught",
        ],
        rows,
    )
    alarms = [
        f"  {d['op']} {d['dtype']} {d['condition']}: {'FALSE ' if a in d['false_alarms'] else ''}{a}"
        for d in reports
        for a in d["alarms"]
    ]
    if alarms:
        lines += ["", "alarms on correct implementations:", *alarms]
    missed = [f"  {d['op']} {d['dtype']} {d['condition']}: {m}" for d in reports for m in d["missed"]]
    if missed:
        lines += ["", "missed mutants:", *missed]
    lines += [
        "",
        f"{total['cases']} cases, {total['correct_judgements']} judgements of correct implementations: "
        f"{total['false_alarms']} false alarms, {total['confirmed_alarms']} confirmed alarms, "
        f"{total['undetermined']} undetermined; mutants caught: {total['caught']}/{total['must_catch']} "
        f"({100 * total['catch_rate']:.1f}%)",
    ]
    return "\n".join(lines)


def markdown(reports: list[dict], total: dict) -> str:
    """Per op and dtype: false alarms, caught/must-catch, over all its conditions; and the
    smallest caught error in float32."""
    dtypes = [d for d in ALL_DTYPES if any(r["dtype"] == d for r in reports)]
    lines = ["| op | " + " | ".join(dtypes) + " | smallest caught, float32 |", "|---" * (len(dtypes) + 2) + "|"]
    for op in dict.fromkeys(r["op"] for r in reports):
        cells = []
        for dtype in dtypes:
            rs = [r for r in reports if r["op"] == op and r["dtype"] == dtype]
            cells.append(
                "-"
                if not rs
                else f"{sum(len(r['false_alarms']) for r in rs)} / "
                f"{sum(r['caught'] for r in rs)}/{sum(r['must_catch'] for r in rs)}"
            )
        f32 = [r for r in reports if r["op"] == op and r["dtype"] == "float32" and r["smallest_caught"]]
        small = min(f32, key=lambda r: r["smallest_caught"]["error_ulp"], default=None)
        cells.append("-" if small is None else _smallest(small))
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    lines.append(
        f"| **all** | {total['false_alarms']} false alarms in {total['correct_judgements']} judgements"
        f" | caught {total['caught']}/{total['must_catch']} ({100 * total['catch_rate']:.1f}%) |"
        + " |"
        * (len(dtypes) - 1)
    )
    return "\n".join(lines)


def _parameters(injection: dict) -> str:
    return ", ".join(
        f"{k} = {v:.3g}" if isinstance(v, float) else f"{k} = {v}" for k, v in injection["parameters"].items()
    )


def _models_summary(total: dict, reports: list[dict]) -> str:
    models = ", ".join(r["model"] for r in reports if r["model"])
    correct = sorted({p for r in reports for p in r["correct_ports"]})
    return (
        f"causes: {total['entries']} catalogue entries injected into ports of {models or 'no model'}: "
        f"{total['named_right']} named right, {total['named_wrong']} named wrong, {total['not_named']} not named"
        + (f", {total['not_injected']} not injected" if total["not_injected"] else "")
        + f" ({100 * total['named_right_rate']:.1f}% named right); named on correct ports "
        f"({', '.join(correct)}): {total['named_on_correct']}; {total['seconds']:.1f} s"
    )


def render_models(reports: list[dict], total: dict) -> str:
    """The model part: one row per catalogue entry injected, then what the correct ports named."""
    rows = [
        [
            i["cause"],
            i["model"] or "-",
            i["path"] or "-",
            i["outcome"],
            i["named"] or "-",
            _parameters(i) or "-",
            "-" if i["seconds"] is None else f"{i['seconds']:.2f}",
            i["why"],
        ]
        for r in reports
        for i in r["injections"]
    ]
    lines = format_table(["cause injected", "model", "into", "outcome", "named", "fitted", "naming (s)", "why"], rows)
    named = [f"  {r['model']}: {n}" for r in reports for n in r["named_on_correct"]]
    if named:
        lines += ["", "causes named on correct ports:", *named]
    return "\n".join([*lines, "", _models_summary(total, reports)])


def markdown_models(reports: list[dict], total: dict) -> str:
    """docs/verdicts.md's table of causes: one row per catalogue entry."""
    lines = [
        "| cause injected | model | into | named right | named wrong | not named | fitted | naming (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i in (i for r in reports for i in r["injections"]):
        marks = [str(int(i["outcome"] == k)) for k in ("named right", "named wrong", "not named")]
        seconds = "-" if i["seconds"] is None else f"{i['seconds']:.2f}"
        lines.append(
            f"| {i['cause']} | {i['model'] or '-'} | {i['path'] or '-'} | {' | '.join(marks)} "
            f"| {_parameters(i) or '-'} | {seconds} |"
        )
    lines.append(
        f"| **all** | | | {total['named_right']} ({100 * total['named_right_rate']:.1f}%) | {total['named_wrong']} "
        f"| {total['not_named']} | named on correct ports: {total['named_on_correct']} | |"
    )
    return "\n".join(lines)
