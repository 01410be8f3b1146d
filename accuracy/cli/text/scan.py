"""`opbench scan`'s text: one row per implementation, its worst inputs and its ulp histogram."""

from __future__ import annotations

from accuracy.core.formatting import format_number, format_table


def _num(v) -> str:
    return format_number(v, digits=4)


def render(rows: list[dict], result) -> str:
    fmt = result.fmt
    state = "interrupted: partial" if result.interrupted else "complete"
    lines = [
        f"scan {result.op} {fmt.name}: {result.done} of {result.total} inputs ({state}), {result.seconds:.0f} s",
        "",
    ]
    table = []
    for r in rows:
        holds = {None: "no contract declared", True: "holds", False: "BROKEN"}[r["contract_holds"]]
        contract = "-" if r["contract_max_ulp"] is None else f"{r['contract_max_ulp']} ulp ({r['contract_source']})"
        table.append(
            [
                r["impl"],
                str(r["checked"]),
                f"{r['max_ulp']:.6g}" if r["not_correctly_rounded"] else "<= 0.5",
                str(r["not_correctly_rounded"]),
                _num(r["max_ulp_from_correctly_rounded"]),
                contract,
                holds,
            ]
        )
    lines += format_table(
        [
            "implementation",
            "inputs",
            "max ulp",
            "not correctly rounded",
            "ulps from CR",
            "contract",
            "contract everywhere",
        ],
        table,
    )
    lines.append("")
    for r in rows:
        if r["worst"]:
            worst = ", ".join(
                f"x={w['x']} ({w['x_value']:.9g}) -> {w['result']}, exact {w['exact']:.12g}, {w['ulp']:.6g} ulp"
                for w in r["worst"]
            )
            lines.append(f"  {r['impl']} worst: {worst}")
        hist = "  ".join(f"{k}: {v}" for k, v in r["histogram"].items() if v)
        lines.append(f"  {r['impl']} ulp-error histogram: {hist}")
    from accuracy.workflows.scan import HISTOGRAM_EDGES

    lines.append(f"(histogram bins in ulps; edges {', '.join(f'{e:g}' for e in HISTOGRAM_EDGES)})")
    return "\n".join(lines)
