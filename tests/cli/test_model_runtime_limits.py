"""A runtime's known limit is told apart from a port's bug (issue "Trusted where nobody here looked").

PyTorch's and OpenVINO's sigmoid give 0 where exp(-x) overflows float32 (x below -88.72 and
-86.99): a SiLU there is millions of ulps from its exact value, their limit and not the port's.

ONNX Runtime computes SiLU as x * Sigmoid(x), and its MLAS Sigmoid keeps absolute accuracy (a
finding in docs/findings.md): where a SiLU's inputs reach sigmoid's tail, a correct port's SiLU
leaves the typical tier by 30-80x. Those units are `runtime limit`, not flagged, and the run exits
0; the same model ported with GELU in place of SiLU is still flagged, through the same runtime.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from cli_runner import run_main
from user_modules import user_module

from accuracy.judge.verdicts import BEYOND, RUNTIME_LIMIT, SUSPICIOUS, WITHIN
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model import onnx_graph
from accuracy.workflows.model.torchvision_import import import_transformers

FACTORIES = '''
import torch
import transformers
from torch import nn


def _mlp(act):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), act, nn.Linear(64, 8)).eval()
    with torch.no_grad():
        model[0].weight.mul_(20.0)  # pre-activations over [-30, 30]: sigmoid's tail
    return model


def silu_mlp():
    return _mlp(nn.SiLU())


def conv_bn_silu():
    """torchvision's Conv2dNormActivation as EfficientNet builds it: its SiLU runs in place (aten.silu_)."""
    from torchvision.ops import Conv2dNormActivation

    torch.manual_seed(0)
    block = Conv2dNormActivation(3, 16, 3, activation_layer=nn.SiLU)
    with torch.no_grad():
        block[0].weight.mul_(20.0)
        block[1].running_var.uniform_(0.5, 2.0)
        block[1].running_mean.uniform_(-1.0, 1.0)
    return nn.Sequential(block, nn.Conv2d(16, 8, 1)).eval()


def deep_silu_mlp():
    """Pre-activations down to -400: SiLU's exp(-x) overflows float32 below -88.72."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.SiLU(), nn.Linear(64, 8)).eval()
    with torch.no_grad():
        model[0].weight.mul_(200.0)
    return model


def gelu_mlp():
    return _mlp(nn.GELU())


def qwen2(act=None):
    """transformers' Qwen2 from a tiny config; initializer_range 0.3 puts the MLP's gate into
    sigmoid's tail, as trained weights do."""
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.3,
    )
    model = transformers.Qwen2ForCausalLM(config).eval()
    if act is not None:
        for layer in model.model.layers:
            layer.mlp.act_fn = act
    return model


def qwen2_gelu():
    return qwen2(nn.GELU())
'''


@pytest.fixture
def limits(tmp_path, monkeypatch):
    """The factories importable as `runtime_limit_models`, a module name no other test uses."""
    with user_module(tmp_path, monkeypatch, "runtime_limit_models", FACTORIES) as directory:
        yield directory


def _exported(tmp_path, factory: str, inputs: dict[str, np.ndarray]) -> str:
    """The buggy model exported to ONNX as a user's converter would: a port brought with --onnx."""
    import_transformers()  # torchvision, which transformers imports, beside this CPU torch
    import runtime_limit_models

    path = tmp_path / f"{factory}.onnx"
    onnx.save(onnx_graph.export(getattr(runtime_limit_models, factory)(), inputs), path)
    return f"bug={path}"


def _rows(report: dict, port: str) -> dict[str, dict]:
    return {r["path"]: r for r in next(p for p in report["ports"] if p["port"] == port)["layers"]}


@pytest.mark.slow
def test_a_correct_onnx_runtime_silu_is_a_runtime_limit_and_silu_as_gelu_is_still_flagged(limits, capsys):
    x = {"input": np.random.default_rng(0).normal(size=(4, 16)).astype(np.float32)}
    files = str(write_arrays(limits / "x.npz", x))
    bug = _exported(limits, "gelu_mlp", x)
    status, out, _ = run_main(
        capsys, "model", "runtime_limit_models:silu_mlp", "--inputs", files, "--port", "onnxruntime",
        "--onnx", bug, "--json",
    )  # fmt: skip
    report = json.loads(out)
    assert status == 1  # the GELU port
    correct, wrong = _rows(report, "onnxruntime")["1"], _rows(report, "bug")["1"]
    assert correct["verdict"] == RUNTIME_LIMIT
    assert correct["runtime_limit"].startswith("ONNX Runtime's Sigmoid (MLAS)")
    assert correct["max_ulp"] > 1e6  # far outside the correct kernels' tier: the limit, not rounding
    assert wrong["verdict"] in (BEYOND, SUSPICIOUS) and "runtime_limit" not in wrong
    port = next(p for p in report["ports"] if p["port"] == "onnxruntime")
    assert (port["flagged"], port["runtime_limits"], port["first_not_within"]) == (0, 1, None)


@pytest.mark.slow
def test_a_block_around_an_in_place_silu_is_a_runtime_limit_too(limits, capsys):
    """EfficientNet's Conv-BN-SiLU blocks run SiLU in place (aten.silu_): the limit's model did
    not reach the block's typical tier, which named the op silu only, and 22 blocks of
    EfficientNet-B0 stayed suspicious (up to 226x) on a correct ONNX Runtime port."""
    x = {"input": np.random.default_rng(0).normal(size=(1, 3, 16, 16)).astype(np.float32)}
    files = str(write_arrays(limits / "x.npz", x))
    status, out, _ = run_main(
        capsys, "model", "runtime_limit_models:conv_bn_silu", "--inputs", files, "--port", "onnxruntime", "--json"
    )
    rows = _rows(json.loads(out), "onnxruntime")
    assert status == 0
    assert rows["0"]["verdict"] == RUNTIME_LIMIT and rows["0"]["max_ulp"] > 1e3  # the block
    assert rows["0.2"]["verdict"] == RUNTIME_LIMIT  # its SiLU


@pytest.mark.slow
def test_pytorch_and_openvino_silu_flushing_below_minus_88_is_their_limit_not_a_port_bug(limits, capsys):
    """PyTorch against itself flags nothing: its SiLU gives 0 where exp(-x) overflows (the exact
    value is up to 2.6e-37, millions of ulps), and that is PyTorch's limit; OpenVINO's likewise."""
    pytest.importorskip("openvino")
    x = {"input": np.random.default_rng(0).normal(size=(4, 16)).astype(np.float32)}
    files = str(write_arrays(limits / "x.npz", x))
    status, out, _ = run_main(
        capsys, "model", "runtime_limit_models:deep_silu_mlp", "--inputs", files, "--port", "threads:1",
        "--port", "openvino", "--json",
    )  # fmt: skip
    report = json.loads(out)
    assert status == 0
    for port, words in (("threads:1", "PyTorch's own sigmoid/SiLU"), ("openvino", "OpenVINO's Sigmoid/Swish")):
        silu = _rows(report, port)["1"]
        assert silu["verdict"] == RUNTIME_LIMIT and silu["runtime_limit"].startswith(words)
        assert silu["max_ulp"] > 1e6
        summary = next(p for p in report["ports"] if p["port"] == port)
        assert (summary["flagged"], summary["runtime_limits"]) == (0, 1)


@pytest.mark.slow
def test_a_correct_onnx_runtime_port_of_qwen2_exits_0_with_its_silu_units_apart(limits, capsys):
    ids = {"input_ids": np.random.default_rng(0).integers(0, 128, (1, 16))}
    files = str(write_arrays(limits / "ids.npz", ids))
    bug = _exported(limits, "qwen2_gelu", ids)
    status, text, _ = run_main(
        capsys, "model", "runtime_limit_models:qwen2", "--inputs", files, "--port", "onnxruntime", "--onnx", bug
    )
    assert status == 1  # the GELU port is flagged ...
    lines = text.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("onnxruntime [float32]: no unit flagged")))
    assert "2 at its runtime's known limit" in lines[at]
    assert lines[at + 1] == "  runtime limit, not flagged: model.layers.0.mlp.act_fn, model.layers.1.mlp.act_fn"
    assert lines[at + 2].startswith("  cause: ONNX Runtime's Sigmoid (MLAS) keeps absolute, not relative, accuracy")
    assert any(line.startswith("bug [float32]: NOT within rounding") for line in lines)
    status, out, _ = run_main(
        capsys, "model", "runtime_limit_models:qwen2", "--inputs", files, "--port", "onnxruntime", "--json"
    )
    assert status == 0  # ... and the correct port alone exits 0
    rows = _rows(json.loads(out), "onnxruntime")
    assert {rows[f"model.layers.{i}.mlp.act_fn"]["verdict"] for i in (0, 1)} == {RUNTIME_LIMIT}
    assert all(r["verdict"] in (WITHIN, RUNTIME_LIMIT, "not compared") for r in rows.values())
