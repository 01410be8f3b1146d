"""`opbench info`: the numerical stack under every measurement (versions, BLAS libraries and
kernels, threads, CPU dispatch, devices): what a result's fingerprint records."""

from __future__ import annotations

from accuracy.cli.arguments import add_command, add_json
from accuracy.core.json_output import dumps


def register(sub) -> None:
    parser = add_command(sub, "info", run, help="versions, BLAS libraries, CPU dispatch and devices")
    parser.add_argument(
        "--full",
        action="store_true",
        help="import torch and every framework for their runtime details (CPU capability, oneDNN, threads, "
        "devices; seconds): what `opbench run` records",
    )
    add_json(parser)


def run(args) -> int:
    from accuracy.backends.blas.providers import requested_in_env

    requested_in_env()  # a bad OPBENCH_BLAS is refused before the frameworks' seconds of imports
    from accuracy.backends.environment import fingerprint

    info = fingerprint(full=args.full)
    if args.json:
        print(dumps(info))
        return 0
    v = info["versions"]
    print(f"python {info['python']} on {info['platform']}, {info['cpu_count']} cores")
    print("versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val))
    print("threading/BLAS libraries (threadpoolctl):")
    for lib in info["blas"]:
        print(
            f"  {lib['internal_api']} {lib['version'] or ''} arch={lib['architecture']} "
            f"layer={lib['threading_layer']} threads={lib['num_threads']}  {lib['filepath']}"
        )
    print("BLAS libraries loaded by path (the blas backend):")
    for p in info["blas_providers"]["loaded"]:
        print(
            f"  blas-{p['name']}: {p['vendor']} {p['version'] or ''} arch={p['architecture']} "
            f"layer={p['threading_layer']} threads={p['num_threads']} {p['integer_width']}  {p['path']}"
        )
    for error in info["blas_providers"]["load_errors"]:
        print(f"  not loaded: {error}")
    t = info["torch"]
    if t.get("runtime"):
        print(f"torch {t['version']} (runtime details: opbench info --full)")
    elif t.get("available"):
        print(
            f"torch {t['version']}: cpu capability {t['cpu_capability']}, mkl={t['mkl']}, "
            f"oneDNN={t['mkldnn']}, threads={t['num_threads']}, cuda={t['cuda_available']}"
        )
    for name, fw in info["frameworks"].items():
        if not fw.get("available"):
            print(f"{name}: not available{' (' + fw['error'] + ')' if fw.get('error') else ''}")
            continue
        if fw.get("runtime"):
            print(f"{name} {fw['version']} (not imported)")
            continue
        details = {k: v for k, v in fw.items() if k not in ("available", "version", "knobs", "build")}
        print(f"{name} {fw['version']}: " + ", ".join(f"{k}={v}" for k, v in details.items()))
        print("  knobs: " + "; ".join(f"{k}={v}" for k, v in fw["knobs"].items()))
    print(f"numpy SIMD baseline: {' '.join(info['numpy']['simd_baseline'])}")
    print(f"numpy SIMD enabled: {' '.join(info['numpy']['simd_enabled'])}")
    if info["env"]:
        print("environment: " + " ".join(f"{k}={val}" for k, val in info["env"].items()))
    devices = ", ".join(info["devices"])
    print(f"devices: {devices}" if args.full else f"devices: {devices} (CUDA devices: opbench info --full)")
    return 0
