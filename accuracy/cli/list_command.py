"""`opbench list`: the ops, their implementations and dtypes available on this machine."""

from __future__ import annotations

from accuracy.catalog.registry import all_ops
from accuracy.cli.arguments import add_command, add_json
from accuracy.core.formatting import format_table
from accuracy.core.json_output import dumps


def register(sub) -> None:
    add_json(add_command(sub, "list", run, help="ops, implementations, backends and dtypes available here"))


def catalog() -> list[dict]:
    out = []
    for op in all_ops():
        impls: dict[str, dict] = {}
        for dtype in op.dtypes():
            for impl in op.available_impls(dtype):
                impls.setdefault(impl.name, {"backend": impl.backend, "variant": impl.variant, "dtypes": []})
                impls[impl.name]["dtypes"].append(dtype)
        out.append(
            {
                "op": op.name,
                "family": op.family,
                "doc": op.doc,
                "bound": op.bound_doc,
                "default_size": op.default_size,
                "bench_sizes": list(op.bench_sizes),
                "conditions": list(op.condition_names()),
                "backends": sorted({i["backend"] for i in impls.values()}),
                "dtypes": [d for d in op.dtypes() if any(d in i["dtypes"] for i in impls.values())],
                "implementations": [{"name": name, **info} for name, info in impls.items()],
            }
        )
    return out


def run(args) -> int:
    ops = catalog()
    if args.json:
        print(dumps(ops))
        return 0
    rows = [
        [
            o["op"],
            o["family"],
            ", ".join(o["dtypes"]),
            ", ".join(o["conditions"]),
            ", ".join(i["name"] for i in o["implementations"]),
        ]
        for o in ops
    ]
    print("\n".join(format_table(["op", "family", "dtypes", "conditions", "implementations"], rows)))
    return 0
