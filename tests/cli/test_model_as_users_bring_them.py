"""`opbench model` on models as users bring them, and the paths that ended badly (issues "Models as
users bring them" and "Every path ends in an answer, round 3"): in-place layers, forwards that
write to their input, factories that print or exit, module names that look like file keys,
ports that cannot be built, ports that compare nothing, outputs that are NaN, complex outputs,
labels that would drive the terminal, and a user's factory that imports transformers plainly.

The models are written here, in a module the test puts on the path, as a user's would be."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from cli_runner import run_main
from torch import nn
from user_modules import user_module

from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.activations_file import activations
from accuracy.workflows.model.sweep import ModelRun, run_model
from accuracy.workflows.model.trace import record
from accuracy.workflows.model.zoo import example_inputs

USER_MODELS = '''
import sys

import torch
from torch import nn


def _seeded(model):
    torch.manual_seed(0)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.5)
    return model.eval()


def in_place():
    """In-place activations, as torchvision's MobileNetV3 (Hardswish) and many CNNs have them."""
    return _seeded(nn.Sequential(nn.Linear(16, 32), nn.Hardswish(inplace=True), nn.Linear(32, 32),
                                 nn.LeakyReLU(0.1, inplace=True), nn.Linear(32, 8)))


class Doubling(nn.Module):
    """A forward that writes to its input before its layers run."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 8)

    def forward(self, x):
        x.mul_(2)
        return self.fc(x)


def doubling():
    return _seeded(Doubling())


def printing():
    print("loading weights...")
    return in_place()


def exiting():
    sys.exit(0)


def named_output():
    model = nn.Sequential()
    model.add_module("output", nn.Linear(16, 8))
    return _seeded(model)


def lone_linear():
    return _seeded(nn.Linear(16, 8))


class Spectrum(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        return torch.fft.fft(self.fc(x))


def complex_output():
    return _seeded(Spectrum())


class CastingNorm(nn.Module):
    """RMSNorm as HF writes it: the input cast to float32 on purpose, whatever the model's dtype."""

    def __init__(self, width):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, width))

    def forward(self, x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.float()


def casting_norm():
    return nn.Sequential(CastingNorm(32)).eval()


def llama_tiny():
    from transformers import LlamaConfig, LlamaModel  # plainly, as a user's module does

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaModel(config).eval()
'''


@pytest.fixture
def user(tmp_path, monkeypatch):
    """The user's module `mymodels` importable from the current directory, as `opbench model` finds it."""
    with user_module(tmp_path, monkeypatch, "mymodels", USER_MODELS) as directory:
        yield directory


def _x(tmp_path, name="x", shape=(4, 16)):
    """Inputs by the forward's argument name (`input` for an nn.Sequential)."""
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    return str(write_arrays(tmp_path / f"{name}.npz", {name: x}))


def test_in_place_layers_are_judged_on_what_they_received(user):
    """Hardswish(inplace=True) and LeakyReLU(inplace=True) overwrite their input: recorded after the
    call, the input was the output, and PyTorch against itself read 1e6x the threshold."""
    report = run_model(ModelRun("mymodels:in_place", _x(user, "input"), ["threads:1", "torchscript"]))
    for port in report.ports:
        assert port.flagged == 0 and port.compared == 5, [(r.path, r.reason) for r in port.layers]
        assert port.end_to_end.verdict == "within rounding"
    assert report.within_rounding


def test_a_forward_that_writes_to_its_input_leaves_the_inputs_alone(user):
    inputs = _x(user)
    before = np.load(inputs)["x"].copy()
    report = run_model(ModelRun("mymodels:doubling", inputs, ["threads:1"]))
    (port,) = report.ports
    assert np.array_equal(np.load(inputs)["x"], before)
    # PyTorch's own float32 output on the same input is a few ulps off the float64 model, not 0.99
    assert port.output["reference_relative_error"] < 1e-6 and report.within_rounding


def test_a_factory_that_prints_keeps_json_parseable(user, capsys):
    status, out, err = run_main(
        capsys, "model", "mymodels:printing", "--inputs", _x(user, "input"), "--port", "threads:1", "--json"
    )
    assert status == 0 and json.loads(out)["ports"][0]["flagged"] == 0
    assert "loading weights..." in err


def test_a_factory_that_exits_is_one_line(user, capsys):
    status, out, err = run_main(capsys, "model", "mymodels:exiting", "--inputs", _x(user), "--port", "threads:1")
    assert (
        status == 2 and out == "" and err.strip() == "opbench: error: mymodels:exiting: the factory called sys.exit(0)"
    )


def test_a_module_named_like_a_file_key_is_judged_under_an_escaped_key(user, capsys):
    """A top-level `output` (Meta's Llama head) was refused; its key is `%output` (issue 57, item 6)."""
    status, out, err = run_main(
        capsys, "model", "mymodels:named_output", "--inputs", _x(user, "input"), "--port", "threads:1", "--json"
    )
    (port,) = json.loads(out)["ports"]
    assert status == 0 and err == "" and [r["path"] for r in port["layers"]] == ["%output"]
    assert port["compared"] == 1 and port["flagged"] == 0


def test_a_model_that_is_one_leaf_says_what_to_do(user, capsys):
    status, _, err = run_main(capsys, "model", "mymodels:lone_linear", "--inputs", _x(user), "--port", "threads:1")
    assert status == 2 and "single Linear" in err and "check --fn" in err


def test_a_complex_output_is_refused_not_halved(user, capsys):
    status, _, err = run_main(capsys, "model", "mymodels:complex_output", "--inputs", _x(user), "--port", "threads:1")
    assert status == 2 and "complex" in err and len(err.strip().splitlines()) == 1


def test_only_absent_ports_compare_nothing_and_do_not_pass(user, capsys):
    if torch.cuda.is_available():
        pytest.skip("the CUDA ports are present on a GPU")
    status, out, _ = run_main(capsys, "model", "mymodels:in_place", "--inputs", _x(user, "input"), "--port", "cuda")
    assert status == 1 and "no port ran: nothing was compared (absent: cuda)" in out
    assert "within rounding" not in out.splitlines()[2]


def test_a_port_the_model_cannot_be_converted_to_is_absent_and_the_others_judged(capsys, tmp_path):
    flat = str(write_arrays(tmp_path / "flat.npz", {"x": np.zeros((2, 8), np.float32)}))
    spec = "accuracy.workflows.model.zoo:not_exportable"
    status, out, _ = run_main(
        capsys, "model", spec, "--inputs", flat, "--port", "onnxruntime", "--port", "threads:1", "--json"
    )
    report = json.loads(out)
    assert status == 0 and [p["port"] for p in report["ports"]] == ["threads:1"]
    (absent,) = report["absent_ports"]
    assert absent["port"] == "onnxruntime" and "aten::i0" in absent["reason"] and "prims.bessel_i0" in absent["reason"]
    assert "\n" not in absent["reason"] and "\x1b" not in absent["reason"]


def test_a_port_with_nan_output_is_beyond_rounding_end_to_end(tmp_path, capsys):
    """A runtime whose output is NaN while every layer it reports is right: it used to print
    'differs ... by -' and exit 0."""
    from accuracy.workflows.model.zoo import small_cnn

    inputs = example_inputs("small_cnn")
    calls, out = record(small_cnn().eval(), inputs)
    arrays = activations(calls, out)
    arrays["output"] = np.full_like(arrays["output"], np.nan)
    port = write_arrays(tmp_path / "port.safetensors", arrays)
    x = write_arrays(tmp_path / "x.npz", inputs)
    status, text, _ = run_main(
        capsys, "model", "accuracy.workflows.model.zoo:small_cnn", "--inputs", x, "--activations", f"nan={port}"
    )
    assert status == 1
    assert (
        "every compared layer within rounding, but end to end beyond rounding: 10 output value(s) not finite where"
        in text
    )


def test_a_label_cannot_forge_an_answer_line(tmp_path, capsys):
    from accuracy.workflows.model.zoo import small_cnn

    inputs = example_inputs("small_cnn")
    calls, out = record(small_cnn().eval(), inputs)
    port = write_arrays(tmp_path / "port.safetensors", activations(calls, out))
    x = write_arrays(tmp_path / "x.npz", inputs)
    label = "x\nFAKE: every compared layer within rounding\x1b[2J"
    status, text, _ = run_main(
        capsys, "model", "accuracy.workflows.model.zoo:small_cnn", "--inputs", x, "--activations", f"{label}={port}"
    )
    assert status == 0 and "\x1b" not in text
    assert not any(line.startswith("FAKE") for line in text.splitlines())
    assert "x\\nFAKE: every compared layer within rounding\\x1b[2J [float32]: every compared layer" in text


def test_the_same_file_for_html_and_activations_is_refused_before_the_run(tmp_path, capsys):
    same = tmp_path / "out.npz"
    status, _, err = run_main(
        capsys,
        "model",
        "accuracy.workflows.model.zoo:small_cnn",
        "--inputs",
        "x=2x3x8x8",
        "--html",
        same,
        "--save-activations",
        same,
    )
    assert status == 2 and "same file" in err and not same.exists()


@pytest.mark.slow  # imports transformers, exports to ONNX
def test_a_users_factory_imports_transformers_plainly_and_the_default_ports_run_on_it(user):
    """A Llama decoder from the user's own module: it ran only through the zoo's import helper, and
    the default ports stopped the whole command on the ONNX export's error (TorchScript's exporter
    fails on it; the dynamo exporter takes it). The ONNX ports judge parents (blocks, attention,
    MLPs) as well as leaves, and a correct export flags nothing."""
    ids = str(write_arrays(user / "ids.npz", {"input_ids": np.arange(8).reshape(1, 8)}))
    report = run_model(ModelRun("mymodels:llama_tiny", ids))
    ort, noopt, torchscript = report.ports
    assert report.absent == [] and report.within_rounding
    assert torchscript.port == "torchscript" and torchscript.flagged == 0 and torchscript.compared == 24
    for port in (ort, noopt):
        judged = {r.path for r in port.layers if r.verdict == "within rounding"}
        assert port.compared == 28 and port.flagged == 0, port.port
        assert {"layers.0", "layers.0.self_attn", "layers.1.mlp", "layers.1.self_attn.q_proj", "norm"} <= judged
        (skipped,) = [r for r in port.layers if r.verdict == "not compared"]
        assert skipped.path == "rotary_emb" and "constant at export" in skipped.reason
    reasons = {r.path: r.reason for r in torchscript.layers if r.verdict == "not compared"}
    assert set(reasons) == {"rotary_emb", "layers.0", "layers.0.self_attn", "layers.1", "layers.1.self_attn"}
    assert "returns a tuple" in reasons["rotary_emb"] and "other arguments" in reasons["layers.0"]
    (threads,) = run_model(ModelRun("mymodels:llama_tiny", ids, ["threads:1"])).ports  # its own modules: every unit
    assert threads.compared == 29 and threads.flagged == 0


@pytest.mark.slow  # two torchvision models exported and judged, 7 s each
def test_stock_mobilenets_against_themselves_and_onnx_runtime_compare_every_layer_and_flag_nothing(
    tmp_path, monkeypatch, two_torch_threads
):
    """The stock classes at a quarter of their width. Against itself (threads:1), MobileNetV3-Small
    judges the same 208 units (its 19 in-place Hardswish among them) in a third of the time of the
    full width, which docs/models.md reports. Against ONNX Runtime: their blocks nest Sequentials
    (`features.1.conv.0.0`), a name the ONNX node mapping did not follow: MobileNetV3-Small
    compared 120 of its 205 units at half width, and MobileNetV2's first depthwise conv joined the
    ReLU6 unit before it, flagged beyond rounding at 5e7 times the threshold against a correct ONNX
    Runtime. Both ports of V3 in one run: one reference run, as a user's run of both would be."""
    (tmp_path / "mobilenets.py").write_text(
        "import torch, torchvision\n\n\ndef v2():\n    torch.manual_seed(0)\n"
        "    return torchvision.models.mobilenet_v2(weights=None, width_mult=0.25)\n\n\n"
        "def v3():\n    torch.manual_seed(0)\n"
        "    return torchvision.models.mobilenet_v3_small(weights=None, width_mult=0.25)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    report = run_model(ModelRun("mobilenets:v3", "x=1x3x32x32", ["threads:1", "onnxruntime"]))
    threads, ort = report.ports
    assert threads.port == "threads:1" and ort.port == "onnxruntime" and report.within_rounding
    assert threads.flagged == 0 and threads.compared == 208  # 141 leaves, 67 parents
    assert [r.path for r in ort.layers if r.verdict == "not compared"] == []
    assert ort.compared == 173 and ort.flagged == 0
    report = run_model(ModelRun("mobilenets:v2", "x=1x3x32x32", ["onnxruntime"]))
    (ort,) = report.ports
    assert [r.path for r in ort.layers if r.verdict == "not compared"] == ["classifier.0"]
    assert ort.compared == 159 and ort.flagged == 0 and report.within_rounding


def test_inf_in_the_inputs_is_data_judged_on_the_finite_part(user):
    """An inf in one input row reached the exact GEMM ("entries span more than the float64
    exponent range") as a traceback; now the row it reaches carries inf and NaN like the
    reference's, and the rest is judged for rounding."""
    x = np.random.default_rng(1).normal(size=(4, 16)).astype(np.float32)
    x[1, 3] = np.inf
    inputs = str(write_arrays(user / "input.npz", {"input": x}))
    report = run_model(ModelRun("mymodels:in_place", inputs, ["threads:1", "onnxruntime"]))
    assert report.nonfinite == {"inputs": {"input": 1}, "weights": {}, "output": 8}  # row 1 of the 8 outputs per row
    for port in report.ports:
        assert port.flagged == 0 and port.compared == 5 and port.end_to_end.verdict == "within rounding"
        first = port.layers[0]
        assert "32 output element(s) depend on non-finite inputs (x: 1)" in first.reason
        assert 0 < port.output["relative_error"] < 1e-6  # the finite rows, at float32's rounding
    assert report.within_rounding


def test_an_activations_file_of_another_dtype_or_byte_order(tmp_path, capsys):
    """An int32 `/in0` ended in torch's 'mat1 and mat2 must have the same dtype' traceback, a
    big-endian one in numpy's byte-order ValueError."""
    from accuracy.workflows.model.zoo import small_cnn

    inputs = example_inputs("small_cnn")
    calls, out = record(small_cnn().eval(), inputs)
    arrays = activations(calls, out)
    x = write_arrays(tmp_path / "x.npz", inputs)
    spec = "accuracy.workflows.model.zoo:small_cnn"
    np.savez(tmp_path / "int.npz", **(arrays | {"fc/in0": arrays["fc/in0"].astype(np.int32)}))
    status, _, err = run_main(capsys, "model", spec, "--inputs", x, "--activations", f"p={tmp_path / 'int.npz'}")
    assert status == 2 and "'fc/in0' holds int32 values, the model's are float32" in err
    np.savez(tmp_path / "big.npz", **(arrays | {"fc/in0": arrays["fc/in0"].astype(">f4")}))
    status, out_text, _ = run_main(capsys, "model", spec, "--inputs", x, "--activations", f"p={tmp_path / 'big.npz'}")
    assert status == 0 and "p [float32]: every compared layer within rounding (8 of 8 units compared" in out_text


def _rms_norm64(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return w.astype(np.float64) * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)


def test_the_float64_reference_keeps_a_models_own_float32_casts_in_float64(user):
    """The "float64 model" kept HF's float32 casts: its RMSNorm differed from the float64 formula
    by 2e-7 relative, and every port's RMSNorm read max ulp 0, typical ratio 0."""
    import mymodels

    from accuracy.core.dtypes import FORMATS
    from accuracy.workflows.model.trace import run_in

    model = mymodels.casting_norm()
    x = np.random.default_rng(0).normal(size=(4, 32)).astype(np.float32)
    _, out = run_in(model, {"input": x}, FORMATS["float64"])
    exact = _rms_norm64(x, model[0].weight.detach().numpy())
    assert out.dtype == torch.float64 and np.max(np.abs(out.numpy() - exact) / np.abs(exact)) < 1e-15
    _, out32 = run_in(model, {"input": x}, FORMATS["float32"])  # a port's own dtype keeps the casts
    assert out32.dtype == torch.float32 and np.max(np.abs(out32.numpy() - exact) / np.abs(exact)) > 1e-9
    report = run_model(ModelRun("mymodels:casting_norm", "input=4x32", ["threads:1"]))
    row = report.ports[0].layers[0]
    assert row.max_ulp > 0 and row.typical_ratio > 0 and row.verdict == "within rounding"


@pytest.mark.slow  # imports transformers
def test_hf_llama_rms_norm_reference_is_its_float64_formula():
    from accuracy.workflows.model.torchvision_import import import_transformers

    import_transformers()
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from accuracy.core.dtypes import FORMATS
    from accuracy.workflows.model.trace import run_in

    norm = LlamaRMSNorm(32, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 1.5, 32))
    model = nn.Sequential(norm).eval()
    x = np.random.default_rng(0).normal(size=(4, 32)).astype(np.float32)
    _, out = run_in(model, {"input": x}, FORMATS["float64"])
    exact = _rms_norm64(x, norm.weight.detach().numpy())
    assert np.max(np.abs(out.numpy() - exact) / np.abs(exact)) < 8 * np.finfo(np.float64).eps


def test_a_runtimes_own_end_to_end_activations_give_its_own_propagated_error(tmp_path):
    """A file whose layer keys are each layer run on PyTorch's inputs made an eps bug's error seem
    to vanish after the bad layer; `e2e/` keys carry the runtime's own end-to-end run."""
    from accuracy.workflows.model.zoo import small_cnn

    inputs = example_inputs("small_cnn")
    reference, port = small_cnn().eval(), small_cnn().eval()
    port.bn1.eps = 1e-3
    calls, _ = record(reference, inputs)
    arrays = {}
    for call in calls:  # each layer of the port on PyTorch's own inputs to it
        with torch.no_grad():
            arrays[call.key] = port.get_submodule(call.path)(*call.inputs).numpy()
        arrays |= {f"{call.key}/in{i}": t.numpy() for i, t in enumerate(call.inputs)}
    own_calls, own_out = record(port, inputs)  # and the port run whole
    arrays |= {f"e2e/{k}": v for k, v in activations(own_calls, own_out).items() if "/" not in k}
    arrays["output"] = arrays["fc"]
    x = write_arrays(tmp_path / "x.npz", inputs)
    file = write_arrays(tmp_path / "port.safetensors", arrays)
    (judged,) = run_model(
        ModelRun("accuracy.workflows.model.zoo:small_cnn", x, activations_files={"p": str(file)})
    ).ports
    assert judged.first_not_within == "bn1"
    fc = next(r for r in judged.layers if r.path == "fc")
    assert fc.propagated > 1e-5  # the port's own run carries bn1's error to its output
    assert judged.output["relative_error"] > 1e-5 and judged.end_to_end.verdict == "beyond rounding"


def test_a_leaky_relu_slope_is_named_with_the_fitted_slope(user):
    """TensorFlow's LeakyReLU slope 0.2 where the model has 0.1: every negative output twice its
    exact value, beyond rounding (it read "suspicious", 1.3e6x the threshold), and named."""
    import mymodels

    x = np.random.default_rng(0).normal(size=(4, 16)).astype(np.float32)
    port = mymodels.in_place()
    port[3].negative_slope = 0.2
    calls, out = record(port, {"input": x})
    file = write_arrays(user / "port.safetensors", activations(calls, out))
    inputs = str(write_arrays(user / "input.npz", {"input": x}))
    (judged,) = run_model(ModelRun("mymodels:in_place", inputs, activations_files={"p": str(file)})).ports
    row = next(r for r in judged.layers if r.path == "3")
    assert judged.first_not_within == "3" and row.verdict == "beyond rounding"
    assert row.cause.explains and row.cause.parameters == {"negative_slope": 0.2}
    assert "TensorFlow's default" in row.cause.words


@pytest.mark.slow  # a fresh process: what the terminal shows
def test_a_transformers_model_leaves_the_terminal_clean(tmp_path):
    """transformers imports torchao where the deploy extra installed it: its kernels' load failures
    and torch's notes on its enums were four lines on stderr of every Llama run."""
    from cli_runner import run_opbench

    ids = write_arrays(tmp_path / "ids.npz", example_inputs("llama_tiny"))
    done = run_opbench("model", "accuracy.workflows.model.zoo:llama_tiny", "--inputs", ids, "--port", "threads:1")
    # opbench's own word that it waits on a slow build (a loaded machine) is not the libraries' noise
    noise = [line for line in done.stderr.splitlines() if not line.startswith("opbench: building the model: ")]
    assert done.returncode == 0 and noise == [], done.stderr


def test_a_block_of_integer_inputs_that_computes_is_judged_on_its_typical_tier(tmp_path):
    """BERT's embeddings block takes token ids only, yet adds three lookups and normalizes: it is
    judged like any unit (a 1e-3 error beyond rounding, PyTorch's own float32 within), while a
    lookup alone stays exact."""
    from accuracy.core.dtypes import FORMATS
    from accuracy.judge.verdicts import WITHIN
    from accuracy.workflows.model.trace import run_reference
    from accuracy.workflows.model.unit import Unit, port_inputs
    from accuracy.workflows.model.units import LOOKUP_TIER, judge_unit
    from accuracy.workflows.model.zoo import bert2

    model, fmt = bert2().eval(), FORMATS["float32"]
    calls, _ = run_reference(model, example_inputs("bert2"), "the inputs")
    by_key = {c.key: c for c in calls}
    block, lookup = Unit([by_key["embeddings"]]), Unit([by_key["embeddings.word_embeddings"]])
    tensors = port_inputs(block.calls[0].inputs, fmt)
    with torch.no_grad():
        own = model.embeddings(*tensors).numpy()
    judged = judge_unit(block, tensors, fmt, {"torch": own, "off": own * np.float32(1 + 1e-3)})
    assert judged["torch"].judgement.verdict == WITHIN and judged["torch"].tier != LOOKUP_TIER
    assert judged["off"].judgement.verdict != WITHIN
    assert judged["off"].numbers["typical_ratio"] > 10
    ids = port_inputs(lookup.calls[0].inputs, fmt)
    with torch.no_grad():
        looked_up = model.embeddings.word_embeddings(*ids).numpy()
    assert judge_unit(lookup, ids, fmt, {"torch": looked_up})["torch"].tier == LOOKUP_TIER
    given = write_arrays(tmp_path / "ids.npz", example_inputs("bert2"))
    report = run_model(ModelRun("accuracy.workflows.model.zoo:bert2", given, ["threads:1"]))
    assert report.ports[0].flagged == 0
