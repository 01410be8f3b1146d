"""`opbench model` (#24): per-layer verdicts of a whole model's ports on identical inputs.

Small models from accuracy.workflows.model.zoo. Each known port bug is injected into a copy of
the model whose layers keep the reference's module paths; its activations file (the format any
runtime writes) is the port, and the command must name the right layer first while the layers
before it stay within rounding. Correct ports (ONNX Runtime with and without optimizations,
TorchScript) flag no layer at float32."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from accuracy.cli.main import main
from accuracy.core.errors import OpbenchError
from accuracy.judge.precision import TF32
from accuracy.judge.verdicts import NOT_COMPARED, WITHIN
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.activations_file import activations
from accuracy.workflows.model.ports import build_port
from accuracy.workflows.model.ports.torch_variants import TorchPort
from accuracy.workflows.model.rows import PortResult
from accuracy.workflows.model.sweep import ModelRun, evaluate_ports, run_model
from accuracy.workflows.model.trace import load_model, model_inputs, record, run_reference
from accuracy.workflows.model.zoo import example_inputs, small_cnn, small_transformer

CNN = "accuracy.workflows.model.zoo:small_cnn"
BLOCK = "accuracy.workflows.model.zoo:small_transformer"


@pytest.fixture
def cnn_inputs(tmp_path):
    return write_arrays(tmp_path / "x.npz", example_inputs("small_cnn"))


@pytest.fixture
def block_inputs(tmp_path):
    return write_arrays(tmp_path / "x.npz", example_inputs("small_transformer"))


def _port_file(tmp_path, model: nn.Module, inputs: dict, name: str = "port.safetensors"):
    """What another runtime hands over: its own activations, end to end, in the file format."""
    calls, out = record(model, inputs)
    return write_arrays(tmp_path / name, activations(calls, out))


def _judged(spec, inputs_path, port_path) -> PortResult:
    report = run_model(ModelRun(spec, inputs_path, activations_files={"port": str(port_path)}))
    (port,) = report.ports
    return port


def _assert_first(port: PortResult, layer: str) -> None:
    assert port.first_not_within == layer, [(r.path, r.verdict) for r in port.layers]
    order = [r.path for r in port.layers]
    before = port.layers[: order.index(layer)]
    assert all(r.verdict in (WITHIN, NOT_COMPARED) for r in before)


@pytest.mark.slow  # ~20 s on the shared 2-core machine: three ports, two ways of cutting units
def test_correct_ports_flag_no_layer_and_fused_nodes_are_one_unit(cnn_inputs):
    report = run_model(ModelRun(CNN, cnn_inputs, ["onnxruntime", "onnxruntime-noopt", "torchscript"]))
    assert report.within_rounding
    for port in report.ports:
        assert port.flagged == 0 and port.first_not_within is None, port.port
        assert port.compared >= 6
    ort = report.ports[0]
    assert ort.layers[0].covers == ["conv1", "bn1"]  # the BatchNorm folded into the Conv node at export
    torchscript = {r.path: r for r in report.ports[2].layers}
    assert torchscript["bn1"].tier == "registry op batch_norm"
    assert torchscript["fc"].tier == "registry op linear"
    assert torchscript["conv1"].tier == "typical tier of check --fn"


def test_onnx_runtime_port_of_a_transformer_block_flags_no_layer(block_inputs):
    report = run_model(ModelRun(BLOCK, block_inputs, ["onnxruntime"]))
    (port,) = report.ports
    assert report.within_rounding and port.flagged == 0 and port.compared == 5
    tiers = {r.path: r.tier for r in port.layers}
    assert tiers == {
        "proj": "registry op linear",
        "norm": "registry op layer_norm",
        "up": "registry op linear",
        "gelu": "registry op gelu",  # the catalog declares nn.GELU (erf) as the registry op (module_ops.py)
        "down": "registry op linear",
    }


def test_batch_norm_epsilon_of_keras_is_named(tmp_path, cnn_inputs):
    port = small_cnn().eval()
    port.bn1.eps = 1e-3  # Keras BatchNormalization's default against torch's 1e-5
    _assert_first(_judged(CNN, cnn_inputs, _port_file(tmp_path, port, example_inputs("small_cnn"))), "bn1")


def test_layer_norm_epsilon_is_named(tmp_path, block_inputs):
    port = small_transformer().eval()
    port.norm.eps = 1e-3  # LayerNormalization(epsilon=1e-3)
    judged = _judged(BLOCK, block_inputs, _port_file(tmp_path, port, example_inputs("small_transformer")))
    _assert_first(judged, "norm")
    assert next(r for r in judged.layers if r.path == "norm").verdict == "beyond rounding"


def test_tanh_gelu_for_erf_gelu_is_named(tmp_path, block_inputs):
    port = small_transformer().eval()
    port.gelu = nn.GELU(approximate="tanh")
    _assert_first(_judged(BLOCK, block_inputs, _port_file(tmp_path, port, example_inputs("small_transformer"))), "gelu")


class _SamePaddingConv(nn.Conv2d):
    """TensorFlow's padding="same" at stride 2: all of the padding after, none before."""

    def forward(self, x):
        return F.conv2d(F.pad(x, (0, 1, 0, 1)), self.weight, self.bias, self.stride)


def test_asymmetric_same_padding_at_stride_2_is_named(tmp_path, cnn_inputs):
    port = small_cnn().eval()
    same = _SamePaddingConv(3, 4, 3, stride=2, bias=False)
    same.load_state_dict(port.conv1.state_dict())
    port.conv1 = same
    _assert_first(_judged(CNN, cnn_inputs, _port_file(tmp_path, port, example_inputs("small_cnn"))), "conv1")


class _ChannelsLastFlatten(nn.Flatten):
    def forward(self, x):
        return x.permute(0, 2, 3, 1).flatten(1)


def test_nhwc_flatten_before_linear_is_named(tmp_path, cnn_inputs):
    port = small_cnn().eval()
    port.flatten = _ChannelsLastFlatten()
    _assert_first(_judged(CNN, cnn_inputs, _port_file(tmp_path, port, example_inputs("small_cnn"))), "flatten")


def test_model_left_in_train_mode_is_named(tmp_path, cnn_inputs):
    port = copy.deepcopy(small_cnn()).train()  # batch statistics in bn1, then dropout
    torch.manual_seed(1)
    _assert_first(_judged(CNN, cnn_inputs, _port_file(tmp_path, port, example_inputs("small_cnn"))), "bn1")


def test_weight_stored_in_bfloat16_is_named(tmp_path, cnn_inputs):
    port = small_cnn().eval()
    with torch.no_grad():
        port.conv2.weight.copy_(port.conv2.weight.to(torch.bfloat16).float())
    _assert_first(_judged(CNN, cnn_inputs, _port_file(tmp_path, port, example_inputs("small_cnn"))), "conv2")


@pytest.mark.slow  # two runs, ~17 s on the shared machine
def test_json_and_exit_status(capsys, tmp_path, cnn_inputs):
    port = small_cnn().eval()
    port.bn1.eps = 1e-3
    path = _port_file(tmp_path, port, example_inputs("small_cnn"))
    saved = tmp_path / "reference.safetensors"
    args = ["model", CNN, "--inputs", cnn_inputs, "--activations", f"keras={path}", "--save-activations", saved]
    status = main([*map(str, args), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert status == 1
    (judged,) = out["ports"]
    assert judged["port"] == "keras" and judged["first_not_within"] == "bn1"
    assert {"path", "op", "verdict", "reason"} <= set(judged["layers"][0])
    assert out["model"] == CNN and out["mode"].startswith("eval")
    assert saved.is_file()
    status = main(["model", CNN, "--inputs", str(cnn_inputs), "--activations", f"torch={saved}"])
    assert status == 0  # the reference's own activations are the exact layers rounded once: 0 flagged


def _bad(capsys, *args) -> str:
    status = main(["model", *map(str, args)])
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("opbench: error: ")
    return line


def test_bad_input_is_one_line_exit_2_and_writes_nothing(capsys, tmp_path, cnn_inputs):
    saved = tmp_path / "saved.safetensors"
    assert "cannot import" in _bad(capsys, "no_such_module:f", "--inputs", cnn_inputs, "--save-activations", saved)
    assert "not a torch.nn.Module" in _bad(capsys, "accuracy.workflows.model.zoo:not_a_module", "--inputs", cnn_inputs)
    wrong = write_arrays(tmp_path / "wrong.npz", {"x": np.zeros((2, 5, 8, 8), np.float32)})
    assert "cannot take inputs x (2, 5, 8, 8)" in _bad(capsys, CNN, "--inputs", wrong, "--save-activations", saved)
    reference = small_cnn().eval()
    calls, out = record(reference, example_inputs("small_cnn"))
    arrays = activations(calls, out)
    extra = write_arrays(tmp_path / "extra.safetensors", arrays | {"layer9.conv": arrays["fc"]})
    assert "layer9.conv" in _bad(capsys, CNN, "--inputs", cnn_inputs, "--activations", f"x={extra}")
    no_output = write_arrays(tmp_path / "missing.safetensors", {k: v for k, v in arrays.items() if k != "output"})
    assert "missing key 'output'" in _bad(capsys, CNN, "--inputs", cnn_inputs, "--activations", f"x={no_output}")
    reshaped = write_arrays(tmp_path / "shape.safetensors", arrays | {"fc": arrays["fc"][:1]})
    assert "'fc' has shape (1, 5)" in _bad(capsys, CNN, "--inputs", cnn_inputs, "--activations", f"x={reshaped}")
    assert "unknown port" in _bad(capsys, CNN, "--inputs", cnn_inputs, "--port", "tpu")
    assert not saved.exists()


@pytest.mark.parametrize(
    ("asked", "words"),
    [
        (["--port", "tpu"], "unknown port"),
        (["--port", "threads:0"], "expected threads:N with N >= 1"),
        (["--activations", "x=missing.safetensors"], "missing.safetensors"),
        (["--port", "torchscript", "--save-activations", "out.txt"], "use a .safetensors or .npz file"),
    ],
)
def test_what_names_a_port_is_checked_before_the_model_is_built(
    capsys, tmp_path, monkeypatch, cnn_inputs, asked, words
):
    """A typo in a port of a model that takes minutes to build and run is one line at once."""
    built = []
    monkeypatch.setattr("accuracy.workflows.model.sweep.load_model", lambda *a: built.append(a) or small_cnn())
    monkeypatch.chdir(tmp_path)
    assert words in _bad(capsys, CNN, "--inputs", cnn_inputs, *asked)
    assert built == []


def test_cuda_ports_are_absent_without_a_gpu_never_an_error(cnn_inputs):
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the CUDA ports run")
    report = run_model(ModelRun(CNN, cnn_inputs, ["cuda", "cuda-tf32", "torchscript"]))
    assert [a.port for a in report.absent] == ["cuda", "cuda-tf32"]
    assert [p.port for p in report.ports] == ["torchscript"] and report.within_rounding


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("example", ["small_cnn", "small_transformer", "bert2"])
def test_cuda_ports_with_tf32_off_and_on_flag_no_layer_on_a_gpu(example, tmp_path):
    """On an H200 (docs/gpu.md): TF32 on is within rounding at TF32 precision, and BERT's LayerNorm
    (eps 1e-12, judged as a function) no longer 'suspicious' on CUDA with TF32 off."""
    inputs = write_arrays(tmp_path / "x.npz", example_inputs(example))
    report = run_model(ModelRun(f"accuracy.workflows.model.zoo:{example}", inputs, ["cuda", "cuda-tf32"]))
    assert report.absent == []
    for port in report.ports:
        assert port.flagged == 0, (port.port, [(r.path, r.reason) for r in port.layers])
    cuda, tf32 = report.ports
    assert tf32.worst_introduced > 10 * cuda.worst_introduced  # TF32 did run: its error, not float32's


TF32_OPERANDS = {"mm": (0, 1), "bmm": (0, 1), "addmm": (1, 2), "baddbmm": (1, 2), "convolution": (0, 1)}


class _TF32OnTheCPU(TorchDispatchMode):
    """CUDA's TF32 mode on the CPU, as measured on an H200 (docs/gpu.md): a float32 matmul or
    convolution rounds its two operands to TF32 (to nearest) and sums the products in float32."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        operands = TF32_OPERANDS.get(func.overloadpacket.__name__, ())
        args = [_to_tf32(a) if i in operands and a.dtype == torch.float32 else a for i, a in enumerate(args)]
        return func(*args, **(kwargs or {}))


def _to_tf32(t: torch.Tensor) -> torch.Tensor:
    """float32 rounded to TF32 (to nearest even), with the format opbench judges TF32 by."""
    return torch.from_numpy(TF32.round(t.detach().numpy()))


def _tf32_port_report(spec: str, inputs, judged_as_tf32: bool) -> dict:
    """The model with TF32 matmuls and convolutions, judged at TF32 (the cuda-tf32 port) or at
    float32 (what the cuda port's judging makes of a TF32 result: a TF32 leak)."""

    def in_tf32(module, example):
        def run(*args):
            with _TF32OnTheCPU():
                return module(*args)

        return run

    model = load_model(spec)
    given = model_inputs(inputs)
    calls, _ = run_reference(model, given, str(inputs))
    port = TorchPort("tf32-on-the-cpu", model, "TF32 matmuls and convolutions", wrap=in_tf32, tf32=judged_as_tf32)
    (report,), absent = evaluate_ports([port], model, given, calls)
    assert absent == []
    return report


@pytest.mark.parametrize(
    "spec, example, contractions",
    [(CNN, "small_cnn", ["conv1", "conv2", "fc"]), (BLOCK, "small_transformer", ["proj", "up", "down"])],
)
def test_tf32_results_are_within_rounding_at_tf32_and_a_tf32_leak_into_float32_is_flagged(
    spec, example, contractions, tmp_path
):
    inputs = write_arrays(tmp_path / "x.npz", example_inputs(example))
    at_tf32 = _tf32_port_report(spec, inputs, judged_as_tf32=True)
    assert at_tf32.flagged == 0, [(r.path, r.reason) for r in at_tf32.layers]
    rows = {r.path: r for r in at_tf32.layers}
    assert all(rows[layer].introduced > 1e-5 for layer in contractions)  # TF32's error, 100x float32's
    assert {rows[layer].compute for layer in contractions if "linear" in rows[layer].tier} == {"tfloat32"}
    assert all("rounded to tfloat32" in rows[layer].reason for layer in contractions if "typical" in rows[layer].tier)
    leak = _tf32_port_report(spec, inputs, judged_as_tf32=False)
    assert [r.path for r in leak.layers if r.verdict != WITHIN] == contractions


@pytest.mark.slow  # imports TensorFlow
def test_keras_port_with_a_mapping_names_each_keras_bug(cnn_inputs):
    from accuracy.workflows.model.zoo import keras_small_cnn

    correct = run_model(ModelRun(CNN, cnn_inputs, keras=keras_small_cnn()))
    (port,) = correct.ports
    assert port.flagged == 0 and port.compared == 8, [(r.path, r.verdict) for r in port.layers]
    for bug, layer in [
        ({"bn_epsilon": 1e-3}, "bn1"),
        ({"same_padding": True}, "conv1"),
        ({"channels_first_flatten": False}, "flatten"),
    ]:
        _assert_first(run_model(ModelRun(CNN, cnn_inputs, keras=keras_small_cnn(**bug))).ports[0], layer)
    model, mapping = keras_small_cnn()
    with pytest.raises(OpbenchError, match="calls no leaf module layer9"):
        run_model(ModelRun(CNN, cnn_inputs, keras=(model, mapping | {"fc": "layer9"})))
    with pytest.raises(OpbenchError, match="has no layer conv7"):
        run_model(ModelRun(CNN, cnn_inputs, keras=(model, mapping | {"conv7": "conv1"})))


def test_generated_inputs_and_the_html_page_with_its_plot(capsys, tmp_path):
    page = tmp_path / "model.html"
    status = main(["model", CNN, "--inputs", "x=2x3x8x8", "--port", "bfloat16", "--html", str(page)])
    out = capsys.readouterr().out
    assert status == 0 and "on x (2, 3, 8, 8)" in out and "bfloat16 [bfloat16]: every compared layer" in out
    text = page.read_text()
    assert "data:image/png;base64," in text and "<td>conv1</td>" in text
    assert "already exists" in _bad(capsys, CNN, "--inputs", "x=2x3x8x8", "--html", page)


def test_onnx_node_names_map_to_module_calls():
    from accuracy.workflows.model.onnx_graph import module_call_of, module_calls_of

    modules = {"layer1", "layer1.0", "layer1.0.conv1", "layer1.0.relu", "layer2", "layer2.0", "layer2.0.downsample"}
    modules |= {"layer2.0.downsample.0", "encoder", "encoder.layer", "encoder.layer.0", "encoder.layer.0.attention"}
    modules |= {"encoder.layer.0.attention.self", "encoder.layer.0.attention.self.query", "relu"}
    assert module_call_of("/layer1/layer1.0/conv1/Conv", modules) == ("layer1.0.conv1", 0)
    assert module_call_of("/layer1/layer1.0/relu_1/Relu", modules) == ("layer1.0.relu", 1)
    assert module_call_of("/layer2/layer2.0/downsample/downsample.0/Conv", modules) == ("layer2.0.downsample.0", 0)
    query = "/encoder/layer.0/attention/self/query/MatMul"
    assert module_call_of(query, modules) == ("encoder.layer.0.attention.self.query", 0)
    assert module_call_of("/relu_2/Relu", modules) == ("relu", 2)
    assert module_call_of("/Flatten", modules) is None
    assert module_call_of("/layer1/layer1.0/Add", modules) == ("layer1.0", 0)
    # every level a node was traced in: the parent's call gets its children's nodes and its own
    assert module_calls_of("/layer1/layer1.0/relu_1/Relu", modules) == [
        ("layer1", 0),
        ("layer1.0", 0),
        ("layer1.0.relu", 1),
    ]
    assert module_calls_of("/Flatten", modules) == []
    # nested Sequentials name the grandchild by the outer one's name and both indices: torchvision's
    # MobileNetV2 (`features.1.conv.0.0`) and EfficientNet (`features.1.0.block.0.0`); their convs
    # were found as none, and judged in the unit of the layer before them
    nested = {"features", "features.1", "features.1.conv", "features.1.conv.0", "features.1.conv.0.0"}
    nested |= {"features.1.0", "features.1.0.block", "features.1.0.block.0", "features.1.0.block.0.0"}
    assert module_call_of("/features/features.1/conv/conv.0/conv.0.0/Conv", nested) == ("features.1.conv.0.0", 0)
    efficientnet = "/features/features.1/features.1.0/block/block.0/block.0.0/Conv"
    assert module_call_of(efficientnet, nested) == ("features.1.0.block.0.0", 0)


def testdynamo_exported_nodes_map_to_module_calls_at_every_level():
    """The dynamo exporter records scopes, not calls: a module's calls are its separate runs of nodes."""
    from accuracy.workflows.model.onnx_graph import Graph, dynamo_export

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
            self.act = nn.Tanh()

        def forward(self, x):
            return self.act(self.block(self.act(x)) + 1)

    model = Twice()
    graph = Graph.of(dynamo_export(model, {"x": np.ones((2, 4), np.float32)}))
    groups = graph.groups({name for name, _ in model.named_modules() if name})
    ops = {key: [n.op_type for n in nodes] for key, nodes in groups.items()}
    assert ops[("act", 0)] == ["Tanh"] and ops[("act", 1)] == ["Tanh"] and groups[("act", 0)] != groups[("act", 1)]
    assert ops[("block.1", 0)] == ["Relu"] and ops[("block.0", 0)] == ["Gemm"]
    assert ops[("block", 0)] == ops[("block.0", 0)] + ops[("block.1", 0)]  # the parent: its children's nodes


def test_a_file_without_layer_inputs_gives_propagated_differences_only(tmp_path, cnn_inputs):
    calls, out = record(small_cnn().eval(), example_inputs("small_cnn"))
    outputs_only = {k: v for k, v in activations(calls, out).items() if "/in" not in k}
    report = run_model(
        ModelRun(CNN, cnn_inputs, activations_files={"phone": str(write_arrays(tmp_path / "o.npz", outputs_only))})
    )
    (port,) = report.ports
    assert port.compared == 0 and not report.within_rounding  # nothing judged is no pass
    for row in port.layers:
        assert row.verdict == NOT_COMPARED and "no inputs for it" in row.reason
        assert 0 <= row.propagated < 1e-6  # PyTorch's own float32 activations against the float64 model


class _ReadsItsDtype(nn.Module):
    """Reads its dtype from its parameters, as transformers' models do (`self.dtype`)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x.to(next(self.parameters()).dtype))


def reads_its_dtype() -> nn.Module:
    torch.manual_seed(0)
    return _ReadsItsDtype()


def test_traced_stand_ins_keep_the_model_parameters(monkeypatch):
    """TorchScript's end-to-end run replaces leaves by stand-ins; a model reading its own dtype
    from its parameters (bert2) failed there when they held none."""
    monkeypatch.chdir(Path(__file__).parents[2])
    report = run_model(ModelRun("tests.cli.test_model:reads_its_dtype", "x=2x4", ["torchscript"]))
    assert report.within_rounding and report.ports[0].compared == 1


def test_a_layer_whose_onnx_nodes_are_not_found_is_not_compared_rather_than_judged_with_the_one_before(monkeypatch):
    """A depthwise conv whose ONNX nodes the name mapping missed joined the unit of the ReLU6
    before it (same shape, fed by it), as a BatchNorm folded into its Conv does; the unit's
    reference then ran one layer further than its ONNX output: stock MobileNetV2 and EfficientNet
    were flagged beyond rounding at 5e7 and 4e8 times the threshold against ONNX Runtime. A layer
    joins the unit before it only where the unit's ONNX output is its output."""
    from accuracy.workflows.model import onnx_graph

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU6(inplace=True),
        nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.BatchNorm2d(8), nn.ReLU6(inplace=True),
    ).eval()  # fmt: skip
    groups = onnx_graph.Graph.groups
    monkeypatch.setattr(onnx_graph.Graph, "groups", lambda g, m: {k: v for k, v in groups(g, m).items() if k[0] != "3"})
    inputs = {"input": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    calls, _ = run_reference(model, inputs, "the test's inputs")
    (port,), absent = evaluate_ports([build_port("onnxruntime-noopt", model, inputs)], model, inputs, calls)
    assert absent == []
    rows = {row.path: row for row in port.layers}
    assert rows["0"].covers == ["0", "1"] and rows["0"].verdict == WITHIN  # BatchNorm folded: one unit
    assert rows["2"].covers == ["2"] and rows["2"].verdict == WITHIN
    assert rows["3"].verdict == NOT_COMPARED and "no ONNX node computes it" in rows["3"].reason
    assert port.flagged == 0


@pytest.mark.slow
def test_albert_s_shared_layer_is_not_judged_on_nodes_of_both_its_calls():
    """The TorchScript exporter suffixes a module's second call at some scope levels only: ALBERT's
    shared layer (`albert_layers.0/attention/LayerNorm_1`). Its first call was judged on the nodes
    of both and flagged 1.5e3x beyond the bound, every leaf inside within rounding. Such a call is
    not compared, with why; its leaves still are, and nothing is flagged."""
    from accuracy.workflows.model.census_models import MODULE, build, inputs_for

    report = run_model(
        ModelRun(
            f"{MODULE}:transformers_albert",
            inputs_for("transformers_albert", build("transformers_albert")),
            ["onnxruntime-noopt"],
        )
    )
    (port,) = report.ports
    rows = {row.path: row for row in port.layers}
    shared = rows["encoder.albert_layer_groups.0"]
    assert shared.verdict == NOT_COMPARED and "do not tell this module's calls apart" in shared.reason
    leaves = [r for p, r in rows.items() if p.startswith("encoder.albert_layer_groups.0.") and r.verdict == WITHIN]
    assert len(leaves) >= 8
    assert port.flagged == 0 and report.within_rounding


class _OffsetsItsIds(nn.Module):
    """XGLM's sinusoidal positional embedding: adds its offset to the position ids it is given, in place."""

    def __init__(self):
        super().__init__()
        self.offset = 2
        self.register_buffer("weights", torch.randn(16, 4, generator=torch.Generator().manual_seed(0)))

    def forward(self, ids):
        ids += self.offset
        return self.weights.index_select(0, ids.view(-1)).view(*ids.shape, 4)


class _PositionsThenProjection(nn.Module):
    def __init__(self):
        super().__init__()
        self.positions = _OffsetsItsIds()
        self.proj = nn.Linear(4, 4)

    def forward(self, ids):
        return self.proj(self.positions(ids))


class _FullOfTheMinimum(nn.Module):
    """MPT's and XGLM's causal mask: `torch.full` of the dtype's minimum, into the default dtype."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        scores = self.proj(x) @ x.transpose(-1, -2)
        mask = torch.full(scores.shape[-2:], torch.finfo(scores.dtype).min).triu(1)
        return (scores + mask).softmax(-1)


def offsets_its_ids() -> nn.Module:
    torch.manual_seed(0)
    return _PositionsThenProjection()


def full_of_the_minimum() -> nn.Module:
    torch.manual_seed(0)
    return _FullOfTheMinimum()


def test_a_unit_that_changes_its_integer_inputs_is_rerun_on_copies(monkeypatch):
    """XGLM's positional embedding shifted the position ids the float64 rerun of its unit was
    handed, on every rerun: PyTorch against itself was 'beyond rounding' at 2e9 ulp."""
    monkeypatch.chdir(Path(__file__).parents[2])
    ids = {"ids": np.arange(6).reshape(1, 6)}
    report = run_model(ModelRun("tests.cli.test_model:offsets_its_ids", ids, ["threads:1"]))
    (port,) = report.ports
    assert report.within_rounding and port.flagged == 0 and port.compared == 2
    assert all(row.verdict == WITHIN for row in port.layers)


def test_the_float64_reference_makes_tensors_without_a_dtype_in_float64(monkeypatch):
    """MPT's and XGLM's masks are `torch.full` of float64's minimum in the float64 reference, into
    the default dtype: float32 cannot hold it, and the census listed both models as not run."""
    monkeypatch.chdir(Path(__file__).parents[2])
    x = {"x": np.random.default_rng(0).standard_normal((1, 5, 4)).astype(np.float32)}
    report = run_model(ModelRun("tests.cli.test_model:full_of_the_minimum", x, ["threads:1"]))
    assert report.within_rounding and report.ports[0].flagged == 0
    assert torch.get_default_dtype() == torch.float32  # and the default is given back
