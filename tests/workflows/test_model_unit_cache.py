"""A unit's typical tier through the reference cache (issue 41, "do each thing once"): a rerun of
`opbench model` with another port reads the tier of each unit judged before and gives the same
report bit for bit; a changed weight, input, format, forward or attribute misses, and a damaged
or moved entry is recomputed, never trusted. Judging work is counted at its two entry points,
torch_emulation's first-order spread and Monte Carlo runs."""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import accuracy.judge.torch_emulation as torch_emulation
from accuracy.core.dtypes import get_format
from accuracy.judge.precision import TF32
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model import sweep
from accuracy.workflows.model.causes.precision import RoundedAround
from accuracy.workflows.model.sweep import ModelRun, run_model
from accuracy.workflows.model.trace import load_model, record
from accuracy.workflows.model.unit import Unit, port_inputs
from accuracy.workflows.model.unit_cache import unit_key
from accuracy.workflows.model.units import TYPICAL_TIER, _evidence, float64_reference, judge_code, judge_unit
from accuracy.workflows.model.zoo import example_inputs

DECODER = "accuracy.workflows.model.zoo:decoder"
FLOAT32 = get_format("float32")


@pytest.fixture
def judging(monkeypatch) -> dict[str, int]:
    """How many times the typical tier was derived: first-order spreads, and stages of Monte Carlo runs."""
    counts = {"first_order_spread": 0, "monte_carlo_runs": 0}

    def counting(name, real):
        def counted(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)

        return counted

    monkeypatch.setattr(
        torch_emulation, "first_order_spread", counting("first_order_spread", torch_emulation.first_order_spread)
    )
    monkeypatch.setattr(
        torch_emulation.MonteCarloRuns, "extend", counting("monte_carlo_runs", torch_emulation.MonteCarloRuns.extend)
    )
    return counts


def _without_timings(value):
    """The report with its wall times left out: everything else must be the same bits."""
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def _report(x, port: str) -> str:
    return json.dumps(_without_timings(run_model(ModelRun(DECODER, x, [port])).as_dict()), sort_keys=True)


def _causes_counted_apart(monkeypatch, judging: dict[str, int]) -> dict[str, int]:
    """The derivations made while causes are tried on a flagged unit, moved out of `judging`: a
    cause's changed reference is a hypothesis about one port's output, not a unit of the model."""
    trying = dict.fromkeys(judging, 0)
    real = sweep.explain

    def explain(*args, **kwargs):
        before = dict(judging)
        try:
            return real(*args, **kwargs)
        finally:
            for name, count in before.items():
                trying[name] += judging[name] - count
                judging[name] = count

    monkeypatch.setattr(sweep, "explain", explain)
    return trying


def test_a_rerun_with_another_port_judges_no_unit_again_and_reports_the_same(
    tmp_path, monkeypatch, cache_path, judging
):
    """The second port may flag a unit the first did not (ONNX Runtime's SiLU on an AVX2-only
    host: its MLAS Sigmoid); the causes tried on it are judged once, and read on the next rerun."""
    trying = _causes_counted_apart(monkeypatch, judging)
    x = write_arrays(tmp_path / "x.npz", example_inputs("decoder"))
    run_model(ModelRun(DECODER, x, ["torchscript"]))
    first = dict(judging)
    assert first["first_order_spread"] > 0 and first["monte_carlo_runs"] > 0
    judging.update(dict.fromkeys(judging, 0))
    warm = _report(x, "onnxruntime")
    assert judging == {"first_order_spread": 0, "monte_carlo_runs": 0}
    trying.update(dict.fromkeys(trying, 0))
    assert _report(x, "onnxruntime") == warm
    assert judging == trying == {"first_order_spread": 0, "monte_carlo_runs": 0}
    # the same port with nothing cached: it derives its tiers, and its report is the warm one
    monkeypatch.setenv("OPBENCH_CACHE", str(tmp_path / "empty"))
    cold = _report(x, "onnxruntime")
    assert judging["first_order_spread"] + judging["monte_carlo_runs"] > 0
    assert warm == cold


def _call(path: str):
    model = load_model(DECODER)
    calls, _ = record(model, example_inputs("decoder"))
    (call,) = [c for c in calls if c.path == path]
    return call


def _judged(unit: Unit, fmt=FLOAT32, products=None):
    inputs = port_inputs(unit.calls[0].inputs, fmt)
    output = float64_reference(unit, inputs, fmt).astype(np.float32)
    (judged,) = judge_unit(unit, inputs, fmt, {"port": output}, products).values()
    assert judged.tier == TYPICAL_TIER
    return judged


def _key(unit: Unit, fmt=FLOAT32, products=None, inputs=None):
    inputs = port_inputs(unit.calls[0].inputs, fmt) if inputs is None else inputs
    return unit_key(unit, inputs, fmt, products, float64_reference(unit, inputs, fmt), judge_code())


@pytest.mark.parametrize("path", ["layers.0.input_layernorm", "layers.0.self_attn", "layers.0"])
def test_the_second_judgement_of_a_unit_reads_its_tier(cache_path, judging, path):
    unit = Unit([_call(path)])
    first = _judged(unit)
    derived = sum(judging.values())
    assert derived > 0
    second = _judged(unit)
    assert sum(judging.values()) == derived
    assert first == second  # dataclass equality: verdict, reason, and every number of the row


def _nudged(module: torch.nn.Module, name: str) -> torch.nn.Module:
    """`module` with one element of its parameter `name` one float32 ulp larger."""
    with torch.no_grad():
        p = dict(module.named_parameters())[name]
        flat = p.view(-1)
        flat[3] = torch.nextafter(flat[3], torch.tensor(float("inf")))
    return module


@pytest.mark.parametrize("name", ["q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"])
def test_a_weight_one_ulp_away_misses(cache_path, judging, name):
    call = _call("layers.0.self_attn")
    _judged(Unit([call]))
    derived = sum(judging.values())
    changed = dataclasses.replace(call, module=_nudged(copy.deepcopy(call.module), name))
    assert _key(Unit([changed])) != _key(Unit([call]))
    _judged(Unit([changed]))
    assert sum(judging.values()) > derived


def test_an_input_element_the_format_and_the_products_each_change_the_key():
    unit = Unit([_call("layers.0.input_layernorm")])
    inputs = port_inputs(unit.calls[0].inputs, FLOAT32)
    base = _key(unit, inputs=inputs)
    nudged = [t.clone() for t in inputs]
    nudged[0].view(-1)[5] = torch.nextafter(nudged[0].view(-1)[5], torch.tensor(float("inf")))
    keys = {
        base,
        _key(unit, inputs=nudged),
        _key(unit, fmt=get_format("bfloat16")),
        _key(unit, products=TF32),
    }
    assert None not in keys and len(keys) == 4
    assert _key(unit, inputs=inputs) == base  # and the same unit on the same inputs: the same key


@dataclasses.dataclass
class Settings:
    """A plain object a module may keep (as transformers modules keep their config)."""

    scale: float
    act: object


def test_an_attribute_and_the_mode_change_the_key():
    call = _call("layers.0.input_layernorm")
    gelu = torch.nn.functional.gelu

    def changed(**attributes):
        module = copy.deepcopy(call.module)
        for name, value in attributes.items():
            setattr(module, name, value)
        return _key(Unit([dataclasses.replace(call, module=module)]))

    keys = [
        _key(Unit([call])),
        changed(eps=2e-5),
        changed(training=True),
        changed(settings=Settings(1.0, functools.partial(gelu, approximate="tanh"))),
        changed(settings=Settings(2.0, functools.partial(gelu, approximate="tanh"))),
        changed(settings=Settings(1.0, functools.partial(gelu, approximate="none"))),
        changed(settings=Settings(1.0, torch.relu)),
    ]
    assert None not in keys and len(set(keys)) == len(keys)
    assert changed(settings=Settings(2.0, torch.relu)) == changed(settings=Settings(2.0, torch.relu))


def test_a_cause_rounding_to_a_format_has_a_key_of_its_own():
    """A cause's changed reference keeps the format it rounds to (a FloatFormat: its numpy dtype
    among its fields): described, so that a rerun reads the cause's tier; each format its own key."""
    call = _call("layers.0.mlp.act_fn")
    keys = [_key(Unit([call]))] + [
        _key(Unit([dataclasses.replace(call, module=RoundedAround(call.module, get_format(name)))]))
        for name in ("float16", "bfloat16")
    ]
    assert None not in keys and len(set(keys)) == 3


SOURCE = """
import torch


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, 32))

    def forward(self, x):
        return {body}


class Holder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Scaled()

    def forward(self, x):
        return self.inner(x)
"""


def _scaled_unit(tmp_path, monkeypatch, body: str) -> Unit:
    """A module defined in a file of its own, with `body` as its forward's return value."""
    (tmp_path / "unitcache_scaled.py").write_text(SOURCE.format(body=body))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.reload(sys.modules["unitcache_scaled"]) if "unitcache_scaled" in sys.modules else None
    module = module or importlib.import_module("unitcache_scaled")
    calls, _ = record(module.Holder().eval(), example_inputs("decoder"))
    (call,) = [c for c in calls if c.path == "inner"]
    return Unit([call])


def test_an_edited_forward_misses_even_where_its_float64_value_is_the_same(tmp_path, monkeypatch, cache_path, judging):
    """x * w and w * x have the same float64 value (multiplication commutes, bit for bit): only
    the source tells the two forwards apart."""
    before = _scaled_unit(tmp_path, monkeypatch, "x * self.weight")
    _judged(before)
    derived = sum(judging.values())
    after = _scaled_unit(tmp_path, monkeypatch, "self.weight * x")
    inputs = port_inputs(before.calls[0].inputs, FLOAT32)
    assert np.array_equal(float64_reference(before, inputs, FLOAT32), float64_reference(after, inputs, FLOAT32))
    assert _key(after) != _key(before)
    _judged(after)
    assert sum(judging.values()) > derived


def test_a_forward_patched_in_this_process_changes_the_key(tmp_path, monkeypatch):
    unit = _scaled_unit(tmp_path, monkeypatch, "x * self.weight")
    base = _key(unit)
    cls = type(unit.calls[0].module)
    monkeypatch.setattr(cls, "forward", lambda self, x: self.weight * x)
    assert _key(unit) != base


def test_state_the_key_cannot_describe_is_judged_afresh(cache_path, judging):
    """A forward hook, and a class with no source (made by type()), give no key: never cached."""
    call = _call("layers.0.input_layernorm")
    hooked = copy.deepcopy(call.module)
    hooked.register_forward_hook(lambda module, args, output: output)
    sourceless = copy.deepcopy(call.module)
    sourceless.__class__ = type("RMSNorm", (type(call.module),), {})
    for module in (hooked, sourceless):
        unit = Unit([dataclasses.replace(call, module=module)])
        assert _key(unit) is None
        before = sum(judging.values())
        _judged(unit)
        _judged(unit)
        assert sum(judging.values()) == before + 2
    assert not cache_path.exists() or not list(cache_path.glob("*.npz"))


def _entry(cache_path) -> object:
    (entry,) = cache_path.glob("*.npz")
    return entry


@pytest.mark.parametrize("damage", ["flipped", "truncated", "scale one ulp up", "another unit's entry"])
def test_a_damaged_or_moved_entry_is_recomputed(cache_path, judging, damage):
    unit = Unit([_call("layers.0.input_layernorm")])
    first = _judged(unit)
    entry = _entry(cache_path)
    data = entry.read_bytes()
    if damage == "flipped":
        flipped = bytearray(data)
        flipped[data.index(b"\x93NUMPY") + 200] ^= 0xFF  # in the first array's values, past its header
        entry.write_bytes(bytes(flipped))
    elif damage == "truncated":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "scale one ulp up":  # a readable file whose arrays no longer match their digest
        with np.load(entry) as stored:
            arrays = {k: stored[k] for k in stored.files}
        arrays["scale_0"] = np.nextafter(arrays["scale_0"], np.inf)
        with open(entry, "wb") as f:
            np.savez(f, **arrays)
    else:  # a valid entry of another unit, under this unit's name
        other = Unit([_call("layers.1.input_layernorm")])
        _judged(other)
        (moved,) = [p for p in cache_path.glob("*.npz") if p != entry]
        entry.write_bytes(moved.read_bytes())
    derived = sum(judging.values())
    again = _judged(unit)
    assert sum(judging.values()) == derived + 1
    assert again == first


KEY_IN_A_PROCESS = """
from accuracy.core.dtypes import get_format
from accuracy.workflows.model.trace import load_model, record
from accuracy.workflows.model.unit_cache import unit_key
from accuracy.workflows.model.unit import Unit, port_inputs
from accuracy.workflows.model.units import float64_reference, judge_code
from accuracy.workflows.model.zoo import example_inputs

print(hash("opbench"))
fmt = get_format("float32")
for model in ("decoder", "llama_tiny"):
    calls, _ = record(load_model(f"accuracy.workflows.model.zoo:{model}"), example_inputs(model))
    for call in calls:
        unit = Unit([call])
        inputs = port_inputs(call.inputs, fmt)
        print(model, call.path, unit_key(unit, inputs, fmt, None, float64_reference(unit, inputs, fmt), judge_code()))
"""


@pytest.mark.slow
def test_a_later_process_computes_the_same_keys():
    """A rerun is another process, its strings hashed with another seed: each unit's key is the
    same there (and describable: none is None), or a rerun would find nothing. Both are fresh
    processes: a test worker's own state (what the tests before this one left) is no rerun's.
    The decoder's and Llama's units in one process each, as a rerun of both would be."""
    import os
    import subprocess

    (hashed_1, *lines_1), (hashed_2, *lines_2) = (
        subprocess.run(
            [sys.executable, "-c", KEY_IN_A_PROCESS],
            env=os.environ | {"PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        for seed in ("1", "2")
    )
    assert hashed_1 != hashed_2  # the strings are hashed with another seed there
    assert lines_1 == lines_2
    for model in ("decoder", "llama_tiny"):
        keys = [line.split()[-1] for line in lines_1 if line.startswith(f"{model} ")]
        assert len(keys) > 10 and "None" not in keys, model


def test_each_port_gets_the_stage_its_own_outputs_settle_at(cache_path, monkeypatch, judging):
    """The Monte Carlo runs stop at the first stage where every output judged is settled
    (RUN_STAGES), so what a port is told depends on its outputs: the cache keeps each stage's
    tier and replays the stages for the outputs at hand. A port that settles later than the
    stored stages runs on; one that settles sooner gets the earlier stage, as with no cache."""
    unit = Unit([_call("layers.0.self_attn")])
    inputs = port_inputs(unit.calls[0].inputs, FLOAT32)
    reference = float64_reference(unit, inputs, FLOAT32)
    close = reference.astype(np.float32)  # settles after 8 runs

    def judged(*outputs):
        labels = {f"port{i}": o for i, o in enumerate(outputs)}
        return judge_unit(unit, inputs, FLOAT32, labels)

    first = judged(close)
    threshold = _evidence(unit, inputs, FLOAT32, None, [close])[0].op.model.threshold
    far = (reference + 0.6 * threshold).astype(np.float32)  # 0.6 of the 8 runs' threshold: not settled there
    cold = {}
    monkeypatch.setenv("OPBENCH_CACHE", str(cache_path.parent / "cold"))
    for outputs in ((far,), (close, far)):
        cold[len(outputs)] = judged(*outputs)
    monkeypatch.setenv("OPBENCH_CACHE", str(cache_path))
    judging.update(dict.fromkeys(judging, 0))
    assert judged(far) == cold[1]  # stage 8 stored, not settled there: runs on
    assert judging["monte_carlo_runs"] > 0
    judging.update(dict.fromkeys(judging, 0))
    assert judged(close) == first  # later stages stored too: stage 8, as with no cache
    assert judged(close, far) == cold[2]  # settled where `far` settled, stored
    assert judging["monte_carlo_runs"] == 0

    def basis(*outputs):
        return _evidence(unit, inputs, FLOAT32, None, list(outputs))[0].op.basis

    assert "RMS error of 8 Monte Carlo runs" in basis(close)
    assert "RMS error of 8 Monte Carlo runs" not in basis(far) and basis(far) == basis(close, far)


@pytest.mark.parametrize("module", ["accuracy.judge.kernels", "accuracy.judge.torch_emulation"])
def test_an_edit_of_the_kernels_or_the_emulation_misses(tmp_path, monkeypatch, module):
    """The kernels' approximations came to reach in-place ops (aten.silu_), and the cache kept
    giving the tier derived without them: 22 of EfficientNet-B0's blocks stayed flagged on a
    correct ONNX Runtime port. The key digests the source of the code that derives a tier."""
    from accuracy.workflows.model import state_key

    unit = Unit([_call("layers.0.input_layernorm")])
    inputs = port_inputs(unit.calls[0].inputs, FLOAT32)
    judge_code.cache_clear()
    base = _key(unit, inputs=inputs)
    edited = tmp_path / "edited.py"
    edited.write_bytes(Path(importlib.import_module(module).__file__).read_bytes() + b"\n# edited\n")
    getfile = state_key.inspect.getfile
    monkeypatch.setattr(state_key.inspect, "getfile", lambda m: str(edited) if m.__name__ == module else getfile(m))
    judge_code.cache_clear()
    try:
        assert _key(unit, inputs=inputs) != base
    finally:
        monkeypatch.undo()
        judge_code.cache_clear()


def test_a_class_source_in_the_key_is_inspects_own(tmp_path, monkeypatch):
    """The key's class source comes from one parse of its file: the text inspect.getsource gives,
    for a decorated class, a class nested in a class or in a function, and the second of two
    same-named classes (inspect's first), so that an entry cached before is found again."""
    import inspect

    from accuracy.workflows.model import state_key

    (tmp_path / "opbench_source_probe.py").write_text(
        "import dataclasses\n\n"
        "@dataclasses.dataclass\n"
        "class Decorated:\n    x: int = 1\n\n"
        "class Outer:\n    class Inner:\n        pass\n\n"
        "def factory():\n    class Local:\n        pass\n    return Local\n\n"
        "if True:\n    class Twice:\n        first = 1\nelse:\n    class Twice:\n        second = 2\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = importlib.import_module("opbench_source_probe")
    for cls in (probe.Decorated, probe.Outer, probe.Outer.Inner, probe.factory(), probe.Twice, torch.nn.Linear):
        assert state_key._source(cls) == inspect.getsource(cls), cls.__qualname__
    assert "first = 1" in state_key._source(probe.Twice)
