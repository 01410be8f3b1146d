"""`opbench list` and `opbench info`: what can be measured here, and with which stack."""

from __future__ import annotations

import json

from accuracy.envinfo import fingerprint
from accuracy.registry import all_ops
from accuracy.tables import format_table


def register(sub) -> None:
    p = sub.add_parser("list", help="ops, implementations, backends and dtypes available here")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_list)
    p = sub.add_parser("info", help="versions, BLAS libraries, CPU dispatch and devices")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_info)


def catalog() -> list[dict]:
    out = []
    for op in all_ops():
        impls = {}
        for dtype in op.dtypes():
            for impl in op.available_impls(dtype):
                impls.setdefault(impl.name, {"backend": impl.backend, "variant": impl.variant, "dtypes": []})
                impls[impl.name]["dtypes"].append(dtype)
        out.append({
            "op": op.name, "family": op.family, "doc": op.doc, "bound": op.bound_doc,
            "default_size": op.default_size, "bench_sizes": list(op.bench_sizes),
            "conditions": list(op.condition_names()),
            "backends": sorted({i["backend"] for i in impls.values()}),
            "dtypes": [d for d in op.dtypes() if any(d in i["dtypes"] for i in impls.values())],
            "implementations": [{"name": name, **info} for name, info in impls.items()],
        })
    return out


def run_list(args) -> int:
    ops = catalog()
    if args.json:
        print(json.dumps(ops, indent=2))
        return 0
    rows = [[o["op"], o["family"], ", ".join(o["dtypes"]), ", ".join(o["conditions"]),
             ", ".join(i["name"] for i in o["implementations"])] for o in ops]
    print("\n".join(format_table(["op", "family", "dtypes", "conditions", "implementations"], rows)))
    return 0


def run_info(args) -> int:
    info = fingerprint()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    v = info["versions"]
    print(f"python {info['python']} on {info['platform']}, {info['cpu_count']} cores")
    print("versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val))
    print("threading/BLAS libraries (threadpoolctl):")
    for lib in info["blas"]:
        print(f"  {lib['internal_api']} {lib['version'] or ''} arch={lib['architecture']} "
              f"layer={lib['threading_layer']} threads={lib['num_threads']}  {lib['filepath']}")
    print("BLAS libraries loaded by path (the blas backend):")
    for p in info["blas_providers"]["loaded"]:
        print(f"  blas-{p['name']}: {p['vendor']} {p['version'] or ''} arch={p['architecture']} "
              f"layer={p['threading_layer']} threads={p['num_threads']} {p['integer_width']}  {p['path']}")
    for error in info["blas_providers"]["load_errors"]:
        print(f"  not loaded: {error}")
    t = info["torch"]
    if t.get("available"):
        print(f"torch {t['version']}: cpu capability {t['cpu_capability']}, mkl={t['mkl']}, "
              f"oneDNN={t['mkldnn']}, threads={t['num_threads']}, cuda={t['cuda_available']}")
    print(f"numpy SIMD baseline: {' '.join(info['numpy']['simd_baseline'])}")
    print(f"numpy SIMD enabled: {' '.join(info['numpy']['simd_enabled'])}")
    if info["env"]:
        print("environment: " + " ".join(f"{k}={val}" for k, val in info["env"].items()))
    print(f"devices: {', '.join(info['devices'])}")
    return 0
