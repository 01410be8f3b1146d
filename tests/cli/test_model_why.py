"""Why, where users see it (#42): the cause of a flagged unit in the answer line, the table's
cause column, `--json` (strict) and the HTML page, for a port handed over as a runtime's
activations with one known bug: Keras' BatchNorm eps."""

from __future__ import annotations

import json

import pytest

from accuracy.cli.main import main
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.activations_file import activations
from accuracy.workflows.model.trace import record
from accuracy.workflows.model.zoo import example_inputs, small_cnn

CNN = "accuracy.workflows.model.zoo:small_cnn"


@pytest.fixture(scope="module")
def keras_eps_port(tmp_path_factory):
    """(the inputs file, the activations file) of small_cnn with bn1's eps at Keras' 1e-3."""
    folder = tmp_path_factory.mktemp("port")
    model = small_cnn().eval()
    model.bn1.eps = 1e-3
    inputs = example_inputs("small_cnn")
    calls, out = record(model, inputs)
    return (
        str(write_arrays(folder / "x.npz", inputs)),
        str(write_arrays(folder / "port.safetensors", activations(calls, out))),
    )


def _model(capsys, port, *extra) -> tuple[int, str]:
    x, file = port
    status = main(["model", CNN, "--inputs", x, "--activations", f"port={file}", *extra])
    return status, capsys.readouterr().out


def test_the_text_names_the_cause_in_the_answer_the_table_and_why(capsys, keras_eps_port):
    status, out = _model(capsys, keras_eps_port)
    assert status == 1
    lines = out.splitlines()
    first = lines.index(next(line for line in lines if line.startswith("port [float32]: NOT within rounding")))
    assert lines[first + 1].startswith("  first not within rounding: bn1 (BatchNorm2d (batch_norm)): beyond rounding")
    assert lines[first + 2].startswith("  cause: explained by BatchNorm2d eps = 0.001 (Keras'")
    header = next(line for line in lines if line.startswith("layer "))
    assert header.split()[-1] == "cause"
    (bn1,) = [line for line in lines if line.startswith("bn1 ")]
    assert bn1.rstrip().endswith("normalization eps (eps = 0.001)")
    # units within rounding: an empty cause cell
    (conv1,) = [line for line in lines if line.startswith("conv1 ")]
    assert conv1.rstrip().endswith("9.38e-08")
    # the derivation of the threshold only when asked for
    assert "  bn1: explained by BatchNorm2d eps = 0.001" not in out and "--explain-verdicts says how" in out
    status, explained = _model(capsys, keras_eps_port, "--explain-verdicts")
    assert status == 1 and "  bn1: explained by BatchNorm2d eps = 0.001" in explained
    assert "worst-case bound at float32 (gamma_6 * " in explained


def test_json_carries_the_cause_per_flagged_unit_only(capsys, keras_eps_port):
    status, out = _model(capsys, keras_eps_port, "--json")
    assert status == 1
    report = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    rows = {r["path"]: r for r in report["ports"][0]["layers"]}
    cause = rows["bn1"]["cause"]
    assert {"name", "parameters", "ratio", "alternatives"} <= set(cause)
    assert cause["name"] == "normalization eps" and cause["explains"] is True
    assert abs(cause["parameters"]["eps"] - 1e-3) <= 1e-4
    assert cause["ratio"] < 1 and cause["alternatives"] == []
    assert [p for p, r in rows.items() if "cause" in r] == ["bn1"]


def test_the_html_page_shows_the_cause(capsys, tmp_path, keras_eps_port):
    page = tmp_path / "model.html"
    status, _ = _model(capsys, keras_eps_port, "--html", str(page))
    assert status == 1
    text = page.read_text()
    assert "<th>cause</th>" in text
    assert "<td>normalization eps (eps = 0.001)</td>" in text
    assert "explained by BatchNorm2d eps = 0.001 (Keras&#x27; and TensorFlow&#x27;s default)" in text
