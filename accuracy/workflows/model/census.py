"""`opbench selftest --census`: `opbench model`'s sweep over stock models (census_models) through
every default and deploy port, counted per model and port; here, or each model one work item on
a Dask cluster (the same rows either way).

A model that cannot be built or run, or a port that cannot take it, is a row with its one line,
never the end of the census.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable

from accuracy.backends import get_backend
from accuracy.core.errors import OpbenchError, first_line, stdout_to_stderr
from accuracy.judge.verdicts import BEYOND, RUNTIME_LIMIT, SUSPICIOUS
from accuracy.workflows.cluster import ClusterLost, thread_limits, work_pool
from accuracy.workflows.model.census_models import MODULE, build, census_names, inputs_for
from accuracy.workflows.model.ports import census_ports, spec_for
from accuracy.workflows.model.report import ModelReport
from accuracy.workflows.model.sweep import ModelRun, run_model

FLAGGED = (SUSPICIOUS, BEYOND)  # a unit's verdict that says the port is wrong
REASON_CHARS = 200


def select(models: str | None = None, limit: int | None = None) -> list[str]:
    """The census's models whose name `models` (a regular expression) finds, the first `limit`."""
    names = census_names()
    if models is not None:
        try:
            pattern = re.compile(models)
        except re.error as exc:
            raise OpbenchError(f"--models {models!r}: not a regular expression: {exc}") from None
        names = [n for n in names if pattern.search(n)]
    if not names:
        raise OpbenchError(f"--models {models!r}: no census model matches; they are torchvision_* and transformers_*")
    return names[:limit] if limit is not None else names


def ports_of(ports: list[str] | None) -> list[str]:
    """The ports asked for, or the census's own (the CUDA ones where a GPU is)."""
    import torch

    names = list(dict.fromkeys(ports or census_ports(torch.cuda.is_available())))
    for name in names:
        spec_for(name)  # an unknown port is one line before any model runs
    return names


def census(
    models: list[str],
    ports: list[str],
    dask: str | None = None,
    progress: Callable[[int, int, str, float], None] | None = None,
) -> tuple[list[dict], str | None]:
    """Each model's row, in the order of `models`, and why the census stopped early or None: the
    models here one after the other, or each a work item on the Dask cluster `dask` names."""
    import torch

    threads, start, rows = torch.get_num_threads(), time.perf_counter(), []
    if dask is None:
        try:
            for name in models:
                rows.append(census_model(name, ports, threads))
                if progress:
                    progress(len(rows), len(models), name, time.perf_counter() - start)
        except KeyboardInterrupt:
            return rows, "interrupted"
        return rows, None
    backends = ["torch", *(b for p in ports for b in spec_for(p).backends)]
    futures: list = []
    with work_pool(dask, preload=backends) as pool:
        try:
            futures = [pool.submit(census_task, name, ports, threads) for name in models]
            for name, future in zip(models, futures, strict=True):
                rows.append(future.result())
                if progress:
                    progress(len(rows), len(models), name, time.perf_counter() - start)
        except (KeyboardInterrupt, ClusterLost) as stop:
            return rows, str(stop) if isinstance(stop, ClusterLost) else "interrupted"
        finally:
            for future in futures:
                future.cancel()
    return rows, None


def census_task(name: str, ports: list[str], threads: int) -> dict:
    """One model of the census on a Dask worker, on this process's torch thread count."""
    with thread_limits([get_backend("torch")], threads, for_life=True):
        return census_model(name, ports, threads)


def census_model(name: str, ports: list[str], threads: int) -> dict:
    """One model's row: each port's counts, the ports absent for it, or why it did not run."""
    row: dict = {"model": name, "inputs": {}, "ports": [], "absent": [], "failed": None}
    started = time.perf_counter()
    step = "cannot be built"
    try:
        given = inputs_for(name, build(name))
        row["inputs"] = {k: list(v.shape) for k, v in given.items()}
        step = "opbench model failed"
        # the models' own prints go to stderr, their C++ sides' too: stdout is the census's table or JSON
        with stdout_to_stderr():
            report = run_model(ModelRun(f"{MODULE}:{name}", given, ports))
    except Exception as exc:  # a model that cannot be built or run is a row, never the census's end
        row["failed"] = f"{step}: {exc if isinstance(exc, OpbenchError) else first_line(exc, typed=True)}"
    else:
        row["ports"], row["absent"] = port_rows(report), report.absent
    row["seconds"] = time.perf_counter() - started
    return row


def port_rows(report: ModelReport) -> list[dict]:
    """Each port's units counted by verdict, and the flagged ones (verdict, ratio, reason)."""
    rows = []
    for port in report.ports:
        verdicts = Counter(str(unit.verdict) for unit in port.layers)
        flagged = [
            {
                "unit": unit.path,
                "verdict": str(unit.verdict),
                "typical_ratio": unit.typical_ratio,
                "bound_ratio": unit.bound_ratio,
                "reason": unit.reason[:REASON_CHARS],
            }
            for unit in port.layers
            if unit.verdict in FLAGGED
        ]
        rows.append(
            {
                "port": port.port,
                "compared": port.compared,
                "verdicts": dict(sorted(verdicts.items())),
                "flagged": len(flagged),
                "runtime_limits": verdicts.get(RUNTIME_LIMIT, 0),
                "end_to_end": str(port.end_to_end.verdict),
                "seconds": port.seconds,
                "flagged_units": flagged,
            }
        )
    return rows


def summary(rows: list[dict]) -> dict:
    """The census in numbers: models run and not, (model, port) pairs, units compared and flagged."""
    pairs = [p for r in rows for p in r["ports"]]
    return {
        "models": len(rows),
        "models_failed": sum(r["failed"] is not None for r in rows),
        "pairs": len(pairs),
        "pairs_absent": sum(len(r["absent"]) for r in rows),
        "compared": sum(p["compared"] for p in pairs),
        "flagged": sum(p["flagged"] for p in pairs),
        "runtime_limits": sum(p["runtime_limits"] for p in pairs),
        "end_to_end_beyond": sum(p["end_to_end"] == BEYOND for p in pairs),
    }
