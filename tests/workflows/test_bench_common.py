"""The generated asv classes, called the way asv calls them (setup, method, teardown)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np
import pytest

from accuracy.run.profiles import PROFILE_VAR
from accuracy.run.suite_passes import MEASURE, PASS_VAR, PRELOAD_VAR, READ
from benchmarks import bench_activations, bench_linalg, bench_products, bench_reductions
from benchmarks.common import output_digest, shared


def _values(cls, params, scratch=None):
    """The tracks as asv calls them: with setup_cache's scratch folder first, or (scratch None) alone."""
    args = params if scratch is None else (str(scratch), *params)
    bench = cls()
    bench.setup(*args)
    try:
        return [getattr(bench, m)(*args) for m in ("track_max_ulp", "track_bound_ratio", "track_nonfinite")]
    finally:
        bench.teardown(*args)


def test_conditions_are_a_parameter_only_where_an_op_has_them():
    assert bench_linalg.Solve.param_names == ["impl_dtype", "size", "condition", "threads"]
    assert bench_linalg.Solve.params[2] == ["random", "ill"]
    assert "condition" not in bench_linalg.Cholesky.param_names


def test_tracks_share_one_measurement_within_a_run(tmp_path):
    params = ("numpy:np.linalg.solve@float64", 32, "ill", 1)  # float32 ill is vacuous (NaN)
    alone = _values(bench_linalg.Solve, params)
    assert bench_linalg.Solve().setup_cache() == str(Path.cwd())  # asv runs it, and every track, in the scratch
    first = _values(bench_linalg.Solve, params, tmp_path)
    assert len(list(tmp_path.glob("*.json"))) == 1  # measured once, stored for the other tracks
    assert _values(bench_linalg.Solve, params, tmp_path) == first == alone


def test_a_different_condition_is_a_different_measurement(tmp_path):
    size = bench_reductions.Sum.params[1][0]
    random = _values(bench_reductions.Sum, ("torch:torch.sum@float32", size, "random", 1), tmp_path)
    cancelling = _values(bench_reductions.Sum, ("torch:torch.sum@float32", size, "cancelling", 1), tmp_path)
    assert len(list(tmp_path.glob("*.json"))) == 2
    assert random != cancelling
    assert cancelling[0] > 100 * random[0]  # ulps explode under cancellation ...
    assert 0 < cancelling[1] <= 1  # ... yet provably within rounding


def _verdict_tracks(cls, params):
    bench = cls()
    bench.setup(*params)
    try:
        return bench.track_verdict_tier(*params), bench.track_typical_ratio(*params)
    finally:
        bench.teardown(*params)


def test_verdict_tier_and_typical_ratio_are_tracks():
    """0 within rounding ... 3 undetermined, lower is better; the semantic variant ddof=0 is 2."""
    size = bench_reductions.Std.params[1][0]
    tier, typical = _verdict_tracks(bench_reductions.Std, ("torch:torch.std(x)@float32", size, 1))
    assert tier == 0 and 0 <= typical <= 1
    tier, _ = _verdict_tracks(bench_reductions.Std, ("numpy:np.std(x)@float32", size, 1))
    assert tier == 2
    assert bench_reductions.Std.track_verdict_tier.unit == "tier"


def _track(cls, params, method, patch=None):
    bench = cls()
    bench.setup(*params)
    try:
        if patch:
            patch(bench)
        return getattr(bench, method)(*params)
    finally:
        bench.teardown(*params)


def test_output_digest_is_equal_exactly_for_equal_bits():
    """relu is exact in every format: every implementation gives the same bits, so the same digest."""
    size = bench_activations.Relu.params[1][0]
    digests = {
        impl: _track(bench_activations.Relu, (impl, size, 1), "track_output_digest")
        for impl in bench_activations.Relu.params[0]
    }
    assert len(set(digests.values())) == 1
    digest = next(iter(digests.values()))
    assert digest == int(digest) and 0 <= digest < 2**52
    other = _track(bench_activations.Sigmoid, (bench_activations.Sigmoid.params[0][0], size, 1), "track_output_digest")
    assert other != digest
    assert output_digest(np.zeros(3, np.float32)) != output_digest(np.zeros(3, np.float64))


def test_a_case_whose_bits_change_run_to_run_says_so_and_reports_its_worst_run():
    params = ("numpy:np.maximum(x, 0)@float32", bench_activations.Relu.params[1][0], 1)

    def flaky(bench):
        exact_run, calls = bench.case.run, iter(range(100))

        def run(impl, threads=None):
            out = exact_run(impl, threads)
            if next(calls) == 1:  # the second run is off by one ulp in one element
                out = out.copy()
                out[np.argmax(out)] = np.nextafter(out.max(), np.float32(np.inf))
            return out

        bench.case.run = run

    assert _track(bench_activations.Relu, params, "track_bits_differ_run_to_run") == 0
    assert _track(bench_activations.Relu, params, "track_max_ulp") == 0
    assert _track(bench_activations.Relu, params, "track_bits_differ_run_to_run", flaky) == 1
    assert _track(bench_activations.Relu, params, "track_max_ulp", flaky) == 1  # the worst of the runs
    assert _track(bench_activations.Relu, params, "track_verdict_tier", flaky) > 0


def test_a_one_thread_result_with_other_bits_is_judged_too():
    """At all cores the tracks report the worse of the all-cores and the 1-thread result."""
    params = ("numpy:np.maximum(x, 0)@float32", bench_activations.Relu.params[1][0], 2)

    def one_thread_off(bench):
        exact_run = bench.case.run

        def run(impl, threads=None):
            out = exact_run(impl, threads)
            if threads == 1:  # one element one ulp off, on one thread only
                out = out.copy()
                out[np.argmax(out)] = np.nextafter(out.max(), np.float32(np.inf))
            return out

        bench.case.run = run

    assert _track(bench_activations.Relu, params, "track_max_ulp") == 0
    assert _track(bench_activations.Relu, params, "track_max_ulp", one_thread_off) == 1
    assert _track(bench_activations.Relu, params, "track_bits_differ_1_vs_all_threads", one_thread_off) == 1
    assert _track(bench_activations.Relu, params, "track_bits_differ_run_to_run", one_thread_off) == 0


def test_bound_ratio_track_is_the_verdicts_at_the_compute_precision():
    """A float16 sum that torch computes in float32: float16's own gamma_4095 is vacuous (4095 u >= 1),
    so a storage-precision bound gives NaN; the precision model (float32 algorithm bound + one rounding
    to float16) proves it, and the asv track, explain's column and the verdict report that same ratio."""
    from accuracy.catalog.registry import get_op
    from accuracy.core.dtypes import get_format
    from accuracy.judge.error_metrics import bound_ratio
    from accuracy.workflows.evaluation import Case

    params = ("torch:torch.sum@float16", 4096, "cancelling", 1)
    track = _track(bench_reductions.Sum, params, "track_bound_ratio")
    op = get_op("sum")
    case = Case(op, get_format("float16"), 4096, "cancelling")
    impl = op.impl("torch:torch.sum")
    out = case.run(impl, 1)  # the track's thread count
    judgement = case.judge(impl, out)
    assert judgement.compute == "float32" and judgement.verdict == "within rounding"
    assert track == judgement.bound_ratio == case.measure(impl, out).bound_ratio
    assert 0 < track < 1e-4  # measured 3.0e-6
    assert np.isnan(bound_ratio(out, case.exact, op.bound(case.inputs64, case.exact, case.fmt)))


def test_bound_ratio_track_of_a_float16_matmul_computed_in_float32():
    """Where float16's bound is finite it is loose: the float32 bound + one rounding is ~6000x sharper."""
    from accuracy.catalog.registry import get_op
    from accuracy.core.dtypes import get_format
    from accuracy.judge.error_metrics import bound_ratio
    from accuracy.workflows.evaluation import Case

    op = get_op("matmul")
    case = Case(op, get_format("float16"), 128)
    impl = op.impl("torch:torch.matmul")
    out = case.run(impl, 1)  # the track's thread count
    storage = bound_ratio(out, case.exact, op.bound(case.inputs64, case.exact, case.fmt))
    track = _track(bench_products.Matmul, ("torch:torch.matmul@float16", 128, 1), "track_bound_ratio")
    assert track == case.judge(impl, out).bound_ratio
    assert 0.05 < track < 1 and track > 1000 * storage  # measured 0.263 and 4.4e-05


def _suite(monkeypatch, profile: str, family: str) -> dict[str, type]:
    from benchmarks.common import benchmark_classes

    monkeypatch.setenv(PROFILE_VAR, profile)
    return benchmark_classes(family)


def _asv_methods(cls) -> set[str]:
    """What asv's discovery collects from a class: its time_/track_ functions."""
    import inspect

    return {n for n, v in inspect.getmembers(cls) if n.startswith(("time_", "track_")) and inspect.isfunction(v)}


def test_quick_is_a_named_subset_of_default(monkeypatch):
    """Fewer tracks, one implementation per backend, no frameworks, the default condition: every
    quick result is one that the default profile records too."""
    from accuracy.judge.metric_table import tracks
    from accuracy.run.profiles import DEFAULT, FRAMEWORKS, PROFILES, QUICK

    assert [p.name for p in PROFILES.values()] == list(PROFILES) == ["quick", "default", "full"]
    assert QUICK != DEFAULT
    quick, default = {}, {}
    for family in ("reductions", "products"):
        quick |= _suite(monkeypatch, "quick", family)
        default |= _suite(monkeypatch, "default", family)
    assert set(quick) == set(default)
    for name, cls in quick.items():
        full = default[name]
        assert _asv_methods(cls) == {"time_op", "track_verdict_tier", "track_max_ulp"}
        assert _asv_methods(full) == {"time_op", *(m.track for m in tracks())}
        assert cls.param_names == full.param_names
        for values, wider in zip(cls.params, full.params, strict=True):
            assert set(values) <= set(wider)
        backends = [case.split(":")[0] for case in cls.params[0]]
        assert len(backends) == len(set(backends)) and not set(backends) & set(FRAMEWORKS)
    assert quick["Sum"].params[2] == ["random"] and default["Sum"].params[2] == ["random", "cancelling"]
    assert sum(len(c.params[0]) for c in quick.values()) < sum(len(c.params[0]) for c in default.values())


def test_every_setup_cache_is_the_one_scratch_folder_and_each_scan_reads_its_own_rows(monkeypatch, tmp_path):
    """asv keys setup_cache by source line: the full profile's scan classes, made in a loop, shared
    one key, so asv gave every class the first class's rows. Now every class's setup_cache is the
    run's scratch folder and each scan's first track process scans its own function."""
    import importlib

    from asv_runner.benchmarks._base import get_setup_cache_key

    monkeypatch.setenv(PROFILE_VAR, "full")
    import benchmarks.bench_references as references

    references = importlib.reload(references)
    scans = {n: c for n, c in vars(references).items() if n.startswith("Scan") and isinstance(c, type)}
    assert len(scans) >= 2
    keys = {get_setup_cache_key(c().setup_cache) for c in [*scans.values(), bench_linalg.Solve]}
    assert len(keys) == 1

    scanned = []

    def fake_rows(func, dtype):  # the real scan covers a whole format: minutes
        scanned.append((func, dtype))
        return {"impl": {"max_ulp": len(scanned), "func": func}}

    monkeypatch.setattr(references, "_scan_rows", fake_rows)
    first, second = list(scans.values())[:2]
    assert first().track_max_ulp(str(tmp_path), "impl") == 1
    assert second().track_max_ulp(str(tmp_path), "impl") == 2  # its own scan, not the first class's
    assert first().track_max_ulp(str(tmp_path), "impl") == 1 and len(scanned) == 2  # read, not scanned again
    monkeypatch.delenv(PROFILE_VAR)
    importlib.reload(references)


def _discovered_setup_caches(env: dict) -> set:
    """The setup_cache keys asv's discovery (asv_runner) finds for bench_products in a fresh process."""
    import os
    import subprocess

    code = (
        "from asv_runner.discovery import disc_benchmarks\n"
        "found = [b for b in disc_benchmarks('benchmarks') if b.name.startswith('bench_products.')]\n"
        "print(sorted({str(b.setup_cache_key) for b in found}))"
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=300, env=dict(os.environ, **env)
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(eval(proc.stdout))


@pytest.mark.slow
def test_opbench_runs_passes_share_their_folder_without_a_setup_cache_process(tmp_path):
    """asv starts a process per setup_cache key, pass and batch; in `opbench run` (its measurements
    folder set) the generated classes have none to start, in a plain `asv run` they share one."""
    assert _discovered_setup_caches({"OPBENCH_MEASUREMENTS": str(tmp_path)}) == {"None"}
    [key] = _discovered_setup_caches({"OPBENCH_MEASUREMENTS": ""})
    assert key.startswith("common:")


def _imported_by_the_suite(asv_command: str, env: dict | None = None, module: str = "bench_products") -> set[str]:
    """The libraries a fresh process has imported after importing a suite module (every one:
    "*"), as asv's `benchmark.py ASV_COMMAND ...` process would; `libtorch_cpu.so` where torch's
    CPU library is loaded without torch being imported (bound before the BLAS providers load);
    `threads read` where threadpoolctl's cached controller is current, for the forked processes."""
    import os
    import subprocess

    modules = (
        "import importlib, pkgutil, benchmarks\n"
        "for m in pkgutil.iter_modules(benchmarks.__path__): importlib.import_module('benchmarks.' + m.name)\n"
        if module == "*"
        else f"import benchmarks.{module}\n"
    )
    code = (
        f"import sys\nsys.argv = ['benchmark.py', {asv_command!r}]\n{modules}"
        "names = [m for m in ('torch', 'scipy.linalg', 'tensorflow', 'jax', 'onnxruntime') if m in sys.modules]\n"
        "mapped = 'torch' not in sys.modules and '/libtorch_cpu.so' in open('/proc/self/maps').read()\n"
        "import threadpoolctl\n"
        "read = threadpoolctl._CACHED_SYS_MODULES_LEN == len(sys.modules)\n"
        "print(','.join(names + ['libtorch_cpu.so'] * mapped + ['threads read'] * read))"
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=300,
        env=dict(os.environ, **(env or {})),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(filter(None, proc.stdout.strip().split(",")))


@pytest.mark.slow
def test_each_pass_forks_from_a_server_with_only_the_frameworks_it_runs():
    """`opbench run`'s read pass: asv forks every track process from a server that imported the
    suite alone (a fork costs in proportion to the server's memory), for every module. The measure
    pass preloads as a plain `asv run` does (the test below), unless a `--bench` selection names
    what its benchmarks run: that, and nothing else; and it has read the libraries its processes
    limit the threads of, so that each inherits that instead of reading them again."""
    # torch's library bound all the same: a read track whose case was never measured measures it
    assert _imported_by_the_suite("run_server", {PASS_VAR: READ}, "*") == {"libtorch_cpu.so"}
    selected = {PASS_VAR: MEASURE, PRELOAD_VAR: "numpy,torch"}
    assert _imported_by_the_suite("run_server", selected) == {"torch", "threads read"}


def _benchmarks(module, env: dict, monkeypatch) -> set[str]:
    """asv's view of a suite module under `env`: its classes' time_/track_ methods."""
    import importlib

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    module = importlib.reload(module)
    found = {
        f"{name}.{method}"
        for name, cls in vars(module).items()
        if isinstance(cls, type) and cls.__module__ in (module.__name__, "benchmarks.common")
        for method in dir(cls)
        if method.startswith(("time_", "track_")) and callable(getattr(cls, method))
    }
    for name in env:
        monkeypatch.delenv(name)
    importlib.reload(module)
    return found


def test_the_two_passes_split_every_benchmark_of_a_plain_run_between_them(monkeypatch):
    """Together the passes run what a plain `asv run` runs, each benchmark once: the measure
    pass the op timings, the verdict track (which measures the case) and the hand-written
    classes; the read pass the other tracks."""
    from benchmarks import bench_references

    for module in (bench_products, bench_references):
        plain = _benchmarks(module, {PROFILE_VAR: "full"}, monkeypatch)
        measure = _benchmarks(module, {PROFILE_VAR: "full", PASS_VAR: MEASURE}, monkeypatch)
        read = _benchmarks(module, {PROFILE_VAR: "full", PASS_VAR: READ}, monkeypatch)
        assert measure | read == plain and not measure & read
    assert {b.rsplit(".", 1)[1] for b in _benchmarks(bench_products, {PASS_VAR: MEASURE}, monkeypatch)} == {
        "time_op",
        "track_verdict_tier",
    }
    assert not _benchmarks(bench_references, {PASS_VAR: READ}, monkeypatch)


def test_a_failed_measurement_fails_the_other_tracks_with_its_message(tmp_path):
    calls = []

    def broken():
        calls.append(1)
        raise FloatingPointError("the op overflowed")

    for _ in range(2):
        with pytest.raises(Exception, match="the op overflowed"):
            shared(tmp_path, "case", broken)
    assert calls == [1]  # measured once: the second track read the failure


@pytest.mark.slow  # end to end: a measuring process is killed
def test_a_measurement_whose_process_died_is_not_started_again(tmp_path):
    """asv kills a track at its timeout: the case's other tracks fail at once instead of each
    measuring (and waiting for the timeout) again."""
    import os
    import subprocess

    root = Path(__file__).resolve().parents[2]
    code = "import os, sys\nfrom benchmarks.common import shared\nshared(sys.argv[1], 'case', lambda: os._exit(9))"
    died = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], cwd=root, env=dict(os.environ, PYTHONPATH=str(root))
    )
    assert died.returncode == 9
    with pytest.raises(RuntimeError, match="did not finish in the process that started it"):
        shared(tmp_path, "case", lambda: {"max_ulp": 0.5})


@pytest.mark.slow
def test_only_asv_forkserver_preloads_the_libraries_its_benchmarks_call():
    """`asv run --quick` times a single call: the forkserver imports every framework and scipy before it forks,
    or each benchmark's one timed call would import them (scipy's dot measured 3 s instead of 4 us).
    Discovery imports no framework, nor loads torch's library to bind it: it runs no op."""
    assert {"torch", "scipy.linalg", "tensorflow", "jax", "onnxruntime"} <= _imported_by_the_suite("run_server")
    assert _imported_by_the_suite("discover") == set()


def test_asv_records_each_benchmarks_code_without_reading_the_source_again(monkeypatch):
    """Every method a generated benchmark class shares carries its source as asv reads it: a
    discovery records the same code (the classes' and the suite's, in benchmarks.json) without
    reading any source again, where it read it for each of ~580 benchmarks."""
    import inspect

    from asv_runner.benchmarks.time import TimeBenchmark
    from asv_runner.benchmarks.track import TrackBenchmark

    from benchmarks.common import _OpBenchmark

    def discovered(name: str):
        bench = bench_products.Dot()
        kind = TimeBenchmark if name.startswith("time_") else TrackBenchmark
        return kind(f"bench_products.Dot.{name}", getattr(bench, name), [bench, bench_products]).code

    names = ["time_op", "track_max_ulp", "track_verdict_tier"]
    with monkeypatch.context() as read_as_asv_does:
        for method in vars(_OpBenchmark).values():
            if inspect.isfunction(method):
                read_as_asv_does.delattr(method, "pretty_source", raising=False)
        read = [discovered(name) for name in names]
    assert "def track(self, *args):" in read[1] and "def setup(self, *args):" in read[1]
    reads, getsourcelines = [], inspect.getsourcelines
    monkeypatch.setattr(inspect, "getsourcelines", lambda obj: reads.append(obj.__name__) or getsourcelines(obj))
    assert [discovered(name) for name in names] == read
    # only the line of the setup_cache a test process has: asv's key of it (no `opbench run` has one)
    assert set(reads) <= {"scratch_folder"}


def test_asv_hashes_each_shared_code_once(monkeypatch):
    """asv_runner hashes every benchmark's code though each of ours names its version: the suite
    memoizes the hash, so the code every generated class shares is hashed once."""
    from asv_runner.benchmarks import _base
    from asv_runner.benchmarks.track import TrackBenchmark

    from benchmarks.common import _hash_each_code_once

    hashed = []
    plain = getattr(_base.code_fingerprint, "__wrapped__", _base.code_fingerprint)
    monkeypatch.setattr(_base, "code_fingerprint", lambda code: hashed.append(code) or plain(code))
    _hash_each_code_once()
    for cls in (bench_products.Dot, bench_products.Gemv, bench_linalg.Solve):
        bench = cls()
        TrackBenchmark(f"{cls.__name__}.track_max_ulp", bench.track_max_ulp, [bench, bench_products])
    assert len(hashed) == 1 and _base.code_fingerprint(hashed[0]) == plain(hashed[0])
