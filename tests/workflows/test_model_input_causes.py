"""Preprocessing causes (#42, the DJL seed): a port whose runtime prepared the image otherwise
gives its first layer another input (`conv1/in0` in its activations file). Every layer is within
rounding on the port's own inputs; the input judged against the model's names the cause."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.judge.verdicts import WITHIN
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.activations_file import activations
from accuracy.workflows.model.causes.inputs import ModelInput, _fit_normalized
from accuracy.workflows.model.report import ModelReport
from accuracy.workflows.model.rows import PortResult
from accuracy.workflows.model.sweep import ModelRun, run_model
from accuracy.workflows.model.trace import record
from accuracy.workflows.model.zoo import example_inputs, small_cnn

CNN = "accuracy.workflows.model.zoo:small_cnn"
MEAN = np.array([0.485, 0.456, 0.406], np.float32)[None, :, None, None]
STD = np.array([0.229, 0.224, 0.225], np.float32)[None, :, None, None]


def _image() -> np.ndarray:
    """small_cnn's seeded input as an image in [0, 1]."""
    return (example_inputs("small_cnn")["x"] * 0.25 + 0.5).clip(0, 1).astype(np.float32)


def _port(tmp_path, preprocess) -> PortResult:
    image = _image()
    calls, out = record(small_cnn().eval(), {"x": preprocess(image).astype(np.float32)})
    file = write_arrays(tmp_path / "port.safetensors", activations(calls, out))
    x = write_arrays(tmp_path / "x.npz", {"x": image})
    (port,) = run_model(ModelRun(CNN, x, activations_files={"port": str(file)})).ports
    return port


@pytest.mark.parametrize(
    ("preprocess", "name", "parameters"),
    [
        (lambda a: a[:, ::-1], "BGR for RGB", {}),
        (lambda a: a * 255, "input scale", {"scale": 255.0}),
        (lambda a: a / 255, "input scale", {"scale": 1 / 255}),
        (lambda a: np.round(a * 255) / 255, "uint8 input", {"levels": 255}),
        (lambda a: (a - MEAN) / STD, "input mean/std", {"mean, std": ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])}),
    ],
    ids=["bgr", "0-255", "0-1", "uint8", "imagenet-mean-std"],
)
def test_each_input_cause_injected_into_an_activations_file_is_named(tmp_path, preprocess, name, parameters):
    port = _port(tmp_path, preprocess)
    assert port.first_not_within is None  # each layer is within rounding on the port's own input
    (row,) = port.inputs
    assert (row.input, row.layer) == ("x", "conv1") and row.verdict != WITHIN
    cause = row.cause
    assert cause.explains and cause.name == name
    for key, wanted in parameters.items():
        np.testing.assert_allclose(np.array(cause.parameters[key], dtype=float), wanted, rtol=0.1)


def test_the_answer_says_the_input_is_not_the_models_and_why(tmp_path):
    port = _port(tmp_path, lambda a: a[:, ::-1])
    report = ModelReport("small_cnn", "eval", {}, [port])
    first, where, why = report.answers()
    assert first.startswith("port [float32]: every compared layer within rounding, but end to end beyond rounding")
    assert where == "  first not as the model's: its input x as conv1 received it: beyond rounding"
    assert why.startswith("  cause: explained by the channels in the other order (BGR for RGB); look closer: ")
    assert report.derivations()[0].startswith(
        "port [float32]: its input x (as conv1 received it) is not the model's: beyond rounding: "
        "explained by the channels in the other order (BGR for RGB); "
    )


def test_an_uncatalogued_input_change_gets_no_known_cause_with_its_nearest(tmp_path):
    wave = np.float32(1e-3) * np.sin(np.arange(_image().size, dtype=np.float32)).reshape(_image().shape)
    (row,) = _port(tmp_path, lambda a: a + wave).inputs
    assert row.verdict != WITHIN and not row.cause.explains and row.cause.ratio > 1e3


def test_the_same_input_is_within_rounding_with_no_cause(tmp_path):
    (row,) = _port(tmp_path, lambda a: a).inputs
    assert row.verdict == WITHIN and row.cause is None and "cause" not in row.to_json()


def test_ports_fed_the_reference_inputs_get_no_input_row():
    report = run_model(ModelRun(CNN, "x=2x3x8x8", ["threads:1"]))
    assert report.ports[0].inputs == []


@settings(max_examples=30, deadline=None)
@given(
    means=st.lists(st.floats(-2, 2), min_size=3, max_size=3),
    stds=st.lists(st.floats(0.05, 4), min_size=3, max_size=3),
)
def test_the_mean_and_std_fit_recovers_any_per_channel_normalization(means, stds):
    """The least-squares fit finds the mean and std a float32 port applied, to float32 rounding."""
    image = torch.from_numpy(_image())
    mean, std = (torch.tensor(v, dtype=torch.float32).reshape(1, 3, 1, 1) for v in (means, stds))
    port = ((image - mean) / std).numpy()
    fitted_means, fitted_stds = _fit_normalized(ModelInput(), [image], port)
    np.testing.assert_allclose(fitted_stds, stds, rtol=1e-5)
    np.testing.assert_allclose(fitted_means, means, rtol=1e-5, atol=1e-5 * max(stds))
