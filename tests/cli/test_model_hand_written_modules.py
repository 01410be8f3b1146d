"""`opbench model` on activations and layers written by hand, as users write them (issue 57: a
module is matched by what it computes and holds, not by its class name alone): a SiLU written as
`x * torch.sigmoid(x)`, a GELU written with tanh, a LeakyReLU whose slope sits in a config dict,
a Linear-like module holding its own `w` and `b`, a softmax written out. The catalogue matched
torch's class names, so a bug injected into any of these was flagged and never named."""

from __future__ import annotations

import math

import numpy as np
import pytest
from user_modules import user_module

from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.activations_file import activations
from accuracy.workflows.model.rows import UnitRow
from accuracy.workflows.model.sweep import ModelRun, run_model
from accuracy.workflows.model.trace import record

USER_MODEL = '''
import math

import torch
from torch import nn

CONFIG = {"hidden": 32, "slope": 0.1}


class Dense(nn.Module):
    """A Linear by hand: its own weight and bias, under its own names."""

    def __init__(self, inputs, outputs):
        super().__init__()
        self.w = nn.Parameter(torch.randn(outputs, inputs) / math.sqrt(inputs))
        self.b = nn.Parameter(torch.randn(outputs) / 4)

    def forward(self, x):
        return x @ self.w.t() + self.b


class Swish(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


class TanhGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Leaky(nn.Module):
    """Its slope in the model's config dict."""

    def __init__(self, config):
        super().__init__()
        self.config = config

    def forward(self, x):
        return torch.where(x > 0, x, self.config["slope"] * x)


class Scores(nn.Module):
    def forward(self, x):
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True)


class Net(nn.Module):
    def __init__(self, config=CONFIG, swish=Swish):
        super().__init__()
        self.up = Dense(16, config["hidden"])
        self.act1 = swish()
        self.mid = Dense(config["hidden"], config["hidden"])
        self.act2 = TanhGELU()
        self.square = Dense(config["hidden"], config["hidden"])
        self.act3 = Leaky(config)
        self.head = Dense(config["hidden"], 8)
        self.scores = Scores()

    def forward(self, x):
        h = self.act1(self.up(x))
        h = self.act2(self.mid(h))
        h = self.act3(self.square(h))
        return self.scores(self.head(h))


def net():
    torch.manual_seed(0)
    return Net().eval()
'''


@pytest.fixture
def user(tmp_path, monkeypatch):
    with user_module(tmp_path, monkeypatch, "handlayers", USER_MODEL) as directory:
        yield directory


def _port_of(user, build) -> dict[str, UnitRow]:
    """The layers `opbench model handlayers:net` reports for the port `build(reference)` makes."""
    import handlayers

    torch = pytest.importorskip("torch")
    port = build(handlayers)
    x = np.random.default_rng(0).normal(size=(4, 16)).astype(np.float32)
    with torch.no_grad():
        calls, out = record(port, {"x": x})
    file = write_arrays(user / "port.safetensors", activations(calls, out))
    inputs = str(write_arrays(user / "x.npz", {"x": x}))
    (judged,) = run_model(ModelRun("handlayers:net", inputs, activations_files={"p": str(file)})).ports
    return {r.path: r for r in judged.layers}


def test_bugs_injected_into_hand_written_layers_are_named(user):
    """Five bugs, each in a hand-written module of one port: each unit flagged and its bug named."""
    torch = pytest.importorskip("torch")

    def build(handlayers):
        port = handlayers.Net(dict(handlayers.CONFIG, slope=0.2), swish=torch.nn.GELU).eval()
        port.load_state_dict(handlayers.net().state_dict())
        with torch.no_grad():
            port.up.b.zero_()
            port.mid.w.copy_(port.mid.w.to(torch.bfloat16).float())
            port.square.w.copy_(port.square.w.t().clone())
        return port

    rows = _port_of(user, build)
    expected = {
        "up": ("missing bias", "its bias missing (zero)"),
        "act1": ("another activation", "GELU for Swish (a SiLU)"),
        "mid": ("weights in bfloat16", "its weights stored in bfloat16"),
        "square": ("transposed weight", "its 32x32 weight transposed"),
        "act3": ("LeakyReLU slope", "LeakyReLU slope = 0.2 (TensorFlow's default); this model has 0.1"),
    }
    for path, (name, words) in expected.items():
        cause = rows[path].cause
        assert rows[path].verdict == "beyond rounding" and cause and cause.explains, (path, cause)
        assert (cause.name, cause.words) == (name, words), path
    assert rows["act2"].verdict == "within rounding" and rows["scores"].verdict == "within rounding"


def test_a_hand_written_softmax_over_another_axis_and_a_rounded_input_are_named(user):
    """A softmax written out, taken over the batch axis by the port; a hand Linear whose input the
    port rounds to bfloat16."""
    torch = pytest.importorskip("torch")

    class OverBatch(torch.nn.Module):
        def forward(self, x):
            return torch.softmax(x, 0)

    class RoundedInput(torch.nn.Module):
        def __init__(self, dense):
            super().__init__()
            self.w, self.b = dense.w, dense.b

        def forward(self, x):
            return x.to(torch.bfloat16).float() @ self.w.t() + self.b

    def build(handlayers):
        port = handlayers.net()
        port.scores = OverBatch()
        port.square = RoundedInput(port.square)
        return port

    rows = _port_of(user, build)
    assert rows["scores"].cause.name == "softmax axis" and rows["scores"].cause.parameters == {"dim": 0}
    assert rows["scores"].cause.words == "Scores (a Softmax) over axis 0, not this model's dim=-1"
    assert rows["square"].cause.name == "inputs in bfloat16" and rows["square"].cause.explains


def test_a_module_is_probed_once_whatever_the_number_of_causes_asking(user):
    """The probe of what a module computes runs its forward once per module object (kind and norm
    probes), not once per catalogue entry: models have hundreds of modules."""
    import handlayers

    from accuracy.workflows.model.kinds import kind_of

    runs = []

    class Counted(handlayers.Swish):
        def forward(self, x):
            runs.append(1)
            return super().forward(x)

    module = Counted()
    assert kind_of(module).name == "SiLU"
    first = len(runs)
    assert 1 <= first <= 2  # the norm probe, then the activation probe
    for _ in range(50):
        kind_of(module)
    assert len(runs) == first


def test_a_class_named_like_torchs_is_matched_by_what_it_computes(user):
    """A user's `GELU` that scales its input by a learned factor is no GELU: no activation entry
    applies to it (the GELU entry read `approximate`, which it lacks, and crashed the entry)."""
    torch = pytest.importorskip("torch")

    from accuracy.workflows.model.causes import causes

    class GELU(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Parameter(torch.full((4,), 2.0))

        def forward(self, x):
            return x * self.a

    applying = {c.name for c in causes() if c.applies(GELU())}
    assert not applying & {"GELU approximation", "another activation", "inputs in bfloat16"}


USER_ATTENTION = '''
import math

import torch
from torch import nn

CONFIG = {"n_head": 4, "n_embd": 32}


class SelfAttention(nn.Module):
    """nanoGPT's attention written out: its geometry as n_head and n_embd, from a config dict."""

    def __init__(self, config):
        super().__init__()
        self.n_head, self.n_embd = config["n_head"], config["n_embd"]
        self.qkv = nn.Linear(self.n_embd, 3 * self.n_embd)
        self.proj = nn.Linear(self.n_embd, self.n_embd)
        self.scale = 1.0 / math.sqrt(self.n_embd // self.n_head)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in self.qkv(x).split(c, dim=2))
        scores = (q @ k.transpose(-2, -1)) * self.scale
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)


class Tiny(nn.Module):
    def __init__(self, config=CONFIG):
        super().__init__()
        self.embed = nn.Linear(8, config["n_embd"])
        self.attn = SelfAttention(config)
        self.head = nn.Linear(config["n_embd"], 4)

    def forward(self, x):
        h = self.embed(x)
        return self.head(h + self.attn(h))


def tiny():
    torch.manual_seed(0)
    return Tiny().eval()
'''


def test_a_hand_written_attention_keeping_its_heads_as_n_head_gets_its_scale_bug_named(tmp_path, monkeypatch):
    """An attention told by n_head and n_embd (nanoGPT's names, set from a config dict): the
    attention causes knew num_heads, num_attention_heads and heads only, so its port's scale of
    1/sqrt(n_embd) was flagged and never named."""
    torch = pytest.importorskip("torch")
    with user_module(tmp_path, monkeypatch, "handattention", USER_ATTENTION):
        import handattention

        port = handattention.tiny()
        port.attn.scale = 1.0 / math.sqrt(port.attn.n_embd)
        x = np.random.default_rng(0).normal(size=(2, 6, 8)).astype(np.float32)
        with torch.no_grad():
            calls, out = record(port, {"x": x})
        file = write_arrays(tmp_path / "port.safetensors", activations(calls, out))
        inputs = str(write_arrays(tmp_path / "x.npz", {"x": x}))
        (judged,) = run_model(ModelRun("handattention:tiny", inputs, activations_files={"p": str(file)})).ports
    cause = {r.path: r for r in judged.layers}["attn"].cause
    assert cause.name == "attention scale" and cause.explains, cause
    assert cause.words.startswith("the attention scale 1/sqrt(d_model) for 1/sqrt(head_dim)"), cause.words
    assert abs(cause.parameters["factor"] - 0.5) <= 0.01, cause


USER_CNN = '''
import torch
import torch.nn.functional as F
from torch import nn


class Conv(nn.Module):
    """A convolution by hand: its kernel and shift under its own names, "same" padding in forward."""

    def __init__(self, inputs, outputs):
        super().__init__()
        self.kernel = nn.Parameter(torch.randn(outputs, inputs, 3, 3) / 3)
        self.shift = nn.Parameter(torch.randn(outputs) / 4)

    def forward(self, x):
        return F.conv2d(x, self.kernel, self.shift, padding=1)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = Conv(3, 8)
        self.second = Conv(8, 8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        h = torch.relu(self.second(torch.relu(self.first(x))))
        return self.head(h.mean((2, 3)))


def cnn():
    torch.manual_seed(0)
    return CNN().eval()
'''


def test_bugs_in_a_hand_written_convolution_are_named(tmp_path, monkeypatch):
    """A convolution written with F.conv2d and its own parameter names: a port that drops its bias,
    or stores its kernel in bfloat16, was flagged and never named (the entries matched Conv2d)."""
    torch = pytest.importorskip("torch")
    with user_module(tmp_path, monkeypatch, "handcnn", USER_CNN):
        import handcnn

        port = handcnn.cnn()
        with torch.no_grad():
            port.first.shift.zero_()
            port.second.kernel.copy_(port.second.kernel.to(torch.bfloat16).float())
        x = np.random.default_rng(0).normal(size=(2, 3, 8, 8)).astype(np.float32)
        with torch.no_grad():
            calls, out = record(port, {"x": x})
        file = write_arrays(tmp_path / "port.safetensors", activations(calls, out))
        inputs = str(write_arrays(tmp_path / "x.npz", {"x": x}))
        (judged,) = run_model(ModelRun("handcnn:cnn", inputs, activations_files={"p": str(file)})).ports
    rows = {r.path: r for r in judged.layers}
    assert rows["first"].cause.name == "missing bias" and rows["first"].cause.explains
    assert rows["second"].cause.name == "weights in bfloat16" and rows["second"].cause.explains
    assert rows["second"].cause.words == "its weights stored in bfloat16"


def test_probing_a_module_leaves_its_state_as_it_was(user):
    """A forward that keeps state (a step count, a running buffer): the probe runs it on a copy
    sharing the parameters, so the user's module is as it was."""
    torch = pytest.importorskip("torch")

    from accuracy.workflows.model.kinds import kind_of

    class Stateful(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 3))
            self.register_buffer("seen", torch.zeros(()))
            self.steps = 0

        def forward(self, x):
            self.steps += 1
            self.seen += 1
            return x @ self.w.t()

    module = Stateful()
    weight = module.w.detach().clone()
    assert kind_of(module).name == "Linear" and kind_of(module).weight == "w"
    assert module.steps == 0 and float(module.seen) == 0.0 and torch.equal(module.w, weight)
