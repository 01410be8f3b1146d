"""`check` and `explain` name the cause of an op-level output beyond rounding (#42): the catalogue's
entries that apply to the module computing the op (accuracy.catalog.module_ops) are tried, as
`opbench model` tries them on a flagged layer; an output within rounding never gets one."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from accuracy.catalog.module_ops import MODULE_OPS
from accuracy.catalog.registry import get_op
from accuracy.cli.main import main
from accuracy.judge.verdicts import WITHIN
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.check import check
from accuracy.workflows.explain import explain
from accuracy.workflows.model.cause_selftest import parameter_close
from accuracy.workflows.model.causes import causes
from accuracy.workflows.model.op_causes import op_module


def _inputs(op_name: str) -> dict[str, np.ndarray]:
    op = get_op(op_name)
    return {k: v.astype(np.float32) for k, v in op.generate(np.random.default_rng(0), op.test_size).items()}


def _injected(cause, module, inputs) -> np.ndarray | None:
    """The op's output with the entry injected; None where the entry cannot change this op's output
    in place (a weight not square, a padding that changes the shape, an example equal to the op's)."""
    x = torch.from_numpy(inputs["x"])
    with torch.no_grad():
        right = module.float()(x).numpy()
        try:
            output = cause.change(module, cause.example).float()(x).numpy()
        except (ValueError, RuntimeError):
            return None
    return output if output.shape == right.shape and not np.array_equal(output, right) else None


def _injections() -> list[tuple[str, str]]:
    """Every (registry op, catalogue entry) that changes the op's output in place, but the entries
    that read the model around a layer (another layer's bias): a lone op has no other layer."""
    pairs = []
    for op_name in dict.fromkeys(e.op for e in MODULE_OPS):
        inputs = _inputs(op_name)
        module, _ = op_module(op_name, inputs)
        pairs += [
            (op_name, c.name)
            for c in causes()
            if c.applies(module) and not c.contextual and _injected(c, module, inputs) is not None
        ]
    return pairs


@pytest.mark.sweep  # one check per catalogue entry: the first in `make test-fast`, all in `make test`
@pytest.mark.parametrize(("op_name", "cause_name"), _injections())
def test_each_entry_that_applies_to_an_op_injected_into_its_output_is_named(op_name, cause_name):
    inputs = _inputs(op_name)
    module, _ = op_module(op_name, inputs)
    (cause,) = [c for c in causes() if c.name == cause_name]
    output = _injected(cause, module, inputs)
    (row,) = check(op=op_name, inputs=inputs, outputs={"port": output}).outputs
    assert row["verdict"] != WITHIN
    # the entry first, or beside an equal explanation (TF32 and float16 products: the same precision)
    named = next(c for c in row["cause"].entries() if c.name == cause_name)
    assert row["cause"].explains
    assert all(parameter_close(v, cause.example) for v in named.parameters.values())


def test_the_module_of_an_op_is_the_ops_computation():
    inputs = _inputs("linear")
    module, entry = op_module("linear", inputs)
    assert entry.op == "linear" and type(module).__name__ == "Linear"
    with torch.no_grad():
        ours = module(torch.from_numpy(inputs["x"]).double()).numpy()
    np.testing.assert_allclose(ours, get_op("linear").fp64(**{k: v.astype(np.float64) for k, v in inputs.items()}))
    assert op_module("sum", _inputs("sum")) is None  # no module computes a sum: no cause is tried


def test_check_names_keras_layer_norm_eps_in_text_and_json(capsys, tmp_path):
    inputs = _inputs("layer_norm")
    x, w, b = (torch.from_numpy(inputs[k]) for k in ("x", "w", "b"))
    keras = torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps=1e-3).numpy()
    right = torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b).numpy()
    files = [str(write_arrays(tmp_path / "in.npz", inputs)), str(tmp_path / "tf.npy"), str(tmp_path / "torch.npy")]
    np.save(files[1], keras)
    np.save(files[2], right)
    words = ["check", "layer_norm", "--inputs", files[0], "--output", f"tf={files[1]}", "--output", f"torch={files[2]}"]
    assert main(words) == 1
    text = capsys.readouterr().out
    assert "  tf: explained by LayerNorm eps = 0.001 (Keras' and TensorFlow's default); " in text
    assert "  torch: inside the worst-case bound" in text
    assert main([*words, "--json"]) == 1
    tf, torch_row = json.loads(capsys.readouterr().out)["outputs"]
    assert tf["cause"]["name"] == "normalization eps" and abs(tf["cause"]["parameters"]["eps"] - 1e-3) <= 1e-4
    assert torch_row["verdict"] == WITHIN and "cause" not in torch_row


def test_an_uncatalogued_bug_gets_the_nearest_cause_and_how_far_it_remains():
    inputs = _inputs("linear")
    wave = 1e-3 * np.sin(np.arange(64, dtype=np.float32)).reshape(32, 2)
    output = inputs["x"] @ inputs["W"].T + inputs["b"] + wave
    (row,) = check(op="linear", inputs=inputs, outputs={"port": output.astype(np.float32)}).outputs
    assert not row["cause"].explains and row["cause"].ratio > 100


def test_explain_names_the_keras_default_epsilon_of_layer_normalization():
    """TensorFlow's LayerNormalization() without epsilon= is a registry implementation beyond rounding."""
    report = explain("layer_norm", "float32")
    rows = {r["impl"]: r for r in report["implementations"]}
    keras = rows["tensorflow:keras LayerNormalization()"]
    assert keras["verdict"] != WITHIN
    assert keras["cause"].name == "normalization eps" and abs(keras["cause"].parameters["eps"] - 1e-3) <= 1e-4
    assert all("cause" not in r for r in rows.values() if r["verdict"] == WITHIN)
