"""`opbench model` on norms written by hand, as users write them (issue 57, item 1): the epsilon
in a config dict, a constant in the forward, a norm without a weight, a norm that takes a second
argument. The normalization causes crashed the run on the first (`'RMSNorm' object has no
attribute 'variance_epsilon'`) and never applied to the others: they matched class names and
transformers' attribute names."""

from __future__ import annotations

import numpy as np
import pytest
from user_modules import user_module

from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.activations_file import activations
from accuracy.workflows.model.sweep import ModelRun, run_model
from accuracy.workflows.model.trace import record
from accuracy.workflows.model.unit import SkippedCause

USER_DECODER = '''
import torch
from torch import nn

CONFIG = {"hidden": 32, "eps": 1e-6}


class RMSNorm(nn.Module):
    """Its epsilon in the model's config dict, not in an attribute."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, config["hidden"]))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.config["eps"])


class BareNorm(nn.Module):
    """A LayerNorm without a weight or a bias, its epsilon a constant in its forward."""

    eps = None  # not where its epsilon is

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        return centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + self.constant())

    def constant(self):
        return 1e-5


class GatedRMSNorm(nn.Module):
    """A second argument (Mamba's gated norm): no written-out norm takes it."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.weight = nn.Parameter(torch.linspace(1.5, 0.5, config["hidden"]))

    def forward(self, x, gate):
        x = x * torch.sigmoid(gate)
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.config["eps"])


class Decoder(nn.Module):
    def __init__(self, config=CONFIG, bare=BareNorm):
        super().__init__()
        self.up = nn.Linear(16, config["hidden"])
        self.norm = RMSNorm(config)
        self.mid = nn.Linear(config["hidden"], config["hidden"])
        self.bare = bare()
        self.gated = GatedRMSNorm(config)
        self.head = nn.Linear(config["hidden"], 8)

    def forward(self, x):
        h = self.norm(self.up(x))
        h = self.bare(self.mid(h))
        return self.head(self.gated(h, h))


def decoder():
    torch.manual_seed(0)
    return Decoder().eval()
'''


@pytest.fixture
def user(tmp_path, monkeypatch):
    with user_module(tmp_path, monkeypatch, "handmade", USER_DECODER) as directory:
        yield directory


def test_a_hand_written_decoder_with_a_config_held_eps_runs_and_its_bugs_are_named(user):
    import handmade

    class LooseBare(handmade.BareNorm):
        def constant(self):
            return 1e-2

    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    port = handmade.Decoder(dict(handmade.CONFIG, eps=1e-3), LooseBare).eval()
    port.load_state_dict(handmade.decoder().state_dict())
    x = np.random.default_rng(0).normal(size=(4, 16)).astype(np.float32)
    calls, out = record(port, {"x": x})
    file = write_arrays(user / "port.safetensors", activations(calls, out))
    inputs = str(write_arrays(user / "x.npz", {"x": x}))
    (judged,) = run_model(ModelRun("handmade:decoder", inputs, activations_files={"p": str(file)})).ports
    rows = {r.path: r for r in judged.layers}
    for path, eps, own in (("norm", 1e-3, "1e-06"), ("bare", 1e-2, "1e-05"), ("gated", 1e-3, "1e-06")):
        cause = rows[path].cause
        assert rows[path].verdict == "beyond rounding" and cause.explains, (path, cause)
        assert cause.name == "normalization eps" and abs(cause.parameters["eps"] - eps) <= 0.01 * eps, path
        assert f"this model has {own}" in cause.words


def test_a_cause_that_cannot_apply_to_a_module_is_skipped_with_the_reason(user, monkeypatch):
    """A catalogue entry that raises on a module (its words read an attribute the module lacks, as
    the eps entry read `variance_epsilon`) is skipped for that module, the reason kept in the
    cause's `skipped`; the entries that apply still name the bug."""
    import handmade

    from accuracy.core.dtypes import FORMATS
    from accuracy.workflows.model import causes
    from accuracy.workflows.model.causes.cause import Cause
    from accuracy.workflows.model.unit import Unit

    broken = Cause("reads an attribute", ("RMSNorm",), lambda m, v: m, lambda m, v: f"{m.variance_epsilon}")
    monkeypatch.setattr(causes, "causes", lambda: (broken, *causes.CATALOGUE[0].CAUSES))
    model = handmade.decoder()
    x = np.random.default_rng(0).normal(size=(4, 16)).astype(np.float32)
    calls, _ = record(model, {"x": x})
    call = next(c for c in calls if c.path == "norm")
    port = handmade.RMSNorm(dict(handmade.CONFIG, eps=1e-3))
    port.load_state_dict(model.norm.state_dict())
    output = port(*call.inputs).detach().numpy()
    found = causes.explain(Unit([call]), list(call.inputs), FORMATS["float32"], "p", output, None)
    assert found.name == "normalization eps" and found.explains
    assert found.skipped == (
        SkippedCause("reads an attribute", "AttributeError: 'RMSNorm' object has no attribute 'variance_epsilon'"),
    )


def test_a_unit_the_judge_fails_on_is_not_compared_with_why_and_the_rest_is_judged(user, monkeypatch):
    """An exception judging one unit ended the whole run with a traceback."""
    from accuracy.workflows.model import sweep

    judge = sweep.Judging.judge

    def failing(self):
        if self.unit.key == "bare":
            raise RuntimeError("a unit the judge cannot take")
        return judge(self)

    monkeypatch.setattr(sweep.Judging, "judge", failing)
    (port,) = run_model(ModelRun("handmade:decoder", "x=4x16", ["threads:1"])).ports
    rows = {r.path: r for r in port.layers}
    assert rows["bare"].verdict == "not compared"
    assert rows["bare"].reason.startswith("the judge failed on it: RuntimeError: a unit the judge cannot take")
    assert rows["norm"].verdict == "within rounding" and port.compared == len(rows) - 1
