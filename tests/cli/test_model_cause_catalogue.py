"""The cause catalogue's layout, parameter, precision, activation and normalization entries
(accuracy/workflows/model/causes/): each bug written into a hand port of a zoo model or of
`layered` below (its own code, not the catalogue's), handed over as a runtime's activations,
is named at its module with its parameter; a correct port gets no cause, and a bug no entry
holds gets "no known cause"."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from accuracy.cli.text.model import render
from accuracy.core.dtypes import FORMATS
from accuracy.judge.verdicts import BEYOND, NOT_COMPARED, WITHIN
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.activations_file import activations
from accuracy.workflows.model.causes import explain
from accuracy.workflows.model.causes.layout import _regridded, _tf_same
from accuracy.workflows.model.causes.normalization import NormWritten
from accuracy.workflows.model.ports.file_port import FilePort
from accuracy.workflows.model.report import ModelReport
from accuracy.workflows.model.rows import PortResult
from accuracy.workflows.model.sweep import ModelRun, evaluate_ports, run_model
from accuracy.workflows.model.trace import record, run_reference
from accuracy.workflows.model.unit import NamedCause, leaf_units
from accuracy.workflows.model.zoo import SEED, decoder, example_inputs, small_cnn, small_mixed, small_transformer

LAYERED = "tests.cli.test_model_cause_catalogue:layered"


class Layered(nn.Module):
    """conv (stride 2) -> group norm -> hardswish -> avg pool (padded) -> bilinear upsample ->
    max pool (stride 2) -> flatten -> linear -> hardsigmoid -> two square linears, SiLU between ->
    softmax: one of each module kind the catalogue's entries name that the zoo lacks."""

    def __init__(self, upsample: str = "bilinear", scale: float = 2):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.norm = nn.GroupNorm(2, 4)
        self.hardswish = nn.Hardswish()
        self.avgpool = nn.AvgPool2d(3, stride=1, padding=1)
        self.upsample = nn.Upsample(scale_factor=scale, mode=upsample)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.flatten = nn.Flatten()
        side = (math.floor(4 * scale) - 1) // 2 + 1  # after the max pool
        self.fc1 = nn.Linear(4 * side * side, 16)
        self.hardsigmoid = nn.Hardsigmoid()
        self.fc2, self.act, self.fc3 = nn.Linear(16, 16), nn.SiLU(), nn.Linear(16, 16)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x):
        x = self.maxpool(self.upsample(self.avgpool(self.hardswish(self.norm(self.conv(x))))))
        x = self.hardsigmoid(4 * self.fc1(self.flatten(x)))
        return self.softmax(self.fc3(self.act(self.fc2(x))))


def layered() -> nn.Module:
    torch.manual_seed(SEED)
    return Layered()


def layered_nearest() -> nn.Module:
    """`layered` with torch's (asymmetric) nearest upsampling, by 1.5 (at 2 both conventions agree)."""
    torch.manual_seed(SEED)
    return Layered("nearest", 1.5)


def _port(tmp_path, spec: str, inputs: dict, port) -> PortResult:
    calls, out = record(port.eval(), inputs)
    file = write_arrays(tmp_path / "port.safetensors", activations(calls, out))
    x = write_arrays(tmp_path / "x.npz", inputs)
    (judged,) = run_model(ModelRun(spec, x, activations_files={"port": str(file)})).ports
    return judged


def _layered_inputs() -> dict:
    return {"x": np.random.default_rng(SEED).standard_normal((2, 3, 8, 8)).astype(np.float32)}


# each port below is the model with one bug, written as a port would write it
class _EpsOutsideLayerNorm(nn.LayerNorm):
    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        return centred / (centred.pow(2).mean(-1, keepdim=True).sqrt() + self.eps) * self.weight + self.bias


class _EpsOutsideRMSNorm(nn.Module):
    def __init__(self, norm):
        super().__init__()
        self.weight, self.eps = norm.weight, norm.eps

    def forward(self, x):
        return self.weight * x / (x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps)


class _EpsOutsideBatchNorm(nn.BatchNorm2d):
    def forward(self, x):
        shape = (1, -1, 1, 1)
        y = (x - self.running_mean.view(shape)) / (self.running_var.view(shape).sqrt() + self.eps)
        return y * self.weight.view(shape) + self.bias.view(shape)


class _UnbiasedGroupNorm(nn.GroupNorm):
    def forward(self, x):
        g = x.reshape(x.shape[0], self.num_groups, -1)
        g = (g - g.mean(-1, keepdim=True)) / (g.var(-1, unbiased=True, keepdim=True) + self.eps).sqrt()
        return g.reshape(x.shape) * self.weight.view(1, -1, 1, 1) + self.bias.view(1, -1, 1, 1)


class _KerasHardSigmoid(nn.Hardsigmoid):
    def forward(self, x):
        return torch.clamp(0.2 * x + 0.5, 0, 1)


class _KerasHardSwish(nn.Hardswish):
    def forward(self, x):
        return x * torch.clamp(0.2 * x + 0.5, 0, 1)


class _ChannelsLastLinear(nn.Linear):
    """A Linear given the (C, H, W) flatten whose weight was laid out for (H, W, C)."""

    def forward(self, x):
        return F.linear(x.view(x.shape[0], 4, -1).transpose(1, 2).reshape(x.shape[0], -1), self.weight, self.bias)


class _ChannelsLastFlatten(nn.Flatten):
    def forward(self, x):
        return x.permute(0, 2, 3, 1).flatten(1)


class _SamePaddingConv(nn.Conv2d):
    """TensorFlow's padding="same" at stride 2: all of the padding after, none before."""

    def forward(self, x):
        return F.conv2d(F.pad(x, (0, 1, 0, 1)), self.weight, self.bias, self.stride)


class _AsymmetricBilinear(nn.Upsample):
    """TensorFlow 1's resize_bilinear (half_pixel_centers=False): source = destination / 2."""

    def forward(self, x):
        n, _, h, w = x.shape
        ys, xs = torch.arange(2 * h) / 2, torch.arange(2 * w) / 2
        grid_y, grid_x = torch.meshgrid(ys / (h - 1) * 2 - 1, xs / (w - 1) * 2 - 1, indexing="ij")
        grid = torch.stack((grid_x, grid_y), -1).expand(n, -1, -1, -1)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=True)


def _tf32(t):
    mantissa, exponent = torch.frexp(t)
    return torch.ldexp(torch.round(mantissa * 2**11) / 2**11, exponent)


class _TF32Conv(nn.Conv2d):
    def forward(self, x):
        return F.conv2d(_tf32(x), _tf32(self.weight), self.bias, self.stride, self.padding)


class _Bfloat16InputLinear(nn.Linear):
    def forward(self, x):
        return F.linear(x.bfloat16().float(), self.weight, self.bias)


class _Bfloat16LayerNorm(nn.LayerNorm):
    def forward(self, x):
        low = (t.bfloat16() for t in (x, self.weight, self.bias))
        x, weight, bias = low
        return F.layer_norm(x, self.normalized_shape, weight, bias, self.eps).float()


class _Bfloat16ProductsLinear(nn.Linear):
    """A Linear under bfloat16 autocast, accumulating in float32: both factors rounded."""

    def forward(self, x):
        return F.linear(x.bfloat16().float(), self.weight.bfloat16().float(), self.bias)


class _Float16InputGELU(nn.GELU):
    def forward(self, x):
        return F.gelu(x.half().float())


class _SamePaddingMaxPool(nn.MaxPool2d):
    def forward(self, x):
        return F.max_pool2d(F.pad(x, (0, 1, 0, 1), value=-math.inf), self.kernel_size, self.stride)


class _Float16Softmax(nn.Softmax):
    def forward(self, x):
        return torch.softmax(x.half(), self.dim).float()


def _swap(name: str, make, **replaced):
    """The zoo or `layered` model with modules replaced (a class: built from the reference's state)."""

    def port():
        model = make()
        for path, replacement in replaced.items():
            old = model.get_submodule(path)
            if callable(replacement) and not isinstance(replacement, nn.Module):
                replacement = replacement(old)
            setattr(model, path, replacement)
        return model

    return name, port


def _as(cls, **kwargs):
    """A replacement of class `cls` with the module's own configuration and state."""

    def build(old):
        new = cls.__new__(cls)
        new.__dict__ = {**old.__dict__, **kwargs}
        new.__dict__["_parameters"] = dict(old._parameters)
        new.__dict__["_buffers"] = dict(old._buffers)
        return new

    return build


def _edited(name: str, make, edit):
    def port():
        model = make()
        with torch.no_grad():
            edit(model)
        return model

    return name, port


ROWS = [
    # (id, (model, port factory), module, cause, parameter)
    ("layernorm-eps-outside", _swap("small_transformer", small_transformer, norm=_as(_EpsOutsideLayerNorm)), "norm",
     "eps outside the square root", None),
    ("rmsnorm-eps-outside", _edited("decoder", decoder, lambda m: setattr(m, "norm", _EpsOutsideRMSNorm(m.norm))),
     "norm", "eps outside the square root", None),
    ("batchnorm-eps-outside", _swap("small_cnn", small_cnn, bn1=_as(_EpsOutsideBatchNorm)), "bn1",
     "eps outside the square root", None),
    ("groupnorm-unbiased", _swap("layered", layered, norm=_as(_UnbiasedGroupNorm)), "norm", "unbiased variance",
     None),
    ("gelu-swapped-for-silu", _swap("small_transformer", small_transformer, gelu=nn.SiLU()), "gelu",
     "another activation", "SiLU"),
    ("silu-swapped-for-hardswish", _swap("layered", layered, act=nn.Hardswish()), "act", "another activation",
     "Hardswish"),
    ("keras-hardsigmoid", _swap("layered", layered, hardsigmoid=_KerasHardSigmoid()), "hardsigmoid",
     "hard sigmoid slope", 0.2),
    ("keras-hardswish", _swap("layered", layered, hardswish=_KerasHardSwish()), "hardswish", "hard sigmoid slope",
     0.2),
    ("missing-bias", _edited("small_transformer", small_transformer, lambda m: m.up.bias.zero_()), "up",
     "missing bias", None),
    ("bias-from-another-layer",
     _edited("small_transformer", small_transformer, lambda m: m.down.bias.copy_(m.proj.bias)), "down",
     "bias from another layer", "proj"),
    ("weight-from-another-layer", _edited("layered", layered, lambda m: m.fc3.weight.copy_(m.fc2.weight)), "fc3",
     "weight from another layer", "fc2"),
    ("channels-last-flatten", _swap("small_cnn", small_cnn, flatten=_ChannelsLastFlatten()), "flatten",
     "channels-last flatten", None),
    ("channels-last-flatten-before-linear", _swap("small_cnn", small_cnn, fc=_as(_ChannelsLastLinear)), "fc",
     "channels-last flatten before a Linear", 4),
    ("same-padding-conv", _swap("small_cnn", small_cnn, conv1=_as(_SamePaddingConv)), "conv1", "same padding", None),
    ("count-include-pad", _swap("layered", layered, avgpool=nn.AvgPool2d(3, 1, 1, count_include_pad=False)),
     "avgpool", "count_include_pad", None),
    ("align-corners", _swap("layered", layered, upsample=nn.Upsample(scale_factor=2, mode="bilinear",
                                                                     align_corners=True)),
     "upsample", "align_corners", None),
    ("asymmetric-bilinear", _swap("layered", layered, upsample=_as(_AsymmetricBilinear)), "upsample",
     "interpolation convention", None),
    ("half-pixel-nearest", _swap("layered_nearest", layered_nearest, upsample=nn.Upsample(scale_factor=1.5,
                                                                                         mode="nearest-exact")),
     "upsample", "interpolation convention", None),
    ("same-padding-maxpool", _swap("layered", layered, maxpool=_as(_SamePaddingMaxPool)), "maxpool", "same padding",
     None),
    ("softmax-axis", _swap("layered", layered, softmax=nn.Softmax(dim=0)), "softmax", "softmax axis", 0),
    ("transposed-weight",
     _edited("small_transformer", small_transformer, lambda m: m.proj.weight.copy_(m.proj.weight.T.clone())), "proj",
     "transposed weight", None),
    ("tf32-products", _swap("small_cnn", small_cnn, conv2=_as(_TF32Conv)), "conv2", "products in tfloat32", None),
    ("bfloat16-products", _swap("small_transformer", small_transformer, down=_as(_Bfloat16ProductsLinear)), "down",
     "products in bfloat16", None),
    ("float16-input", _swap("small_transformer", small_transformer, gelu=_Float16InputGELU()), "gelu",
     "inputs in float16", None),
    ("bfloat16-input", _swap("small_transformer", small_transformer, up=_as(_Bfloat16InputLinear)), "up",
     "inputs in bfloat16", None),
    ("layernorm-in-bfloat16", _swap("small_transformer", small_transformer, norm=_as(_Bfloat16LayerNorm)), "norm",
     "computed in bfloat16", None),
    ("softmax-in-float16", _swap("layered", layered, softmax=_Float16Softmax(dim=-1)), "softmax", "computed in float16",
     None),
]  # fmt: skip


def _spec(name: str) -> str:
    return (
        f"tests.cli.test_model_cause_catalogue:{name}" if "layered" in name else f"accuracy.workflows.model.zoo:{name}"
    )


def _inputs(name: str) -> dict:
    return _layered_inputs() if "layered" in name else example_inputs(name)


@pytest.mark.sweep  # one whole-model run per case: the first in `make test-fast`, all in `make test`
@pytest.mark.parametrize(("port", "path", "cause", "parameter"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_each_injected_bug_is_named_at_its_module(tmp_path, port, path, cause, parameter):
    name, make = port
    judged = _port(tmp_path, _spec(name), _inputs(name), make())
    assert judged.first_not_within == path, [(r.path, r.verdict) for r in judged.layers]
    found = next(r for r in judged.layers if r.path == path).cause
    assert found.explains and found.name == cause and found.verdict == WITHIN, found
    if parameter is not None:
        (value,) = found.parameters.values()
        if isinstance(parameter, float):
            assert abs(value - parameter) <= 0.1 * parameter, value
        else:
            assert value == parameter


def test_equal_explanations_are_both_said(tmp_path):
    """TF32 and float16 have the same precision: a convolution on TF32-rounded factors is explained by both."""
    judged = _port(
        tmp_path, _spec("small_cnn"), example_inputs("small_cnn"), _swap("", small_cnn, conv2=_as(_TF32Conv))[1]()
    )
    found = next(r for r in judged.layers if r.path == "conv2").cause
    assert found.name == "products in tfloat32"
    assert found.alternatives == (
        NamedCause("products in float16", "its products rounded to float16 (input and weight; autocast or TF32)", {}),
    )


def test_a_correct_port_of_each_kind_gets_no_cause(tmp_path):
    judged = _port(tmp_path, LAYERED, _layered_inputs(), layered())
    assert judged.flagged == 0 and judged.compared == 13, [(r.path, r.verdict) for r in judged.layers]
    assert all(r.cause is None for r in judged.layers)


def test_a_bug_no_entry_holds_gets_the_nearest_and_no_cause(tmp_path):
    """fc2's weight scaled by 1 + 2**-10: flagged, and no entry of the catalogue (a bias, another
    layer's weight, a transposed or regridded weight, low-precision products) explains it."""
    judged = _port(
        tmp_path, LAYERED, _layered_inputs(), _edited("", layered, lambda m: m.fc2.weight.mul_(1 + 2**-10))[1]()
    )
    assert judged.first_not_within == "fc2"
    found = next(r for r in judged.layers if r.path == "fc2").cause
    assert not found.explains and found.words is not None and found.ratio > 1, found


def test_without_the_model_the_flatten_grid_is_fitted_from_the_features():
    """Where the flatten before a Linear is not in view (no calls around the unit), the channels-last
    entry tries every split of in_features and finds fc1's (4, 16); the entries that read other
    layers have none to read and do not apply."""
    model = layered().eval()
    calls, _ = record(model, _layered_inputs())
    unit = next(u for u in leaf_units(calls) if u.key == "fc1")
    wrong = _as(_ChannelsLastLinear)(model.fc1)
    inputs = [t.clone() for t in unit.calls[0].inputs]
    with torch.no_grad():
        output = wrong(inputs[0]).numpy()
    found = explain(unit, inputs, FORMATS["float32"], "port", output, None)
    assert found.explains and found.name == "channels-last flatten before a Linear"
    assert found.parameters == {"grid_rows": 4} and found.alternatives == ()


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 6), st.integers(2, 6), st.integers(1, 3))
def test_a_regridded_linear_is_the_linear_on_the_other_flatten(channels, spatial, outputs):
    """The changed reference of the channels-last entry: the Linear on the (C, S) flatten read as (S, C)."""
    torch.manual_seed(channels * 100 + spatial * 10 + outputs)
    linear = nn.Linear(channels * spatial, outputs).double()
    x = torch.randn(3, channels, spatial, dtype=torch.float64)
    with torch.no_grad():
        expected = linear(x.transpose(1, 2).reshape(3, -1))
        assert torch.allclose(_regridded(linear, channels)(x.reshape(3, -1)), expected, rtol=0, atol=1e-12)
        assert math.isclose(
            float(_regridded(_regridded(linear, channels), spatial).weight.sub(linear.weight).abs().max()), 0
        )


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 40), st.integers(1, 7), st.integers(1, 4), st.integers(1, 3))
def test_tensorflow_same_padding_keeps_ceil_size_over_stride(size, kernel, stride, dilation):
    """TensorFlow's "same": the output has ceil(size / stride) elements, the odd pad after."""
    before, after = _tf_same(size, kernel, stride, dilation)
    assert (size + before + after - (kernel - 1) * dilation - 1) // stride + 1 == math.ceil(size / stride)
    assert after - before in (0, 1)


@pytest.mark.parametrize(
    "norm", [nn.LayerNorm(6), nn.GroupNorm(3, 6), nn.BatchNorm2d(6), nn.RMSNorm(6, eps=1e-5)], ids=type
)
def test_a_norm_written_out_is_the_norm(norm):
    """The entries' changed references differ from the module only by their variant."""
    torch.manual_seed(0)
    with torch.no_grad():
        for tensor in (*norm.parameters(), *norm.buffers()):
            if tensor.is_floating_point():
                tensor.uniform_(0.5, 1.5)
    channels_first = isinstance(norm, (nn.GroupNorm, nn.BatchNorm2d))
    x = torch.randn(2, 6, 3, 3, dtype=torch.float64) if channels_first else torch.randn(2, 4, 6, dtype=torch.float64)
    norm = norm.double().eval()
    with torch.no_grad():
        assert torch.allclose(NormWritten(norm)(x), norm(x), rtol=1e-12, atol=1e-12)


class _CroppedFlatten(nn.Flatten):
    """A port's flatten fitted to its pool's larger output: the layer's (4, 4) corner kept."""

    def forward(self, x):
        return x[..., :4, :4].flatten(1)


class _CroppedSoftmax(nn.Softmax):
    def forward(self, x):
        return super().forward(x[..., :4, :4])


class _PaddedFlatten(nn.Flatten):
    """A port's flatten fitted to its pool's smaller output: zeros to the layer's (4, 4)."""

    def forward(self, x):
        return F.pad(x, (0, 4 - x.shape[-1], 0, 4 - x.shape[-2])).flatten(1)


def _report(name: str, port: nn.Module) -> ModelReport:
    """The port's activations judged as `opbench model` judges a runtime's (an activations file
    itself must hold the model's shapes, so the port is handed over as the self-test hands it)."""
    model, inputs = {"layered": layered, "small_mixed": small_mixed}[name]().eval(), _inputs(name)
    calls, _ = run_reference(model, inputs, name)
    results, failed = evaluate_ports(
        [FilePort("port", activations(*record(port.eval(), inputs)))], model, inputs, calls
    )
    return ModelReport(name, "eval", {k: list(v.shape) for k, v in inputs.items()}, results, failed)


CEIL_MODE_ROWS = [
    # (id, model, port, the pool, its kind): ceil_mode flipped where the last partial window adds a row and column
    ("maxpool", "layered", _swap("", layered, maxpool=nn.MaxPool2d(3, 2, 1, ceil_mode=True),
                                 flatten=_CroppedFlatten())[1], "maxpool", "MaxPool2d"),
    ("avgpool", "small_mixed", _swap("", small_mixed, pool=nn.AvgPool2d(3, 2, 1, ceil_mode=True),
                                     softmax=_CroppedSoftmax(dim=-1))[1], "pool", "AvgPool2d"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "make", "path", "kind"), [r[1:] for r in CEIL_MODE_ROWS], ids=[r[0] for r in CEIL_MODE_ROWS]
)
def test_a_flipped_ceil_mode_is_named_at_its_pool_of_another_shape(tmp_path, name, make, path, kind):
    report = _report(name, make())
    shape = "the port's output has shape (2, 4, 5, 5), the layer's (2, 4, 4, 4)"
    words = f"{kind} with ceil_mode=True (the last partial window kept; this model has ceil_mode=False)"
    (port,) = report.as_dict()["ports"]
    row = next(r for r in port["layers"] if r["path"] == path)
    assert port["first_not_within"] == path and port["flagged"] == 1, [
        (r["path"], r["verdict"]) for r in port["layers"]
    ]
    assert row["verdict"] == BEYOND and row["reason"] == shape, row
    cause = row["cause"]
    assert cause["name"] == "ceil_mode" and cause["explains"] and cause["verdict"] == WITHIN, cause
    assert cause["words"] == words and cause["alternatives"] == []
    assert not report.within_rounding
    text = render(report, explain=True)
    assert f"  {path}: explained by {words}; {shape}" in text
    assert f"first not within rounding: {path} ({kind}): beyond rounding: explained by {words}; {shape}" in text


def test_a_correct_port_of_a_pool_keeps_its_rows(tmp_path):
    """Flipping ceil_mode changes small_mixed's pool; its correct port has nothing to explain."""
    (port,) = _report("small_mixed", small_mixed()).as_dict()["ports"]
    assert port["flagged"] == 0 and port["not_compared"] == 0
    assert all(r.get("cause") is None for r in port["layers"])


def test_a_shape_no_cause_explains_stays_not_compared(tmp_path):
    # a max pool without its padding: (8 - 3) // 2 + 1 = 3 rows, neither ceil_mode nor "same" padding's
    port = _swap("", layered, maxpool=nn.MaxPool2d(3, 2, 0), flatten=_PaddedFlatten())[1]()
    (judged,) = _report("layered", port).as_dict()["ports"]
    row = next(r for r in judged["layers"] if r["path"] == "maxpool")
    assert row["verdict"] == NOT_COMPARED and "cause" not in row, row
    assert row["reason"].startswith("the port's output has shape (2, 4, 3, 3), the layer's (2, 4, 4, 4)"), row
    assert "explained" not in row["reason"]
