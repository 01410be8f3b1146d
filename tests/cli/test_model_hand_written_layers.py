"""`opbench model` on a CNN whose BatchNorms, pools, resize and dropout are written by hand, as
users write them (issue 57: modules matched by what they compute, not by torch's class): running
statistics under other names, eps in a config dict or a constant in forward, a norm without an
affine weight, pools through `F.max_pool2d` with their geometry in a config dict, a bilinear
resize through `F.interpolate`, a dropout reading its p from a config. The catalogue matched
nn.BatchNorm2d, nn.MaxPool2d, nn.AvgPool2d, nn.Upsample and nn.Dropout by class, so a bug in any of
these was flagged and never named, and a hand-written BatchNorm got the typical tier where
torch's gets the registry's batch_norm."""

from __future__ import annotations

import re

import numpy as np
import pytest
from user_modules import user_module

from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.activations_file import activations
from accuracy.workflows.model.rows import UnitRow
from accuracy.workflows.model.sweep import ModelRun, run_model
from accuracy.workflows.model.trace import record

USER_CNN = '''
import math

import torch
import torch.nn.functional as F
from torch import nn

CONFIG = {"bn": {"eps": 1e-5}, "pool": {"kernel": 3, "stride": 2, "padding": 1}, "drop": 0.25,
          "resize": {"scale": 2, "corners": False}}


class BatchNorm(nn.Module):
    """Running statistics as mu and sigma2, the affine as gamma and beta, eps from a config dict."""

    def __init__(self, channels, config):
        super().__init__()
        self.config = config
        self.gamma = nn.Parameter(1 + torch.rand(channels) / 2)
        self.beta = nn.Parameter(torch.randn(channels) / 4)
        self.register_buffer("mu", torch.randn(channels) / 4)
        self.register_buffer("sigma2", 0.5 + torch.rand(channels))

    def forward(self, x):
        shape = (1, -1, 1, 1)
        scale = self.gamma.view(shape) / torch.sqrt(self.sigma2.view(shape) + self.config["eps"])
        return (x - self.mu.view(shape)) * scale + self.beta.view(shape)


class PlainNorm(nn.Module):
    """No affine weight; eps a constant in forward."""

    def __init__(self, channels):
        super().__init__()
        self.register_buffer("avg", torch.randn(channels) / 4)
        self.register_buffer("var", 0.5 + torch.rand(channels))

    def forward(self, x):
        return (x - self.avg[:, None, None]) * torch.rsqrt(self.var[:, None, None] + 1e-3)


class MaxPool(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config

    def forward(self, x):
        c = self.config
        return F.max_pool2d(x, c["kernel"], c["stride"], c["padding"])


class AvgPool(nn.Module):
    def forward(self, x):
        return F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)


class Resize(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config

    def forward(self, x):
        c = self.config
        return F.interpolate(x, scale_factor=c["scale"], mode="bilinear", align_corners=c["corners"])


class Drop(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config

    def forward(self, x):
        return F.dropout(x, self.config["drop"], self.training)


class GlobalPool(nn.Module):
    def forward(self, x):
        return x.mean((2, 3), keepdim=True)


class Net(nn.Module):
    def __init__(self, config=CONFIG):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = BatchNorm(8, config["bn"])
        self.pool = MaxPool(config["pool"])
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = PlainNorm(8)
        self.avg = AvgPool()
        self.up = Resize(config["resize"])
        self.drop = Drop(config)
        self.gap = GlobalPool()
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        h = self.pool(torch.relu(self.bn1(self.conv1(x))))
        h = self.up(self.avg(torch.relu(self.bn2(self.conv2(h)))))
        return self.head(self.gap(self.drop(h)).flatten(1))


def net():
    torch.manual_seed(0)
    return Net().eval()
'''


@pytest.fixture
def user(tmp_path, monkeypatch):
    with user_module(tmp_path, monkeypatch, "handcnn_layers", USER_CNN):
        import handcnn_layers

        yield handcnn_layers


def _judged(user, tmp_path, port) -> dict[str, UnitRow]:
    """The layers `opbench model handcnn_layers:net` reports for `port`'s activations file."""
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).normal(size=(2, 3, 12, 12)).astype(np.float32)
    with torch.no_grad():
        calls, out = record(port, {"x": x})
    file = write_arrays(tmp_path / "port.safetensors", activations(calls, out))
    inputs = str(write_arrays(tmp_path / "x.npz", {"x": x}))
    (judged,) = run_model(ModelRun("handcnn_layers:net", inputs, activations_files={"p": str(file)})).ports
    return {r.path: r for r in judged.layers}


def test_hand_written_layers_are_known_by_what_they_compute(user):
    """Each hand-written layer as torch's module of the same geometry: the BatchNorm's tensors and
    eps (from its config, from a constant in forward), each pool's kernel, stride and padding, the
    resize's mode and scale, the dropout's p."""
    from accuracy.workflows.model.causes.normalization import norm_eps
    from accuracy.workflows.model.kinds import as_torch, described, kind_of

    model = user.net()
    assert described(model.bn1) == "BatchNorm (a BatchNorm2d)"
    assert (kind_of(model.bn1).weight, kind_of(model.bn1).bias) == ("gamma", "beta")
    assert as_torch(model.bn1).running_var.data_ptr() == model.bn1.sigma2.data_ptr()  # its own, shared
    assert norm_eps(model.bn1) == 1e-5
    assert described(model.bn2) == "PlainNorm (a BatchNorm2d)" and as_torch(model.bn2).weight is None
    assert norm_eps(model.bn2) == 1e-3
    pool, avg, up = as_torch(model.pool), as_torch(model.avg), as_torch(model.up)
    assert (type(pool).__name__, pool.kernel_size, pool.stride, pool.padding, pool.ceil_mode) == (
        "MaxPool2d", 3, 2, 1, False)  # fmt: skip
    assert (type(avg).__name__, avg.kernel_size, avg.stride, avg.padding, avg.count_include_pad) == (
        "AvgPool2d", 3, 2, 1, False)  # fmt: skip
    assert (up.mode, up.align_corners, tuple(up.scale_factor)) == ("bilinear", False, (2.0, 2.0))
    assert described(model.drop) == "Drop (a Dropout)" and as_torch(model.drop).p == 0.25
    assert described(model.gap) == "GlobalPool (a AdaptiveAvgPool2d)"


def test_probing_a_dropout_leaves_the_users_random_state_as_it_was(user):
    """The dropout probe runs it in train mode on a forked, seeded random state."""
    torch = pytest.importorskip("torch")
    from accuracy.workflows.model.kinds import kind_of

    drop = user.net().drop
    torch.manual_seed(7)
    wanted = torch.rand(3)
    torch.manual_seed(7)
    assert kind_of(drop).name == "Dropout"
    assert torch.equal(torch.rand(3), wanted)


def test_correct_hand_written_layers_flag_nothing_and_the_batchnorm_gets_torchs_tier(user, tmp_path):
    """The model's own float32 run as a port: every unit within rounding, no cause named; the
    BatchNorm with torch's eps and an affine is judged by the registry's batch_norm, as
    nn.BatchNorm2d is."""
    rows = _judged(user, tmp_path, user.net())
    assert all(r.verdict == "within rounding" for r in rows.values()), {
        p: (r.verdict, r.cause) for p, r in rows.items() if r.verdict != "within rounding"
    }
    assert rows["bn1"].tier == "registry op batch_norm"
    assert rows["bn2"].tier != "registry op batch_norm"  # eps 1e-3, no affine: not the registry's op


def test_bugs_injected_into_hand_written_layers_are_named(user, tmp_path):
    """A port with a bug in each hand-written layer: the BatchNorm's eps in its config, the other
    norm in train mode (batch statistics), the max pool padded as TensorFlow's "same", the average
    pool counting its padding, the resize with align_corners=True, the dropout left in train mode.
    Each unit flagged and its bug named (every one was flagged and never named: the entries
    matched torch's classes; a dropout in train mode was named on no port, torch's own either)."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    class SamePadded(torch.nn.Module):
        def forward(self, x):
            return F.max_pool2d(F.pad(x, (0, 1, 0, 1), value=-float("inf")), 3, 2)

    class Counted(torch.nn.Module):
        def forward(self, x):
            return F.avg_pool2d(x, 3, 2, 1, count_include_pad=True)

    class BatchStatistics(torch.nn.Module):
        def forward(self, x):
            return F.batch_norm(x, None, None, training=True, eps=1e-3)

    config = {**user.CONFIG, "bn": {"eps": 1e-3}, "resize": {"scale": 2, "corners": True}}
    port = user.Net(config).eval()
    port.load_state_dict(user.net().state_dict())
    port.pool, port.avg, port.bn2 = SamePadded(), Counted(), BatchStatistics()
    port.drop.train()
    rows = _judged(user, tmp_path, port)
    expected = {
        "bn1": ("normalization eps", "BatchNorm eps = 0.001 (Keras' and TensorFlow's default); this model has 1e-05"),
        "bn2": ("train mode", "the model in train mode (batch statistics)"),
        "pool": ("same padding", 'TensorFlow\'s "same" padding (the odd one after) where this MaxPool (a MaxPool2d) '
                 "pads 1 on both sides"),
        "avg": ("count_include_pad", "AvgPool (a AvgPool2d) with count_include_pad=True (the padding counted in the "
                "average)"),
        "up": ("align_corners", "bilinear interpolation with align_corners=True"),
        "drop": ("dropout in train mode", r"Drop \(a Dropout\) left in train mode: \d+% of its elements dropped, "
                 r"the rest scaled by 1/\(1 - 0.25\)"),
    }  # fmt: skip
    for path, (name, words) in expected.items():
        cause = rows[path].cause
        assert rows[path].verdict == "beyond rounding" and cause and cause.explains, (path, cause)
        assert cause.name == name and (cause.words == words or re.fullmatch(words, cause.words)), cause
    assert rows["head"].verdict == "within rounding"


def test_more_bugs_in_hand_written_layers_are_named(user, tmp_path):
    """The norm without an affine weight, its eps a constant in forward, written with torch's
    1e-5; the affine BatchNorm in train mode."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    class TorchEps(torch.nn.Module):
        def __init__(self, norm):
            super().__init__()
            self.avg, self.var = norm.avg, norm.var

        def forward(self, x):
            return (x - self.avg[:, None, None]) * torch.rsqrt(self.var[:, None, None] + 1e-5)

    class BatchStatistics(torch.nn.Module):
        def __init__(self, norm):
            super().__init__()
            self.gamma, self.beta = norm.gamma, norm.beta

        def forward(self, x):
            return F.batch_norm(x, None, None, self.gamma, self.beta, training=True, eps=1e-5)

    port = user.net()
    port.bn1, port.bn2 = BatchStatistics(port.bn1), TorchEps(port.bn2)
    rows = _judged(user, tmp_path, port)
    expected = {
        "bn1": ("train mode", "the model in train mode (batch statistics)"),
        "bn2": ("normalization eps", "PlainNorm eps = 1e-05 (torch's default); this model has 0.001"),
    }
    for path, (name, words) in expected.items():
        cause = rows[path].cause
        assert rows[path].verdict == "beyond rounding" and cause and cause.explains, (path, cause)
        assert (cause.name, cause.words) == (name, words), (path, cause)


def test_a_hand_written_pool_in_the_other_ceil_mode_is_named(user):
    """A port whose max pool keeps the last partial window (ceil_mode=True), its output one row and
    column larger; the layers after it are the model's (as the self-test of causes injects it: an
    activations file of another shape is refused whole)."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from accuracy.workflows.model.ports.file_port import FilePort
    from accuracy.workflows.model.sweep import evaluate_ports
    from accuracy.workflows.model.trace import run_reference

    model = user.net()
    given = {"x": np.random.default_rng(0).normal(size=(2, 3, 12, 12)).astype(np.float32)}
    calls, out = run_reference(model, given, "the inputs")
    arrays = activations(calls, out)
    with torch.no_grad():
        pooled = F.max_pool2d(torch.relu(model.bn1(model.conv1(torch.from_numpy(given["x"])))), 3, 2, 1, ceil_mode=True)
    (result,), _ = evaluate_ports([FilePort("p", arrays | {"pool": pooled.numpy()})], model, given, calls)
    cause = {r.path: r for r in result.layers}["pool"].cause
    assert cause and cause.explains and cause.name == "ceil_mode", cause
    assert cause.words == (
        "MaxPool (a MaxPool2d) with ceil_mode=True (the last partial window kept; this model has ceil_mode=False)"
    )


def test_a_port_that_zeroes_everything_or_scales_everything_is_no_dropout_left_in_train_mode(user):
    """The dropout entry fits the elements a port kept from its output; a share of dropped elements
    no dropout of p gives (all of them, none of them) is refused, never named."""
    torch = pytest.importorskip("torch")
    from accuracy.workflows.model.causes import causes

    (entry,) = [c for c in causes() if c.name == "dropout in train mode"]
    drop = user.net().drop
    x = torch.randn(4, 8, 6, 6, generator=torch.Generator().manual_seed(0))
    for output in (torch.zeros_like(x), x / 0.75):
        with pytest.raises(ValueError, match=r"no dropout of p=0\.25"):
            entry.fit(drop, [x], output.numpy())
    kept = torch.rand(x.shape, generator=torch.Generator().manual_seed(1)) >= 0.25
    assert torch.equal(entry.fit(drop, [x], (x * kept / 0.75).numpy()), kept)
