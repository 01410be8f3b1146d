"""Error by position (issue 59, item 3): a flagged unit of a model fed token sequences gives its
error at each position in --json and a plot on the page. Llama 3's rope scaling ignored is exact at
position 0 and grows with position (mlx-vlm PR #1710: cosine 1 at 0, 0.757 at 8,192); before, the
row held one number for all positions."""

from __future__ import annotations

import copy

import numpy as np

from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.activations_file import activations
from accuracy.workflows.model.causes.families import _scaling_ignored
from accuracy.workflows.model.decoders import base_inputs, llama3_base
from accuracy.workflows.model.positions import error_by_position, sequence_length
from accuracy.workflows.model.sweep import run_model
from accuracy.workflows.model.trace import record


def test_ignored_rope_scaling_is_exact_at_position_0_and_grows_with_position(tmp_path):
    from accuracy.report.model_page import model_page

    model, given = llama3_base(), base_inputs("transformers_llama3")
    port = copy.deepcopy(model)
    port.rotary_emb = _scaling_ignored(model.rotary_emb, None)
    path = write_arrays(tmp_path / "port.safetensors", activations(*record(port, given)))
    report = run_model("accuracy.workflows.model.decoders:llama3_base", dict(given), [], {"port": str(path)})
    (result,) = report.ports
    assert result["first_not_within"] == "rotary_emb"
    row = next(r for r in result["layers"] if r["path"] == "rotary_emb")
    errors = row["error_by_position"]
    assert len(errors) == 8 and errors[0] == 0.0
    # the low frequencies rescaled: the angles' error grows with position (the cosines' oscillates)
    assert 0.1 < errors[1] < 0.2 and max(errors[5:]) > 0.9
    assert all(r.get("error_by_position") is None for r in result["layers"] if r["verdict"] == "within rounding")
    assert "alt='error by position'" in model_page(report.as_dict(), report.notes())


def test_the_position_axis_is_the_first_after_the_batch_of_the_sequences_length():
    assert sequence_length({"input_ids": np.zeros((1, 8), np.int64)}) == 8
    assert sequence_length({"x": np.zeros((1, 8), np.float32)}) is None
    reference = np.ones((1, 4, 3))
    output = reference.copy()
    output[0, 2] += 0.5
    assert error_by_position(output, reference, 4) == [0.0, 0.0, 0.5, 0.0]
    assert error_by_position(output, reference, 5) is None
