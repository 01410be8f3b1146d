"""`opbench generate` on transformers' tiny decoders (random weights, accuracy.workflows.model.decoders):
a port whose greedy text leaves the reference's through a near-tie is called a tie, one that leaves
it through a bug is called not rounding at its step, and the layer sweep names the module.
Before the command existed none of this could be asked (`opbench model` judges one forward pass)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from accuracy.core.errors import OpbenchError
from accuracy.judge.verdicts import WITHIN
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model import generation
from accuracy.workflows.model.generation import TIE, run_generate
from tests.cli_runner import run_main

LLAMA = "accuracy.workflows.model.decoders:llama"
PROMPT = "5,17,42,8"
WAITING = re.compile(r"opbench: .* has run for \d+ s")  # accuracy.core.waiting's note
STEPS = 18  # the bfloat16 port's first other token is at step 17
# the tests of `llama_report` on one worker, so that it is computed once per `make test` (spread
# over the workers it was computed on two, ~40 s each under the suite's load)
ON_LLAMA_REPORT = pytest.mark.xdist_group("generate-llama-report")


@pytest.fixture(scope="module")
def llama_report():
    return run_generate(
        LLAMA, PROMPT, STEPS, ["bfloat16"], {"rope": "accuracy.workflows.model.decoders:rope_base"}
    ).as_dict()


def _port(report: dict, name: str) -> dict:
    return next(p for p in report["ports"] if p["port"] == name)


@ON_LLAMA_REPORT
def test_bfloat16_leaves_the_text_through_a_near_tie_and_is_called_a_tie(llama_report):
    port = _port(llama_report, "bfloat16")
    assert port["flagged"] == 0 and all(s["verdict"] == WITHIN for s in port["steps"])
    assert (port["first_flip"], port["flips"], port["ties"], port["first_not_rounding"]) == (17, 1, 1, None)
    step = port["steps"][17]
    assert step["flip"] == TIE and step["reference_token"] == llama_report["reference_tokens"][17]
    # the reference's margin is below one bfloat16 ulp of logits near 2; the band is two thresholds
    assert 0 < step["margin"] < 0.01 < 0.4 < step["band"] < 0.6
    assert step["flip_words"] == f"a tie: margin {step['margin']:.2g}, band {step['band']:.2g}"


@ON_LLAMA_REPORT
def test_a_wrong_rope_base_is_not_rounding_at_its_step_and_module(llama_report):
    port = _port(llama_report, "rope")
    assert port["dtype"] == "float32" and port["flagged"] == STEPS and port["first_beyond"] == 0
    assert port["first_not_rounding"] == 4
    step = port["steps"][4]
    assert step["flip"] == "not rounding" and 0.2 < step["margin"] < 0.3 and step["band"] < 1e-4
    assert step["flip_words"].startswith(f"not rounding: margin {step['margin']:.2g} at step 4")
    sweep = port["layer_sweep"]
    assert (sweep["tokens"], sweep["first_not_within"]) == (4, "model.rotary_emb")
    assert sweep["cause"]["name"] == "rope base" and sweep["cause"]["explains"]
    assert abs(sweep["cause"]["parameters"]["theta"] - 5e5) <= 5e4  # the hand port's 500,000 for 10,000


@ON_LLAMA_REPORT
def test_the_answer_reads_in_three_lines_per_port(llama_report, capsys):
    from accuracy.workflows.model.generation import GenerateReport

    report = GenerateReport(**{k: llama_report[k] for k in ("model", "prompt", "steps")}, tokens=[], ports=[])
    report.ports = llama_report["ports"]
    lines = report.answers()
    assert lines[1].startswith("rope [float32]: NOT within rounding: 18 of 18 steps' logits flagged; another token at ")
    assert lines[2].startswith("  step 4: token ") and ": not rounding: margin 0.2" in lines[2]
    assert lines[3].startswith("  step 0 first not within rounding (")
    assert (
        "x): model.rotary_emb (LlamaRotaryEmbedding): explained by the rotary base theta = 5e+05 (Llama 3's)"
        in lines[3]
    )
    assert lines[4] == (
        "bfloat16 [bfloat16]: every step's logits within rounding (18 steps); "
        "another token at 1 of 18 steps, each a tie"
    )
    assert lines[5].startswith("  step 17: token ") and ": a tie: margin " in lines[5]
    assert all(len(line) <= 160 for line in lines)


@ON_LLAMA_REPORT
def test_a_runtimes_logits_file_is_judged_as_the_port_that_wrote_it(tmp_path, llama_report):
    """The bfloat16 port's own logits, written as a runtime writes them, get its verdicts."""
    from accuracy.workflows.model.decoders import llama
    from accuracy.workflows.model.generation_ports import torch_port

    text = np.array([[*map(int, PROMPT.split(",")), *llama_report["reference_tokens"]]])
    rows = torch_port("bfloat16", llama()).step_logits(text, 4, STEPS)
    path = tmp_path / "app.safetensors"
    write_arrays(path, {"logits": rows, "tokens": rows.astype(np.float64).argmax(-1).astype(np.int64)})
    report = run_generate(LLAMA, PROMPT, STEPS, [], None, {"app": str(path)}).as_dict()
    (port,) = report["ports"]
    assert port["dtype"] == "bfloat16"
    # its own text took another token at step 17: that step is judged, the next is on another text
    assert (port["first_flip"], port["ties"], port["compared"]) == (17, 1, STEPS)


@pytest.mark.parametrize(
    ("arrays", "words"),
    [
        ({"scores": np.zeros((3, 99), np.float32)}, "holds scores; expected a .npz or .safetensors file holding"),
        ({"logits": np.zeros((3, 98), np.float32)}, "logits is float32 [3, 98]; expected float [3, 99]"),
        ({"logits": np.zeros((3, 99), np.float32), "tokens": np.zeros(3)}, "tokens is float64 [3]"),
        ({"logits": np.zeros((3, 99), np.float32), "extra": np.zeros(1)}, "holds extra, logits"),
    ],
    ids=["no-logits", "wrong-vocab", "float-tokens", "extra-key"],
)
def test_a_bad_logits_file_is_one_line_and_exit_2(tmp_path, capsys, arrays, words):
    path = write_arrays(tmp_path / "bad.npz", arrays)
    result = run_main(capsys, "generate", LLAMA, "--inputs", PROMPT, "--steps", 3, "--logits", f"app={path}")
    assert result.returncode == 2 and result.stdout == ""
    # a loaded machine may take over 10 s to build the model, and opbench then says it is waiting
    (line,) = [line for line in result.stderr.splitlines() if not WAITING.fullmatch(line)]
    assert line.startswith("opbench: error: --logits app=") and words in line, result.stderr


def test_a_logits_file_that_holds_no_logits_is_refused_before_the_model_is_built(tmp_path, monkeypatch):
    path = write_arrays(tmp_path / "bad.npz", {"scores": np.zeros((3, 99), np.float32)})
    monkeypatch.setattr(generation, "load_model", lambda spec: pytest.fail("the model was built first"))
    with pytest.raises(OpbenchError, match="holds scores; expected"):
        run_generate(LLAMA, PROMPT, 3, logits_files={"app": str(path)})


def test_bad_prompts_and_steps_are_one_line():
    for inputs, steps, words in (("5,x", 3, "expected token ids"), ("5,-1", 3, "not negative"), ("5", 0, "give 1 to")):
        with pytest.raises(OpbenchError, match=words):
            run_generate(LLAMA, inputs, steps, ["float32"])


def test_the_json_answer_and_exit_0_on_a_correct_port(capsys):
    import json

    result = run_main(capsys, "generate", LLAMA, "--inputs", PROMPT, "--steps", 3, "--port", "threads:1", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (port,) = report["ports"]
    assert (port["port"], port["compared"], port["flagged"], port["flips"]) == ("threads:1", 3, 0, 0)
    assert report["reference_tokens"] == [11, 98, 52] and 0 < port["worst_ratio"] < 1


@pytest.mark.slow  # the dynamo exporter: tens of seconds for a tiny decoder
def test_onnx_runtime_decodes_the_reference_text_within_rounding():
    report = run_generate(LLAMA, PROMPT, 4, ["onnxruntime"]).as_dict()
    (port,) = report["ports"]
    assert report["absent_ports"] == [] and port["port"] == "onnxruntime" and port["dtype"] == "float32"
    assert (port["compared"], port["flagged"], port["flips"]) == (4, 0, 0) and 0 < port["worst_ratio"] < 1
