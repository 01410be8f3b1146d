"""`opbench selftest --census`'s text: one row per model and port, the flagged units, and what
could not run, one line each (absent ports grouped by their reason)."""

from __future__ import annotations

from accuracy.core.formatting import format_table, printable

HEADER = ["model", "port", "units compared", "flagged", "runtime limits", "end to end", "seconds"]


def _rows(rows: list[dict]) -> list[list[str]]:
    return [
        [
            r["model"],
            p["port"],
            str(p["compared"]),
            str(p["flagged"]),
            str(p["runtime_limits"]),
            p["end_to_end"],
            f"{p['seconds']:.1f}",
        ]
        for r in rows
        for p in r["ports"]
    ]


def not_run(rows: list[dict]) -> list[str]:
    """Each model that did not run, and each port absent for some models, with why: one line each."""
    lines = [f"  {r['model']}: {printable(r['failed'])}" for r in rows if r["failed"] is not None]
    absent: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        for a in r["absent"]:
            absent.setdefault((a.port, a.reason), []).append(r["model"])
    ran = sum(r["failed"] is None for r in rows)
    for (port, reason), models in absent.items():
        which = f"all {ran} models" if len(models) == ran > 1 else ", ".join(models)
        lines.append(f"  {port} on {which}: {printable(reason)}")
    return lines


def flagged(rows: list[dict]) -> list[str]:
    return [
        f"  {r['model']} {p['port']} {u['unit']}: {u['verdict']}: {printable(u['reason'])}"
        for r in rows
        for p in r["ports"]
        for u in p["flagged_units"]
    ]


def _total(total: dict) -> str:
    return (
        f"{total['models']} models ({total['models_failed']} did not run), {total['pairs']} model x port pairs "
        f"({total['pairs_absent']} absent): {total['compared']} units compared, {total['flagged']} flagged, "
        f"{total['runtime_limits']} runtime limits; {total['end_to_end_beyond']} ports beyond rounding end to end"
    )


def render(rows: list[dict], total: dict) -> str:
    lines = format_table(HEADER, _rows(rows))
    for title, part in (("flagged units:", flagged(rows)), ("could not run:", not_run(rows))):
        if part:
            lines += ["", title, *part]
    return "\n".join([*lines, "", _total(total)])


def first_flagged(rows: list[dict]) -> list[str]:
    """Per model and port with flagged units: how many, and the first with its reason."""
    lines = []
    for r in rows:
        for p in r["ports"]:
            if p["flagged_units"]:
                first = p["flagged_units"][0]
                lines.append(
                    f"  {r['model']} {p['port']}: {p['flagged']} flagged, the first `{first['unit']}`: "
                    f"{first['verdict']}: {printable(first['reason'])}"
                )
    return lines


def markdown(rows: list[dict], total: dict) -> str:
    """The census as docs/models.md shows it: the table, the first flagged unit of each port, then
    what could not run (--json lists every flagged unit)."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(cells) + " |" for cells in _rows(rows)]
    for title, part in (("Flagged units:", first_flagged(rows)), ("Could not run:", not_run(rows))):
        if part:
            lines += ["", title, "", *(f"- {line.strip()}" for line in part)]
    return "\n".join([*lines, "", _total(total)])
