"""The cause search evaluates each changed reference once, on the copy the change made: rounded
where it is (`trace.converted_in_place`), not copied a second time, with the same bits as the
copy gave, and the model's own modules untouched."""

from __future__ import annotations

import copy

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.core.dtypes import get_format
from accuracy.workflows.model import units
from accuracy.workflows.model.causes import Context, _fitted, causes
from accuracy.workflows.model.trace import LayerCall
from accuracy.workflows.model.unit import Unit, port_inputs


def _tied() -> torch.nn.Module:
    first, second = torch.nn.Linear(6, 6), torch.nn.Linear(6, 6)
    second.weight = first.weight  # tied: one rounded tensor for both, as the copy has
    return torch.nn.Sequential(first, torch.nn.Tanh(), second)


def _batch_norm() -> torch.nn.Module:
    norm = torch.nn.BatchNorm1d(6).eval()
    norm.running_mean.normal_()
    norm.running_var.uniform_(0.5, 2.0)
    return norm


MODULES = {
    "linear": lambda: torch.nn.Linear(6, 5),
    "layer norm": lambda: torch.nn.LayerNorm(6),
    "batch norm (buffers)": _batch_norm,
    "tied weights": _tied,
    "gru (its own _apply)": lambda: torch.nn.GRU(6, 4, batch_first=True),
}


def _unit(kind: str, seed: int) -> tuple[Unit, list]:
    torch.manual_seed(seed)
    module = MODULES[kind]().double()
    x = torch.randn(3, 4, 6, dtype=torch.float64) if kind.startswith("gru") else torch.randn(4, 6, dtype=torch.float64)
    return Unit([LayerCall("m", "m", module, [x], None, [None])]), [x]


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(sorted(MODULES)), st.sampled_from(["float32", "float16", "bfloat16"]), st.integers(0, 2**16))
def test_a_throwaway_copy_rounded_in_place_gives_the_bits_of_a_second_copy(kind, fmt_name, seed):
    unit, inputs = _unit(kind, seed)
    fmt = get_format(fmt_name)
    tensors = port_inputs(inputs, fmt)
    original = unit.calls[0].module
    before = {name: t.clone() for name, t in original.state_dict().items()}
    expected = units.float64_reference(unit, tensors, fmt)
    throwaway = Unit([LayerCall("m", "m", copy.deepcopy(original), inputs, None, [None])])
    found = units.float64_reference(throwaway, tensors, fmt, throwaway={id(m) for m in original.modules()})
    assert found.dtype == expected.dtype and found.tobytes() == expected.tobytes()
    for name, tensor in original.state_dict().items():  # the model's module is never rounded
        assert tensor.dtype == before[name].dtype and torch.equal(tensor, before[name]), name


def test_a_change_that_holds_the_models_own_module_is_copied_not_rounded_in_place():
    unit, inputs = _unit("linear", 7)
    fmt = get_format("float32")
    original = unit.calls[0].module
    weight = original.weight.detach().clone()
    wrapper = torch.nn.Sequential(original)  # a change that wraps the module itself, as NormWritten does
    changed = Unit([LayerCall("m", "m", wrapper, inputs, None, [None])])
    found = units.float64_reference(changed, port_inputs(inputs, fmt), fmt, throwaway={id(original)})
    assert found.tobytes() == units.float64_reference(unit, port_inputs(inputs, fmt), fmt).tobytes()
    assert wrapper[0] is original and original.weight.dtype == torch.float64 and torch.equal(original.weight, weight)


def test_fitting_an_eps_copies_each_changed_layer_norm_once_with_the_same_fit(monkeypatch):
    """The 1-D search of a fitted parameter evaluates ~40 changed references: each was copied by
    the change and then again to be rounded; now only by the change."""
    unit, inputs = _unit("layer norm", 3)
    fmt = get_format("float32")
    tensors = port_inputs(inputs, fmt)
    port = copy.deepcopy(unit.calls[0].module).float()
    port.eps = 1e-3  # the port's bug: another eps
    with torch.no_grad():
        output = port(tensors[0]).double().numpy()
    [eps] = [c for c in causes() if c.name == "normalization eps"]
    copies: list[int] = []
    real = units.converted
    monkeypatch.setattr(units, "converted", lambda *a, **k: copies.append(1) or real(*a, **k))
    fitted = _fitted(eps, unit, tensors, fmt, output, Context(call=unit.calls[0]))
    assert copies == []
    monkeypatch.setattr(units, "converted_in_place", lambda *a: False)  # as before: a second copy each time
    assert _fitted(eps, unit, tensors, fmt, output, Context(call=unit.calls[0])) == fitted
    assert len(copies) >= 25  # the grid's 25 points at least
    assert np.isclose(fitted, 1e-3, rtol=0.1)


def test_a_module_with_a_conversion_of_its_own_is_copied(monkeypatch):
    unit, inputs = _unit("gru (its own _apply)", 1)
    fmt = get_format("float32")
    original = unit.calls[0].module
    throwaway = Unit([LayerCall("m", "m", copy.deepcopy(original), inputs, None, [None])])
    copies: list[int] = []
    real = units.converted
    monkeypatch.setattr(units, "converted", lambda *a, **k: copies.append(1) or real(*a, **k))
    units.float64_reference(throwaway, port_inputs(inputs, fmt), fmt, throwaway={id(original)})
    assert copies == [1]
