"""The deploy runtimes as ports of `opbench model` (#43): ExecuTorch (XNNPACK, portable kernels),
OpenVINO (f32, and the f16 precision hint judged as float16), LiteRT absent with its reason.

A correct conversion of the zoo's small models flags no layer; a bug injected into what the
converter is given (a BatchNorm eps, a weight rounded to bfloat16) is named at its layer, in
isolation and as the first layer not within rounding."""

from __future__ import annotations

import json
import os
import shlex

import numpy as np
import pytest
import torch
from cli_runner import run_main
from docs_pages import sh_block_after
from hidden_tools import hide
from user_modules import user_module

from accuracy.backends import cpu_levels
from accuracy.core.files import cache_home
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.ports import build_port, deploy, executorch_port, openvino_port
from accuracy.workflows.model.ports.executorch_port import ExecuTorchPort
from accuracy.workflows.model.ports.openvino_port import OpenVinoPort
from accuracy.workflows.model.rows import PortResult
from accuracy.workflows.model.sweep import ModelRun, run_model
from accuracy.workflows.model.trace import load_model, record
from accuracy.workflows.model.zoo import example_inputs

SMALL_CNN = "accuracy.workflows.model.zoo:small_cnn"
SMALL_TRANSFORMER = "accuracy.workflows.model.zoo:small_transformer"
CNN_INPUTS = "x=2x3x8x8"
TRANSFORMER_INPUTS = "x=2x4x16"
PORT_CLASSES = {
    "openvino": OpenVinoPort,
    "openvino-f16": OpenVinoPort,
    "executorch": ExecuTorchPort,
    "executorch-portable": ExecuTorchPort,
}
# the end-to-end conversions on one worker: ExecuTorch's exporter and runtime (and OpenVINO) are
# imported once per `make test` instead of once on each worker (ExecuTorch alone ~10 CPU-s). The
# tests that convert in a child process (LiteRT's environment, the terminal's) import neither
# here: they run on any worker beside the group, off its one worker's serial path.
SLOW = pytest.mark.slow
RUNTIMES = pytest.mark.xdist_group("deploy-runtimes")


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


needs_openvino = pytest.mark.skipif(not _has("openvino"), reason="openvino not installed (the deploy extra)")


# what a port needs of the CPU, as OpenVINO's CPU plugin reports it (any one of them)
CPU_NEEDS = {"openvino-f16": ("FP16", "BF16")}


def _require(port: str, needs: tuple[str, ...] = ()) -> None:
    """Skip where the port's runtime is not installed, or where the CPU lacks what the test needs
    (`needs`, or the port's own CPU_NEEDS), asking the probe the port decides by. On a CPU where
    the port cannot run, it is absent with the reason that probe gives."""
    if not _has("openvino" if port.startswith("openvino") else "executorch"):
        pytest.skip(f"{port}: its runtime is not installed (the deploy extra)")
    needs = needs or CPU_NEEDS.get(port, ())
    capabilities = openvino_port.cpu_capabilities() if needs else []
    found = openvino_port.precision(reduced=port != "openvino") if needs else None
    if isinstance(found, str):  # the CPU lacks f16 and bf16, or ONEDNN_MAX_CPU_ISA keeps oneDNN from them
        assert build_port(port, load_model(SMALL_CNN), example_inputs("small_cnn")) == found
        if not set(openvino_port.HINTS) & set(capabilities):
            assert ", ".join(capabilities) in found
        pytest.skip(f"{port}: {found}")
    if needs and not set(needs) & set(capabilities):
        pytest.skip(
            f"{port}: needs a CPU with {' or '.join(needs)} (OpenVINO's CPU capabilities: {', '.join(capabilities)})"
        )


def _inject(monkeypatch, port: str, bug) -> None:
    """`bug(module)` applied to every module the port converts (the copies it is given)."""
    cls = PORT_CLASSES[port]
    real = cls.convert

    def buggy(self, module, example):
        for m in module.modules():
            bug(m)
        return real(self, module, example)

    monkeypatch.setattr(cls, "convert", buggy)


def _batch_norm_eps(module) -> None:
    if isinstance(module, torch.nn.BatchNorm2d):
        module.eps = 0.1  # the reference's is 1e-5


def _up_weight_in_bfloat16(module) -> None:
    """small_transformer's `up` (the only 16 -> 32 Linear) with its weight rounded to bfloat16."""
    if isinstance(module, torch.nn.Linear) and module.weight.shape == (32, 16):
        module.weight.data = module.weight.data.to(torch.bfloat16).float()


def _port(spec: str, inputs: str, port: str) -> PortResult:
    report = run_model(ModelRun(spec, inputs, [port]))
    assert report.absent == []
    (result,) = report.ports
    return result


def _flags_nothing(result: PortResult, units: int) -> None:
    assert (result.flagged, result.not_compared, result.compared) == (0, 0, units)
    own, port = result.output["reference_relative_error"], result.output["relative_error"]
    assert port < 4 * own + 1e-6, (port, own)  # end to end, within a few times PyTorch's own error


def _names(result: PortResult, layer: str) -> None:
    flagged = [row.path for row in result.layers if row.verdict != "within rounding"]
    assert result.first_not_within == layer and flagged == [layer], flagged


@needs_openvino
def test_openvino_converts_small_cnn_within_rounding_and_reads_every_layer_end_to_end():
    result = _port(SMALL_CNN, CNN_INPUTS, "openvino")
    assert result.dtype == "float32" and "inference precision f32" in result.description
    _flags_nothing(result, 8)
    # conv1 is folded into bn1's node (no node of its own), dropout has none: the rest show theirs
    shown = [row.path for row in result.layers if row.propagated is not None]
    assert shown == ["bn1", "relu", "conv2", "relu#2", "flatten", "fc"]


@needs_openvino
def test_openvino_names_a_changed_batch_norm_eps(monkeypatch):
    _inject(monkeypatch, "openvino", _batch_norm_eps)
    _names(_port(SMALL_CNN, CNN_INPUTS, "openvino"), "bn1")


@SLOW
@RUNTIMES
@pytest.mark.parametrize(
    ("port", "shown"),
    [
        ("openvino-f16", ["bn1", "relu", "conv2", "relu#2", "flatten", "fc"]),
        ("executorch", []),  # XNNPACK takes the whole model as one delegate: its output only
        ("executorch-portable", ["conv1", "bn1", "relu", "conv2", "relu#2", "dropout", "fc"]),  # from ETDump
    ],
)
def test_the_other_deploy_ports_convert_small_cnn_within_rounding(port, shown):
    _require(port)
    result = _port(SMALL_CNN, CNN_INPUTS, port)
    _flags_nothing(result, 8)
    assert [row.path for row in result.layers if row.propagated is not None] == shown


@SLOW
@RUNTIMES
@pytest.mark.parametrize(
    ("port", "bug", "model", "inputs", "layer"),
    [
        ("openvino-f16", _batch_norm_eps, SMALL_CNN, CNN_INPUTS, "bn1"),
        ("executorch-portable", _batch_norm_eps, SMALL_CNN, CNN_INPUTS, "bn1"),
        # small_transformer's other four layers stay within rounding: the correct export of it
        ("openvino", _up_weight_in_bfloat16, SMALL_TRANSFORMER, TRANSFORMER_INPUTS, "up"),
        ("executorch", _up_weight_in_bfloat16, SMALL_TRANSFORMER, TRANSFORMER_INPUTS, "up"),
    ],
    ids=["openvino-f16-bn-eps", "executorch-portable-bn-eps", "openvino-bf16-weight", "executorch-bf16-weight"],
)
def test_an_injected_bug_is_named_at_its_layer(monkeypatch, port, bug, model, inputs, layer):
    _require(port)
    _inject(monkeypatch, port, bug)
    _names(_port(model, inputs, port), layer)


@SLOW
@RUNTIMES
def test_an_in_place_activation_converts_out_of_place():
    """resnet18's ReLU(inplace=True) alone writes its own input; converted out of place it is a unit."""
    _require("executorch")
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(inplace=True)).eval()
    inputs = {"input": np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)}
    calls, _ = record(model, inputs)
    port = build_port("executorch", model, inputs)
    units = port.units(calls)
    assert [u.reason for u in units] == ["", ""]
    relu = units[1]
    expected = torch.relu(relu.calls[0].inputs[0]).numpy()
    assert np.array_equal(port.isolated(relu, relu.calls[0].inputs), expected)


class _I0(torch.nn.Module):
    def forward(self, x):
        return torch.special.i0(x)  # in neither OpenVINO's PyTorch frontend nor ExecuTorch's core ATen


@SLOW  # 15 conversions; the edit loop keeps the fallback's test below
@pytest.mark.parametrize("port", ["openvino", pytest.param("executorch-portable", marks=RUNTIMES)])
def test_the_leaves_converted_as_one_program_give_the_bits_each_gives_converted_alone(monkeypatch, port):
    _require(port)
    model, inputs = load_model(SMALL_CNN), example_inputs("small_cnn")
    calls, _ = record(model, inputs)
    cls, conversions = PORT_CLASSES[port], []
    real = cls.convert
    monkeypatch.setattr(cls, "convert", lambda self, m, ex: conversions.append(m) or real(self, m, ex))
    together = build_port(port, model, inputs)
    units = together.units(calls)
    assert len(units) == 8 and not any(u.reason for u in units) and len(conversions) == 1

    def as_one_program(*args):
        raise RuntimeError("converted each alone")

    monkeypatch.setattr(deploy, "_Together", as_one_program)
    alone = build_port(port, model, inputs)
    each = alone.units(calls)
    assert [u.reason for u in each] == [""] * 8 and len(conversions) == 1 + 7  # relu and relu#2: one program
    for unit, same in zip(units, each, strict=True):
        fed = unit.calls[0].inputs
        assert together.isolated(unit, fed).tobytes() == alone.isolated(same, fed).tobytes(), unit.key
    fed = units[0].calls[0].inputs
    other = [t * 0.5 if t.is_floating_point() else t for t in fed]  # not the reference's
    assert together.isolated(units[0], other).tobytes() == alone.isolated(each[0], other).tobytes()
    assert together.isolated(units[0], other).tobytes() != together.isolated(units[0], fed).tobytes()


VMAP_MASK = """
import torch

class Masked(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        index = torch.arange(x.shape[-1])
        mask = torch.vmap(lambda row: index <= row)(index)  # as transformers builds attention masks
        return self.fc(x).masked_fill(~mask, 0.0)

def masked():
    torch.manual_seed(0)
    return Masked().eval()
"""


@SLOW
@RUNTIMES
def test_executorch_takes_a_model_that_builds_its_mask_with_vmap(tmp_path, monkeypatch):
    """Every Llama-family model of transformers was absent on ExecuTorch ("SerializeError: Failed
    serializing node lazy_load_decompositions"): its vmap left torch.export's pre-dispatch calls in
    the program the ETRecord keeps."""
    _require("executorch-portable")
    with user_module(tmp_path, monkeypatch, "vmap_mask", VMAP_MASK):
        result = _port("vmap_mask:masked", "x=2x16x16", "executorch-portable")
    _flags_nothing(result, 1)
    assert result.end_to_end.verdict == "within rounding"


TRANSPOSED = """
import torch

class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 8, 3, padding=1)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(self.conv(x).permute(0, 2, 1))  # a view, as Whisper's encoder feeds its layers

def encoder():
    torch.manual_seed(0)
    return Encoder().eval()
"""


@SLOW
@RUNTIMES
def test_executorch_judges_a_leaf_fed_a_transposed_view(tmp_path, monkeypatch):
    """Whisper's encoder on ExecuTorch compared none of its 22 units ("Input 3 for method forward
    should be contiguous or channels-last"): a leaf's recorded input can be a view."""
    _require("executorch-portable")
    with user_module(tmp_path, monkeypatch, "transposed", TRANSPOSED):
        result = _port("transposed:encoder", "x=2x4x6", "executorch-portable")
    _flags_nothing(result, 2)


TANH_GELU = """
import torch

def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(approximate="tanh")).eval()
"""


@SLOW
@RUNTIMES
def test_xnnpacks_gelu_is_flagged_and_named_exactly_where_it_ignores_the_tanh_approximation(tmp_path, monkeypatch):
    """Gemma's MLP on ExecuTorch 1.5.1's XNNPACK (the census): every GELU ran as the erf GELU,
    approximate="tanh" or not (executorch#22851, fixed in a later release), and its units were
    flagged, rightly. What the delegate computes is measured here, not assumed: the unit is flagged
    with the swap named where it is the erf GELU, and within rounding where it is the tanh one."""
    _require("executorch")
    with user_module(tmp_path, monkeypatch, "tanh_gelu", TANH_GELU):
        model = load_model("tanh_gelu:mlp")
        inputs = {"input": np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)}
        calls, _ = record(model, inputs)
        port = build_port("executorch", model, inputs)
        gelu = port.units(calls)[1]
        fed = gelu.calls[0].inputs[0].double()
        ran = torch.from_numpy(np.asarray(port.isolated(gelu, gelu.calls[0].inputs), np.float64))
        erf = (ran - torch.nn.functional.gelu(fed)).abs().max() < (
            ran - torch.nn.functional.gelu(fed, approximate="tanh")
        ).abs().max()
        (result,) = run_model(ModelRun("tanh_gelu:mlp", write_arrays(tmp_path / "x.npz", inputs), ["executorch"])).ports
    row = next(r for r in result.layers if r.path == "1")
    if erf:  # ExecuTorch 1.5.1 here
        assert row.verdict == "beyond rounding" and result.first_not_within == "1", row
        assert row.cause is not None and row.cause.explains and row.cause.words == "the erf GELU for the tanh GELU"
    else:
        assert row.verdict == "within rounding" and result.flagged == 0, row


@needs_openvino
def test_a_leaf_the_converter_cannot_take_is_not_compared_and_the_others_are():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), _I0()).eval()
    inputs = {"input": np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)}
    calls, _ = record(model, inputs)
    port = build_port("openvino", model, inputs)
    linear, i0 = port.units(calls)
    assert linear.reason == "" and i0.reason.startswith("openvino.convert_model cannot convert it alone: ")
    expected = model[0](linear.calls[0].inputs[0]).detach().numpy()
    # float32 sums of four products of size about 1, summed in another order by oneDNN: within a
    # few ulps of the terms (1.2e-7 each), not of a result that cancels to 0.0079 (4e-6 relative)
    scale = (np.abs(linear.calls[0].inputs[0].numpy()) @ np.abs(model[0].weight.detach().numpy().T)).max()
    assert np.allclose(port.isolated(linear, linear.calls[0].inputs), expected, rtol=0, atol=8 * 2**-24 * scale)


RUNTIME_LOGS = """
import numpy as np, torch
from accuracy.workflows.model.ports import build_port
from accuracy.workflows.model.trace import record
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
inputs = {"input": np.ones((2, 4), np.float32)}
calls, _ = record(model, inputs)
for name in ("executorch-portable", "executorch"):  # cpuinfo probes once a process: the portable first
    port = build_port(name, model, inputs)
    units = port.units(calls)
    assert port.isolated(units[0], units[0].calls[0].inputs).shape == (2, 4)
    port.end_to_end(inputs, units)
"""


@SLOW
def test_executorch_leaves_the_terminal_clean():
    """Its runtime's C++ side logged five lines (cpuinfo) on stderr: XNNPACK's as a program first
    loaded, the portable kernels' as one first ran (`opbench model --port executorch-portable`)."""
    _require("executorch")
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", RUNTIME_LOGS], capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stderr) == (0, "")


def test_openvino_f16_computes_in_float16_with_correctly_rounded_convolutions():
    """Measured, not assumed: the f16 hint's convolution outputs are float16 values, each the
    float16 rounding of the exact result (within half an ulp), so the port is judged as float16."""
    _require("openvino-f16", needs=("FP16",))
    model, inputs = load_model(SMALL_CNN), example_inputs("small_cnn")
    port = build_port("openvino-f16", model, inputs)
    assert isinstance(port, OpenVinoPort) and port.fmt.name == "float16"
    calls, _ = record(model, inputs)
    (unit,) = port.units(calls[:1])  # conv1 alone
    assert unit.key == "conv1" and not unit.reason
    x16 = unit.calls[0].inputs[0].to(torch.float16)
    (out,) = port.convert(unit.calls[0].module, (x16.float(),))([x16.float().numpy()])
    assert np.array_equal(out, out.astype(np.float16).astype(np.float32))  # every output a float16
    exact = torch.nn.functional.conv2d(
        x16.double(), unit.calls[0].module.weight.detach().to(torch.float16).double(), stride=2, padding=1
    ).numpy()
    ulp = np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64)
    assert np.max(np.abs(out - exact) / ulp) <= 0.5


@needs_openvino
def test_openvino_asks_for_f32_because_the_cpu_default_may_be_bf16():
    """On a CPU with bf16 (this machine's Xeon), the CPU plugin's default computes a float32
    model in bf16: errors near bfloat16's 2**-8, where the port's explicit f32 hint gives float32's."""
    import openvino

    core = openvino.Core()
    if core.get_property("CPU", "INFERENCE_PRECISION_HINT") != openvino.Type.bf16:
        pytest.skip("the CPU plugin's default precision is not bf16 on this CPU")
    capped = cpu_levels.onednn_capped("bf16")
    if capped:
        pytest.skip(capped)
    layer = torch.nn.Linear(64, 64).eval()
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(0))
    ov_model = openvino.convert_model(layer, example_input=(x,))
    exact = torch.nn.functional.linear(x.double(), layer.weight.double(), layer.bias.double()).detach().numpy()

    def error(config) -> float:
        out = core.compile_model(ov_model, "CPU", config)([x.numpy()])[0]
        return float(np.linalg.norm(out - exact) / np.linalg.norm(exact))

    assert error({}) > 1e-3 and error({"INFERENCE_PRECISION_HINT": "f32"}) < 1e-6


def test_openvino_f16_is_absent_with_a_reason_on_a_cpu_without_f16_or_bf16(monkeypatch):
    _require("openvino")
    monkeypatch.setattr(openvino_port, "HINTS", {"AMX_FP4": ("f4", "float16")})
    reason = build_port("openvino-f16", load_model(SMALL_CNN), example_inputs("small_cnn"))
    capabilities = openvino_port.cpu_capabilities()
    assert "FP32" in capabilities
    assert reason == (
        f"this CPU computes neither f16 nor bf16 natively (OpenVINO's CPU capabilities: {', '.join(capabilities)})"
    )


@pytest.mark.parametrize(
    ("port", "module"),
    [
        ("openvino", "openvino"),
        ("openvino-f16", "openvino"),
        ("executorch", "executorch"),
        ("executorch-portable", "executorch"),
    ],
)
def test_a_runtime_not_installed_makes_its_port_absent_with_a_reason(monkeypatch, capsys, port, module):
    hide(monkeypatch, modules=(module,))
    result = run_main(capsys, "model", SMALL_CNN, "--inputs", CNN_INPUTS, "--port", port)
    assert result.returncode == 1 and "no port ran: nothing was compared" in result.stdout  # never an error
    assert f"{port}: absent ({module} is not installed (pip install 'opbench[deploy]'))" in result.stdout


def _models_page_deploy_line() -> list[str]:
    """docs/models.md's line running the deploy ports in child processes (OpenVINO, LiteRT), as
    `main` takes it: the test below runs it in place of the docs test (the block is marked not
    run), which built the same environment and converted the same model a second time."""
    return shlex.split(
        sh_block_after("models.md", "<!-- not run: tests/workflows/test_deploy_ports.py runs this line")
    )[1:]


@SLOW
def test_litert_converts_and_runs_in_its_own_environment_and_a_correct_conversion_flags_nothing(
    capsys, monkeypatch, tmp_path
):
    """litert-torch 0.10.0 beside this torch with uv's override of xdsl's typing-extensions bound,
    built from uv's cache alone (UV_OFFLINE: never a download in a test) in a cache of the test's own;
    beside OpenVINO's port, as docs/models.md shows both."""
    monkeypatch.setenv("UV_CACHE_DIR", os.environ.get("UV_CACHE_DIR") or str(cache_home() / "uv"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("UV_OFFLINE", "1")
    words = _models_page_deploy_line()
    assert words == ["model", SMALL_CNN, "--inputs", CNN_INPUTS, "--port", "openvino", "--port", "litert"]
    result = run_main(capsys, *words, "--json")
    assert result.returncode == 0, result.stdout[-2000:]
    openvino, litert = json.loads(result.stdout)["ports"]
    assert litert["description"].startswith(
        "LiteRT: litert-torch==0.10.0 to .tflite, run by ai-edge-litert's interpreter"
    )
    assert "override typing-extensions==4.16.0" in litert["description"]
    assert litert["compared"] == 8 and litert["flagged"] == 0 and litert["not_compared"] == 0
    assert openvino["port"] == "openvino" and openvino["compared"] > 0 and openvino["flagged"] == 0
    assert "building its environment with uv: litert-torch==0.10.0 torch==" in result.stderr


def test_building_the_port_table_imports_no_runtime(monkeypatch):
    """`available()`-style checks only: naming a port whose runtime is hidden imports nothing."""
    import sys

    hide(monkeypatch, modules=("openvino", "executorch"))
    for name in ("openvino", "executorch"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert isinstance(openvino_port.openvino_port("openvino", None, {}, reduced=False), str)
    assert isinstance(executorch_port.executorch_port("executorch", None, {}, delegate=True), str)
    assert "openvino" not in sys.modules and "executorch" not in sys.modules


class _Attention(torch.nn.Module):
    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


@RUNTIMES
def test_xnnpacks_sdpa_and_upsample_patterns_are_left_out_only_where_none_can_match():
    """Building the patterns costs about 6 CPU-s a process (measured: small_cnn's and
    small_transformer's XNNPACK programs are the same bytes with and without them): a program
    with a softmax, an attention or a bilinear upsample keeps them; one without, and only while
    it lowers, has none."""
    _require("executorch")
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa

    x = torch.randn(1, 2, 4, 4)
    plain = torch.export.export(torch.nn.Sequential(torch.nn.Conv2d(2, 2, 1), torch.nn.ReLU()).eval(), (x,))
    for module in (torch.nn.Softmax(-1), torch.nn.Upsample(scale_factor=2, mode="bilinear")):
        exported = torch.export.export(module.eval(), (x,)).run_decompositions({})
        assert executorch_port.patterns_possible(exported)
        with executorch_port.xnnpack_patterns_where_possible(exported):
            assert sdpa.get_graphs is not list and bilinear_2d.get_graphs_dict is not dict
    q = torch.randn(1, 2, 4, 8)
    attention = torch.export.export(_Attention().eval(), (q, q, q)).run_decompositions({})
    assert executorch_port.patterns_possible(attention)
    assert not executorch_port.patterns_possible(plain.run_decompositions({}))
    found = sdpa.get_graphs, bilinear_2d.get_graphs_dict
    with executorch_port.xnnpack_patterns_where_possible(plain):
        assert sdpa.get_graphs() == [] and bilinear_2d.get_graphs_dict() == {}
    assert (sdpa.get_graphs, bilinear_2d.get_graphs_dict) == found
