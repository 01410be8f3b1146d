"""Result keying by environment digest, and the per-class progress read from asv's output."""

from __future__ import annotations

import copy
import io
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accuracy.core.fingerprints import fingerprint_digest
from accuracy.run.progress import ClassProgress

FINGERPRINT = {
    "python": "3.11.7",
    "packages": {"numpy": "2.4.6", "scipy": "1.16.2", "torch": "2.13.0"},
    "blas": [
        {
            "internal_api": "openblas",
            "version": "0.3.31",
            "architecture": "Haswell",
            "num_threads": 2,
            "threading_layer": "pthreads",
            "filepath": "/v/numpy.libs/libscipy_openblas64_-32a4b2a6.so",
        }
    ],
    "blas_providers": {"loaded": []},
    "env": {},
}


def _changed(path: tuple[str, ...], value) -> dict:
    data = copy.deepcopy(FINGERPRINT)
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


def test_digest_changes_with_packages_kernels_and_knobs_only():
    base = fingerprint_digest(FINGERPRINT, {})
    assert base == fingerprint_digest(copy.deepcopy(FINGERPRINT), {})
    assert len(base) == 8
    changed = [
        fingerprint_digest(_changed(("packages", "numpy"), "2.3.5"), {}),  # pip install -U numpy
        fingerprint_digest(_changed(("packages", "mkl"), "2026.2"), {}),  # a package added
        fingerprint_digest(FINGERPRINT, {"OPENBLAS_CORETYPE": "SkylakeX"}),  # a knob
        fingerprint_digest(_changed(("env",), {"OPENBLAS_CORETYPE": "Zen"}), {}),  # an exported knob
    ]
    kernel = copy.deepcopy(FINGERPRINT)
    kernel["blas"][0]["architecture"] = "SkylakeX"
    changed.append(fingerprint_digest(kernel, {}))
    assert len({base, *changed}) == len(changed) + 1
    threads = copy.deepcopy(FINGERPRINT)
    threads["blas"][0]["num_threads"] = 1  # a thread count is not an environment
    assert fingerprint_digest(threads, {}) == base


BATCH_1 = """\
· Discovering benchmarks
· Running 6 total benchmarks (1 commits * 1 environments * 6 benchmarks)
[ 0.00%] · For opbench commit e9edf748 <check>:
[16.67%] ··· bench_products.Dot.time_op                                      ok
[16.67%] ··· =================================== ==========
                     numpy:np.dot@float32         120±0μs
[33.33%] ··· bench_products.Dot.track_bound_ratio                            ok
[50.00%] ··· bench_products.Gemv.time_op                                     ok
[66.67%] ··· bench_products.Gemv.track_bound_ratio                           failed
"""
BATCH_2 = """\
· Discovering benchmarks
· Running 2 total benchmarks (1 commits * 1 environments * 2 benchmarks)
[ 0.00%] · For opbench commit e9edf748 <check>:
[50.00%] ··· bench_reductions.Sum.time_op                                    ok
[100.00%] ··· ...ductions.Sum.track_bound_ratio                              ok
[100.00%] ··· ...ttention.ScaledDotProductAttention.time_op                  ok
"""


def test_progress_prints_one_line_per_class_across_batches():
    out = io.StringIO()
    progress = ClassProgress(
        [
            "bench_products.Dot",
            "bench_products.Gemv",
            "bench_reductions.Sum",
            "bench_attention.ScaledDotProductAttention",
        ],
        out=out,
    )
    for batch in (BATCH_1, BATCH_2):  # one asv run per batch; the count and the clock go on
        for line in batch.splitlines(keepends=True):
            progress.feed(line)
        progress.finish()
    lines = out.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == [  # asv shortens long names to "...<end of name>"
        "[1/4] bench_products.Dot",
        "[2/4] bench_products.Gemv",
        "[3/4] bench_reductions.Sum",
        "[4/4] bench_attention.ScaledDotProductAttention",
    ]
    assert all("elapsed" in line for line in lines)
    assert "ETA" in lines[0] and lines[-1].endswith("done")


def test_a_history_run_counts_every_class_at_every_commit_and_says_which_batches_it_kept(tmp_path):
    """A history run calls asv once per commit, batch and pass (driver.py): asv's own count says one
    commit, so the total comes from the run's commits; an interrupted one names the commits too."""
    from accuracy.run.batches import Batch
    from accuracy.run.driver import Step, _kept

    out = io.StringIO()
    classes = ["bench_products.Dot", "bench_products.Gemv", "bench_reductions.Sum"]
    progress = ClassProgress(classes, out=out, passes=("measure", "read"), commits=3)
    progress.feed("· Running 6 total benchmarks (1 commits * 1 environments * 6 benchmarks)\n")
    progress.feed("[50.00%] ··· bench_products.Dot.time_op   ok\n")
    progress.feed("[100.00%] ··· bench_products.Gemv.time_op   ok\n")
    assert progress.total == 3 * 2 * 3
    assert out.getvalue().startswith("[1/18] bench_products.Dot")

    products, reductions = Batch(("bench_products",), tuple(classes[:2])), Batch(("bench_reductions",), classes[2:3])
    plan = [Step(c, b) for c in ("a" * 40, "b" * 40) for b in (products, reductions)]
    assert _kept(tmp_path, "ci", plan, plan[:3]) == (
        f"kept 3 of 4 batches in {tmp_path / 'ci'}: bench_products (Dot, Gemv) at aaaaaaaa, "
        "bench_reductions (Sum) at aaaaaaaa, bench_products (Dot, Gemv) at bbbbbbbb; "
        "not run or not finished, so not saved: bench_reductions at bbbbbbbb; HTML not published"
    )


@pytest.mark.parametrize("profile", ["quick", "default", "full"])
def test_a_profile_runs_in_its_batches_of_whole_modules(profile):
    """Each batch is one asv start-up per pass (~10-25 s with the frameworks' preload): 12 per run
    cost 3 minutes, and the default run took 234 s in four batches, 179 s in two."""
    from accuracy.run.batches import group_modules
    from accuracy.run.profiles import PROFILES

    suite = {
        f"bench_{name}": {f"bench_{name}.C{i}" for i in range(n)}
        for name, n in [
            ("activations", 7),
            ("attention", 1),
            ("conv", 3),
            ("elementwise", 11),
            ("fft", 2),
            ("grads", 6),
            ("linalg", 8),
            ("losses", 2),
            ("norms", 3),
            ("products", 6),
            ("reductions", 8),
            ("references", 2),
        ]
    }
    batches = group_modules(suite, PROFILES[profile].batches)
    assert [len(batches), PROFILES[profile].batches] == {"quick": [1, 1], "default": [2, 2], "full": [7, 8]}[profile]
    assert [m for b in batches for m in b.modules] == sorted(suite)  # every module once, in order
    assert sorted(c for b in batches for c in b.classes) == sorted(c for cs in suite.values() for c in cs)
    first = {"quick": sorted(suite), "default": sorted(suite)[:6], "full": sorted(suite)[:2]}
    assert list(batches[0].modules) == first[profile]
    # a history run saves each commit as it ends: a default one goes in one batch per commit
    history = group_modules(suite, PROFILES[profile].history_batches)
    assert len(history) == {"quick": 1, "default": 1, "full": 7}[profile]
    # two one-class modules (the interrupt test's project, default profile) stay two batches
    assert [b.modules for b in group_modules({"bench_a": {"bench_a"}, "bench_b": {"bench_b"}}, 2)] == [
        ("bench_a",),
        ("bench_b",),
    ]


def _discovered(name: str, cases: list[str] | None = None) -> dict:
    """One entry of asv's benchmarks.json: a generated benchmark (its cases as asv's repr) or a
    hand-written one without parameters."""
    params = {"param_names": ["impl_dtype", "size"], "params": [[repr(c) for c in cases], ["4096"]]} if cases else {}
    return {"name": name, "type": "track", "version": "1", "param_names": [], "params": [], **params}


def test_a_bench_selection_preloads_only_the_backends_its_benchmarks_run(tmp_path):
    """`opbench run --bench 'bench_products\\.Dot\\.'` once preloaded TensorFlow, JAX and ONNX Runtime
    in the measure pass's forkserver (every framework of the module) for a class that runs numpy
    and torch: the batch names what its selected benchmarks run, as asv's `--bench` selects them."""
    import json

    from accuracy.run.batches import plan_batches

    suite = {
        "bench_products.Dot.time_op": _discovered(
            "bench_products.Dot.time_op", ["numpy:np.dot@float32", "torch:torch.dot@float32"]
        ),
        "bench_products.Matmul.time_op": _discovered(
            "bench_products.Matmul.time_op", ["tensorflow:tf.linalg.matmul@float32", "jax:jnp.matmul@float32"]
        ),
        "bench_references.Mpmath.track_cost": _discovered("bench_references.Mpmath.track_cost"),
    }
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "benchmarks.json").write_text(json.dumps({**suite, "version": 2}))
    config = tmp_path / "asv.conf.json"
    config.write_text(json.dumps({"version": 1, "repo": ".", "results_dir": str(tmp_path / "results")}))

    def backends(bench: str | None) -> list[frozenset[str] | None]:
        return [batch.backends for batch in plan_batches(config, bench, 4)]

    assert backends(r"bench_products\.Dot\.") == [frozenset({"numpy", "torch"})]
    assert set().union(*backends("bench_products")) == {"numpy", "torch", "tensorflow", "jax"}
    assert backends(r"Mpmath") == [frozenset()]  # a hand-written benchmark runs no backend's preload
    # a parameter value selects too (asv's -b); the whole class's backends are a safe superset
    assert backends("tensorflow") == [frozenset({"tensorflow", "jax"})]
    # no selection: the forkserver preloads what the modules' cases run, as before
    assert set(backends(None)) == {None}


def test_publish_graphs_the_branch_checked_out_beside_the_configured_ones(tmp_path):
    """asv publishes graphs for configured branches only: a run on a feature branch would
    show empty graphs unless that branch is added; a detached HEAD adds nothing."""
    import json
    import subprocess

    from accuracy.run.driver import graph_branches, write_private_config

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "first")
    config = tmp_path / "asv.conf.json"
    config.write_text(json.dumps({"version": 1, "repo": ".", "branches": ["main"]}))
    assert graph_branches(config) == ["main"]
    git("checkout", "-q", "-b", "feature/fast-refs")
    assert graph_branches(config) == ["feature/fast-refs", "main"]  # asv's pages open on the first
    private = write_private_config(
        config, tmp_path / "r", tmp_path / "h", tmp_path / "w", branches=graph_branches(config)
    )
    assert json.loads(private.read_text())["branches"] == ["feature/fast-refs", "main"]
    git("checkout", "-q", "--detach")
    assert graph_branches(config) == ["main"]


def test_run_summary_of_partial_results_says_what_was_not_run(tmp_path):
    """Issue 22 #2: `--bench softmax` ran some parameter combinations of other classes; the rest
    are n/a (NaN) in the results file and the summary ended in `cannot convert float NaN`."""
    import datetime
    import math

    from accuracy.cli.run_command import summarize
    from accuracy.report.synthetic import SyntheticBenchmark, write_result_file

    impls = (("torch:torch.softmax@float32", "numpy:softmax@float32", "jax:jax.nn.softmax@float32"),)
    benches = [
        SyntheticBenchmark(f"bench_activations.Softmax.{m}", k, u, ("impl_dtype",), impls)
        for m, k, u in (("time_op", "time", "seconds"), ("track_verdict_tier", "track", "tier"))
    ]

    def measure(bench, combo):
        if combo[0].startswith("jax"):
            return math.nan  # not selected
        return [1e-5, 1.1e-5] if bench.kind == "time" else 0.0

    path = write_result_file(
        tmp_path, "box", "py3.11", "a" * 40, datetime.datetime(2026, 3, 1, tzinfo=datetime.UTC), benches, measure
    )
    verdicts = "accuracy cases by verdict: 2 within rounding, 0 suspicious, 0 beyond rounding, 0 undetermined"
    listed = "bench_activations.Softmax.time_op (1 of 3), bench_activations.Softmax.track_verdict_tier (1 of 3)"
    # issue 40 item 22: one line by why, never a 2,000-character list unless -v asks for it
    assert summarize([path]) == [
        verdicts,
        "2 benchmarks ran only some parameter combinations; n/a: 2 skipped (they do not apply, e.g. a dtype an "
        "implementation lacks) (-v lists them)",
    ]
    assert summarize([path], r"\.Softmax\.", verbose=True) == [
        verdicts,
        "2 benchmarks ran only some parameter combinations; n/a: 2 skipped (they do not apply, e.g. a dtype an "
        "implementation lacks)",
        f"n/a by benchmark: {listed}",
    ]
    assert summarize([path], "torch")[1] == (
        "2 benchmarks ran only some parameter combinations; n/a: 2 not selected by --bench (-v lists them)"
    )


def test_an_op_name_for_bench_selects_that_ops_class_whole():
    import re

    from accuracy.cli.run_command import op_bench_regex

    regex = op_bench_regex("softmax")
    assert op_bench_regex(" Softmax ") == regex == r"\.Softmax\."
    # asv matches `name(params)`: the op's class with every parameter, never another class's parameter
    assert re.search(regex, "bench_activations.Softmax.time_op('torch:torch.softmax@float32', 1024)")
    assert not re.search(regex, "bench_activations.LogSoftmax.time_op('torch:torch.log_softmax@float32', 1024)")
    assert not re.search(regex, "bench_attention.Attention.time_op('numpy:softmax(q k^T) v@float32', 64)")
    assert op_bench_regex(r"bench_activations\.Softmax\.") == r"bench_activations\.Softmax\."  # a regex as given
    assert op_bench_regex(None) is None


@given(
    digest=st.text("0123456789abcdef", min_size=8, max_size=8),
    folder=st.text("abcdefghijklmnopqrstuvwxyz0123456789_-.", min_size=1, max_size=20).filter(
        lambda f: f not in (".", "..")
    ),
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_stack_label_survives_asvs_environment_name(tmp_path, digest, folder):
    """`opbench run` names asv's environment through the wrapper's path; the report and compare
    read the label back from asv's name, wherever the checkout is."""
    from asv.environment import ExistingEnvironment

    from accuracy.core.fingerprints import label_of, short_env_name
    from accuracy.run.environment_python import environment_python

    config = tmp_path / folder / "asv.conf.json"
    config.parent.mkdir(exist_ok=True)
    label = f"env-{digest}"
    python = environment_python(config, label)
    env = ExistingEnvironment.__new__(ExistingEnvironment)  # asv's own naming, without starting Python
    env._executable, env._tagged_env_vars = str(python), {}
    assert label_of(env.name) == label and short_env_name(env.name) == label
    assert short_env_name("virtualenv-py3.11-numpy2.4.6") == "virtualenv-py3.11-numpy2.4.6"


@pytest.mark.slow  # end to end: a fresh Python process
def test_the_wrapper_runs_this_environments_python(tmp_path):
    from accuracy.run.environment_python import environment_python

    python = environment_python(tmp_path / "asv.conf.json", "env-0123abcd")
    out = subprocess.run([python, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == sys.prefix


SIGNALS_AS_INTERRUPTS = """
import os, signal
from accuracy.run.driver import _terminate_as_interrupt

before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
for sig in (signal.SIGHUP, signal.SIGTERM):
    received = []
    try:
        with _terminate_as_interrupt(received):
            os.kill(os.getpid(), sig)  # the handler runs as soon as os.kill returns
    except KeyboardInterrupt:
        print(sig.name, received)
print({sig: signal.getsignal(sig) for sig in before} == before)
"""


@pytest.mark.slow  # a process of its own
def test_sigterm_and_sighup_stop_a_run_as_ctrl_c_does_and_are_named():
    """What a closed terminal (SIGHUP) or `kill` (SIGTERM) does to a run: a KeyboardInterrupt, as
    Ctrl-C, named in the last line; handlers restored after. A run stopped each way, end to end,
    is tests/cli/test_asv_suite.py's (SIGINT and SIGTERM). In a process of its own: signals sent
    to a test worker once took it down (a SIGSEGV there, and the whole suite waited)."""
    done = subprocess.run([sys.executable, "-c", SIGNALS_AS_INTERRUPTS], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.splitlines()) == (0, ["SIGHUP ['SIGHUP']", "SIGTERM ['SIGTERM']", "True"]), (
        done.stderr
    )
