"""Error by position (issue 59, item 3): a flagged unit of a model fed token sequences gives its
error at each position in --json and a plot on the page. Llama 3's rope scaling ignored is exact at
position 0 and grows with position (mlx-vlm PR #1710: cosine 1 at 0, 0.757 at 8,192); before, the
row held one number for all positions."""

from __future__ import annotations

import copy

import numpy as np

from accuracy.core.dtypes import FORMATS
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.activations_file import activations
from accuracy.workflows.model.answer import cause_words
from accuracy.workflows.model.causes import explain, families
from accuracy.workflows.model.causes.attention import AttentionChange, with_change
from accuracy.workflows.model.causes.cause import GROWS, WINDOW
from accuracy.workflows.model.causes.families import _scaling_ignored
from accuracy.workflows.model.causes.positional import FIRST, positional_shape
from accuracy.workflows.model.decoders import base_inputs, base_model, llama3_base
from accuracy.workflows.model.family_selftest import FLOAT32, _first_applicable
from accuracy.workflows.model.positions import error_by_position, sequence_length
from accuracy.workflows.model.sweep import ModelRun, run_model
from accuracy.workflows.model.trace import record, run_reference
from accuracy.workflows.model.unit import Unit, port_inputs


def test_ignored_rope_scaling_is_exact_at_position_0_and_grows_with_position(tmp_path):
    from accuracy.report.model_page import model_page

    model, given = llama3_base(), base_inputs("transformers_llama3")
    port = copy.deepcopy(model)
    port.rotary_emb = _scaling_ignored(model.rotary_emb, None)
    path = write_arrays(tmp_path / "port.safetensors", activations(*record(port, given)))
    report = run_model(ModelRun("accuracy.workflows.model.decoders:llama3_base", dict(given), [], {"port": str(path)}))
    (result,) = report.ports
    assert result.first_not_within == "rotary_emb"
    row = next(r for r in result.layers if r.path == "rotary_emb")
    errors = row.error_by_position
    assert len(errors) == 8 and errors[0] == 0.0
    # the low frequencies rescaled: the angles' error grows with position (the cosines' oscillates)
    assert 0.1 < errors[1] < 0.2 and max(errors[5:]) > 0.9
    assert all(r.error_by_position is None for r in result.layers if r.verdict == "within rounding")
    assert "alt='error by position'" in model_page(report)


def test_the_position_axis_is_the_first_after_the_batch_of_the_sequences_length():
    assert sequence_length({"input_ids": np.zeros((1, 8), np.int64)}) == 8
    assert sequence_length({"x": np.zeros((1, 8), np.float32)}) is None
    reference = np.ones((1, 4, 3))
    output = reference.copy()
    output[0, 2] += 0.5
    assert error_by_position(output, reference, 4) == [0.0, 0.0, 0.5, 0.0]
    assert error_by_position(output, reference, 5) is None


def _port_file(tmp_path, model, given, path: str, changed) -> str:
    """An activations file of the model with the module at `path` replaced by `changed`."""
    port = copy.deepcopy(model)
    parent, _, name = path.rpartition(".")
    setattr(port.get_submodule(parent) if parent else port, name, changed)
    return str(write_arrays(tmp_path / "port.safetensors", activations(*record(port, given))))


def test_an_error_that_grows_with_position_points_the_causes_to_the_rotary_scaling(tmp_path):
    """Llama 3's rope scaling ignored: before, "rope base" (theta 10,000, the model's own) was named
    first, and nothing said how the error ran along the sequence."""
    model, given = llama3_base(), base_inputs("transformers_llama3")
    path = _port_file(tmp_path, model, given, "rotary_emb", _scaling_ignored(model.rotary_emb, None))
    report = run_model(ModelRun("accuracy.workflows.model.decoders:llama3_base", dict(given), [], {"port": path}))
    row = next(r for r in report.ports[0].layers if r.path == "rotary_emb")
    cause = row.cause
    assert cause.name == "rope scaling ignored" and cause.explains
    seen = cause.positions
    assert (seen["shape"], seen["window"]) == (GROWS, None) and seen["onset"] <= 1
    assert seen["words"].startswith("its error grows with position (0 at position 0, 0.97 at 6)")
    assert seen["words"] in cause_words(cause)


def test_an_error_that_starts_at_the_window_points_the_causes_to_the_window(tmp_path):
    """Mistral with a window of 3 keys for 4 (off by one): exact until position 3, then far off."""
    model, given = base_model("transformers_mistral"), base_inputs("transformers_mistral")
    attention = model.layers[0].self_attn
    path = _port_file(tmp_path, model, given, "layers.0.self_attn", with_change(attention, AttentionChange(window=3)))
    report = run_model(ModelRun("accuracy.workflows.model.decoders:mistral_base", dict(given), [], {"port": path}))
    result = report.ports[0]
    assert result.first_not_within == "layers.0.self_attn"
    cause = next(r for r in result.layers if r.path == "layers.0.self_attn").cause
    assert (cause.name, cause.parameters, cause.explains) == ("sliding window off by one", {"window": 3}, True)
    assert cause.positions == {
        "shape": WINDOW,
        "onset": 3,
        "window": 4,
        "words": "its error starts at position 3, inside the sliding window of 4 keys: the window",
    }


def test_an_error_there_from_position_0_is_no_windows():
    """Grouped-query heads tiled on Mistral: wrong at every position, so the window entries are not
    tried (each width a float64 evaluation before), and the answer says why."""
    model, given = base_model("transformers_mistral"), base_inputs("transformers_mistral")
    calls, _ = run_reference(model, given, "mistral")
    entry = next(c for c in families.CAUSES if c.name == "grouped-query heads tiled")
    call, _, output, context = _first_applicable(entry, calls, dict(model.named_modules()))
    cause = explain(Unit([call]), port_inputs(call.inputs, FLOAT32), FLOAT32, "port", output, None, context)
    assert cause.name == "grouped-query heads tiled" and cause.positions["shape"] == FIRST
    skipped = {s.name: s.reason for s in cause.skipped}
    windows = {"sliding window dropped", "sliding window off by one", "sliding window width"}
    assert windows <= set(skipped)
    assert skipped["sliding window width"].startswith("its error is there from position 0")


def _shape(errors: list[float], window: int | None = None, fmt: str = "float32"):
    """The shape `positional_shape` sees for an output off by `errors` (normwise) at each position."""
    reference = np.ones((1, len(errors), 4))
    module = type("Attention", (), {"sliding_window": window})()
    return positional_shape(
        reference * (1 + np.asarray(errors))[None, :, None], reference, len(errors), FORMATS[fmt], module
    )


def test_only_an_error_far_off_at_position_0_rules_the_window_out():
    windowed = next(c for c in families.CAUSES if c.name == "sliding window dropped")
    # tiled heads: far off from position 0
    assert _shape([0.82, 1.6, 1.2, 1.0, 0.95, 0.9, 1.1, 0.95], 4).excludes(windowed)
    # a barely flagged unit: its rounding at position 0 near its largest error, in bfloat16
    barely = _shape([0.04, 0.04, 0.05, 0.04, 0.09, 0.08, 0.09, 0.08], 4, "bfloat16")
    assert barely.kind == FIRST and barely.excludes(windowed) is None
    # a long window dropped: exact before it, then rising slowly (one more key at a time)
    rising = _shape([0.0] * 16 + [0.001 * k for k in range(1, 17)], 16)
    assert rising.kind == GROWS and rising.excludes(windowed) is None
    # its words say what was seen, not the rotary frequencies, where the window explains
    assert rising.as_dict(windowed)["words"] == "its error grows with position (0 at position 0, 0.016 at 31)"
    assert rising.as_dict()["words"].endswith(": the rotary frequencies or their scaling")


def test_a_unit_without_a_sequence_needs_no_rank_correlation(monkeypatch):
    """Only an error that starts after position 0 is ranked (scipy.stats' Spearman rho, 0.5 CPU-s to
    import): the cause search of a unit with no sequence (`opbench check linear`) or an error there
    from position 0 never imports it."""
    import sys

    monkeypatch.setitem(sys.modules, "scipy.stats", None)  # `from scipy.stats import ...` fails
    reference, module = np.ones((2, 8, 4)), type("Linear", (), {})()
    assert positional_shape(reference * 1.1, reference, None, FORMATS["float32"], module) is None
    assert _shape([0.82, 1.6, 1.2, 1.0, 0.95, 0.9, 1.1, 0.95], 4).kind == FIRST
