"""Why an attention is flagged: the attention causes of the catalogue (causes/attention.py) name
the scale, the causal mask, the rotary convention and a low-precision softmax at the attention
module, with the fitted scale factor, on hand ports of the zoo's decoder and of transformers'
Llama and GPT-2; correct ports by other routes get no cause."""

from __future__ import annotations

import math
import sys
from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from accuracy.judge.verdicts import WITHIN
from accuracy.workflows.array_files import write_arrays
from accuracy.workflows.model.activations_file import activations
from accuracy.workflows.model.causes import _distance, causes
from accuracy.workflows.model.causes.attention import AttentionChange, is_attention, with_change
from accuracy.workflows.model.rows import PortResult
from accuracy.workflows.model.sweep import ModelRun, run_model
from accuracy.workflows.model.torchvision_import import import_transformers
from accuracy.workflows.model.trace import float64_throughout, record
from accuracy.workflows.model.unit import CauseFinding
from accuracy.workflows.model.zoo import DecoderAttention, bert2, decoder, example_inputs, gpt2_tiny, llama_tiny

SDPA = F.scaled_dot_product_attention


def _port(tmp_path, name: str, port, patches: tuple = (), inputs: dict | None = None) -> PortResult:
    """`port` run as a runtime would, its activations handed over, judged against zoo's `name`;
    `patches`: (object, attribute, value) in force while the port runs (a hand port's own code)."""
    inputs = example_inputs(name) if inputs is None else inputs
    with pytest.MonkeyPatch.context() as mp:
        for target, attribute, value in patches:
            mp.setattr(target, attribute, value)
        calls, out = record(port, inputs)
    folder = tmp_path / f"port{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    file = write_arrays(folder / "port.safetensors", activations(calls, out))
    x = write_arrays(folder / "x.npz", inputs)
    (judged,) = run_model(
        ModelRun(f"accuracy.workflows.model.zoo:{name}", x, activations_files={"port": str(file)})
    ).ports
    return judged


def _named(port: PortResult, path: str, cause: str) -> CauseFinding:
    assert port.first_not_within == path, [(r.path, r.verdict) for r in port.layers if r.verdict != WITHIN]
    found = next(r for r in port.layers if r.path == path).cause
    assert found.explains and found.verdict == WITHIN, found
    assert found.name == cause and found.alternatives == (), found
    return found


@pytest.mark.sweep  # one whole-model run per case: the first in `make test-fast`, all in `make test`
@pytest.mark.parametrize(
    ("bug", "cause"),
    [
        ({"scale_by_width": True}, "attention scale"),
        ({"causal": False}, "no causal mask"),
        ({"interleaved": True}, "interleaved rotary"),
        ({"softmax_dtype": torch.bfloat16}, "softmax in bfloat16"),
        ({"softmax_dtype": torch.float16}, "softmax in float16"),
    ],
    ids=["scale", "no-causal-mask", "interleaved-rotary", "bfloat16-softmax", "float16-softmax"],
)
def test_each_decoder_bug_is_named_at_its_attention(tmp_path, bug, cause):
    port = _port(tmp_path, "decoder", decoder(**bug))
    found = _named(port, "layers.0.self_attn", cause)
    if cause == "attention scale":  # 1/sqrt(32) for 1/sqrt(8): a factor 1/sqrt(4 heads)
        assert abs(found.parameters["factor"] - 0.5) <= 0.05, found
        said = "the attention scale 1/sqrt(d_model) for 1/sqrt(head_dim) (the scores 0.5 times the reference's; 4 heads"
        assert found.words.startswith(said), found


def _shifted_mask(model):
    """A hand port whose causal mask lets each query see the next key (triu(2) for triu(1))."""

    def forward(x, attention=model.layers[0].self_attn):
        b, t, width = x.shape
        q, k, v = (
            p(x).view(b, t, 4, 8).transpose(1, 2) for p in (attention.q_proj, attention.k_proj, attention.v_proj)
        )
        q, k = attention._rotary(q), attention._rotary(k)
        scores = (q @ k.transpose(-1, -2) * attention.scale).masked_fill(torch.ones(t, t).bool().triu(2), -math.inf)
        return attention.o_proj((torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, t, width))

    model.layers[0].self_attn.forward = forward
    return model


def test_a_shifted_causal_mask_is_named(tmp_path):
    port = _port(tmp_path, "decoder", _shifted_mask(decoder()))
    _named(port, "layers.0.self_attn", "causal mask shifted")


def _interleaved_rotary(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    """transformers' apply_rotary_pos_emb with the interleaved convention: pairs (2i, 2i+1) at frequency i."""
    half = cos.shape[-1] // 2
    cos, sin = (c[..., :half].repeat_interleave(2, -1).unsqueeze(unsqueeze_dim) for c in (cos, sin))

    def rotated(x):
        return torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)

    return q * cos + rotated(q) * sin, k * cos + rotated(k) * sin


def _sdpa_without_mask(query, key, value, attn_mask=None, is_causal=False, **kwargs):
    """A hand port's attention that drops the causal mask it is given."""
    return SDPA(query, key, value, **kwargs)


def _scaled_by_width(model, width: int = 32):
    for m in model.modules():
        if type(m).__name__ == "LlamaAttention":
            m.scaling = width**-0.5
    return model


def _llama_scaled_by_width(model):
    return _scaled_by_width(model), ()


def _llama_interleaved(model):
    modeling_llama = sys.modules[type(model.layers[0].self_attn).__module__]  # where its forward finds the rotary
    return model, ((modeling_llama, "apply_rotary_pos_emb", _interleaved_rotary),)


def _llama_without_mask(model):
    return model, ((F, "scaled_dot_product_attention", _sdpa_without_mask),)


@pytest.mark.sweep  # one whole-model run per case: the first in `make test-fast`, all in `make test`
@pytest.mark.parametrize(
    ("bug", "cause"),
    [
        (_llama_scaled_by_width, "attention scale"),
        (_llama_interleaved, "interleaved rotary"),
        (_llama_without_mask, "no causal mask"),
    ],
    ids=["scale", "interleaved-rotary", "no-causal-mask"],
)
def test_llama_port_bugs_are_named_at_its_attention(tmp_path, bug, cause):
    port, patches = bug(llama_tiny())
    found = _named(_port(tmp_path, "llama_tiny", port, patches), "layers.0.self_attn", cause)
    assert F.scaled_dot_product_attention is SDPA
    if cause == "attention scale":  # 1/sqrt(hidden 32) for 1/sqrt(head_dim 8)
        assert abs(found.parameters["factor"] - 0.5) <= 0.05, found


def _sdpa_unscaled(query, key, value, scale=None, **kwargs):
    """A hand port's attention that leaves its scores unscaled."""
    return SDPA(query, key, value, scale=1.0, **kwargs)


def test_gpt2_without_its_scale_is_named_with_the_factor(tmp_path):
    # GPT-2 scales by 1/sqrt(head_dim = 8)
    port = _port(tmp_path, "gpt2_tiny", gpt2_tiny(), ((F, "scaled_dot_product_attention", _sdpa_unscaled),))
    found = _named(port, "h.0.attn", "attention scale")
    assert abs(found.parameters["factor"] - math.sqrt(8)) <= 0.1 * math.sqrt(8), found
    assert "no scale for 1/sqrt(head_dim)" in found.words


SOFTMAX = F.softmax


def _bfloat16_softmax(x, dim=None, **kwargs):
    """A hand port's softmax in bfloat16, its probabilities back in the model's float32."""
    return SOFTMAX(x.bfloat16(), dim).to(x.dtype)


def test_bert_softmax_in_bfloat16_is_named_at_its_self_attention(tmp_path):
    port = _port(tmp_path, "bert2", bert2().eval(), ((F, "softmax", _bfloat16_softmax),))
    _named(port, "encoder.layer.0.attention.self", "softmax in bfloat16")
    rows = {r.path: r for r in port.layers}
    assert rows["encoder.layer.0.attention.output.dense"].cause is None


def _explicit_attention(fill: float):
    """A hand port's attention written out, its masked scores filled with `fill`."""

    def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kwargs):
        scores = query @ key.transpose(-2, -1) * (query.shape[-1] ** -0.5 if scale is None else scale)
        return torch.softmax(scores.masked_fill(~attn_mask, fill), -1) @ value

    return attention


@pytest.mark.parametrize(
    ("fill", "cause"), [(-math.inf, "mask fill -inf"), (-1e9, "mask fill finite")], ids=["-inf", "-1e9"]
)
def test_a_mask_fill_is_named_where_it_matters_on_padded_rows(tmp_path, fill, cause):
    """Left padding masks every key of the first queries: torch's SDPA gives those rows 0, a
    softmax over -inf gives NaN, over a finite fill an average of the masked values."""
    inputs = example_inputs("llama_tiny")
    inputs["attention_mask"] = np.ones_like(inputs["input_ids"])
    inputs["attention_mask"][:, :3] = 0
    patch = ((F, "scaled_dot_product_attention", _explicit_attention(fill)),)
    port = _port(tmp_path, "llama_tiny", llama_tiny(), patch, inputs)
    found = _named(port, "layers.0.self_attn", cause)
    assert "fully masked row (padding)" in found.words


@given(
    st.integers(1, 6),
    st.lists(st.floats(-1e3, 1e3), min_size=8, max_size=8),
    st.floats(1e-12, 1e-3),
    st.floats(0, 1e-3),
)
@settings(deadline=None)
def test_a_reference_with_the_ports_nan_rows_is_nearer_than_any_without(padded, values, off, elsewhere):
    """The rows a mask's fill decides are NaN in the port's output (a softmax over -inf): a changed
    reference NaN there is nearer than one finite there (the unchanged SDPA's zeros), however the
    two differ on the other rows. `relative` leaves non-finite elements out, so the two were ranked
    by float64 noise alone on the other rows (2.1112063419950e-07 against 2.1112063420613e-07 on
    llama_padded): which one a thread count, a host's kernels or a test before gave the lead."""
    output = np.tile(np.asarray(values, dtype=np.float64), (8, 1))
    output[:padded] = np.nan
    with_nan_rows = output * (1 + off)
    finite_there = output * (1 + off * elsewhere)
    finite_there[:padded] = 0.0
    assert _distance(output, with_nan_rows) < _distance(output, finite_there)


def test_correct_ports_get_no_cause(tmp_path):
    port = _port(tmp_path, "decoder", decoder(sdpa=True))
    assert port.flagged == 0 and all(r.cause is None for r in port.layers)
    report = run_model(
        ModelRun("accuracy.workflows.model.zoo:llama_tiny", _ids(tmp_path), ["threads:1", "torchscript"])
    )
    assert [p.flagged for p in report.ports] == [0, 0]
    assert all(row.cause is None for port in report.ports for row in port.layers)


def _ids(tmp_path):
    return write_arrays(tmp_path / "ids.npz", example_inputs("llama_tiny"))


# --- the changed attention, on its own -------------------------------------------------------


def _attention_call(model, name: str):
    calls, _ = record(model, example_inputs(name))
    return next(c for c in calls if is_attention(c.module))


def _changed_output(call, change: AttentionChange, module=None, inputs=None):
    with torch.no_grad():
        return call.run(with_change(call.module if module is None else module, change), inputs or call.inputs)


def _llama_eager():
    """llama_tiny on transformers' eager path: its mask added (0 / finfo.min), softmax(dtype=float32)."""
    model = llama_tiny()
    model.config._attn_implementation = "eager"
    return model


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (decoder, "decoder"),
        (llama_tiny, "llama_tiny"),
        (_llama_eager, "llama_tiny"),
        (gpt2_tiny, "gpt2_tiny"),
        (bert2, "bert2"),
    ],
    ids=["decoder", "llama-sdpa", "llama-eager", "gpt2", "bert"],
)
def test_no_change_is_the_module_itself_in_float64_too(make, name):
    call = _attention_call(make().eval(), name)
    with torch.no_grad():
        own = call.run(call.module, call.inputs)
    torch.testing.assert_close(_changed_output(call, AttentionChange()), own)  # SDPA written out: rounding apart
    module64 = call.module.double()
    inputs64 = [t.double() if t.is_floating_point() else t for t in call.inputs]
    with torch.no_grad(), float64_throughout():
        own64 = call.run(module64, inputs64)
        changed64 = _changed_output(call, AttentionChange(), module64, inputs64)
    assert changed64.dtype == torch.float64
    torch.testing.assert_close(changed64, own64, rtol=1e-13, atol=1e-15)


def test_the_eager_gpt2_mask_and_scale_are_changed_where_they_are_applied():
    """GPT-2's eager attention masks twice, by torch.where(its causal buffer, scores, finfo.min)
    and by adding the model's 0/finfo.min mask, and scales by a division: the changes reach all."""
    transformers = import_transformers()
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=64, n_embd=32, n_layer=1, n_head=4)
    config._attn_implementation = "eager"
    model = transformers.GPT2Model(config).eval()
    call = _attention_call(model, "gpt2_tiny")
    unmasked = call.module
    with torch.no_grad():
        unmasked.bias.fill_(True)
        (mask,) = (t for t in call.inputs if t.ndim == 4)
        assert mask.dtype == torch.float32 and mask.min() == torch.finfo(torch.float32).min
        expected = call.run(unmasked, [torch.zeros_like(t) if t is mask else t for t in call.inputs])
        unmasked.bias.copy_(torch.tril(unmasked.bias))
    torch.testing.assert_close(_changed_output(call, AttentionChange(causal="none")), expected)
    with torch.no_grad():
        unmasked.scale_attn_weights = False
        expected = call.run(unmasked, call.inputs)
        unmasked.scale_attn_weights = True
    torch.testing.assert_close(_changed_output(call, AttentionChange(factor=math.sqrt(8))), expected)


def test_attention_causes_apply_to_attention_modules_only():
    attention = [c for c in causes() if c.name in ("attention scale", "no causal mask", "softmax in bfloat16")]
    model = decoder()
    for path, module in model.named_modules():
        assert all(c.applies(module) for c in attention) == path.endswith("self_attn"), path
    llama, gpt2 = llama_tiny(), gpt2_tiny()
    assert all(c.applies(llama.layers[0].self_attn) and c.applies(gpt2.h[0].attn) for c in attention)
    others = (llama.layers[0], llama.layers[0].mlp, gpt2.h[0], torch.nn.MultiheadAttention(32, 4))
    assert not any(c.applies(m) for c in attention for m in others)


def test_the_eager_llama_scale_and_mask_are_changed_where_they_are_applied():
    call = _attention_call(_llama_eager(), "llama_tiny")
    (mask,) = (t for t in call.inputs if t.ndim == 4)
    assert mask.dtype == torch.float32 and mask.min() == torch.finfo(torch.float32).min  # the eager path's mask
    with torch.no_grad():
        call.module.scaling *= 2
        expected = call.run(call.module, call.inputs)
        call.module.scaling /= 2
    torch.testing.assert_close(_changed_output(call, AttentionChange(factor=2.0)), expected)
    with torch.no_grad():
        expected = call.run(call.module, [torch.zeros_like(t) if t is mask else t for t in call.inputs])
    torch.testing.assert_close(_changed_output(call, AttentionChange(causal="none")), expected)


@settings(deadline=None)
@given(factor=st.floats(0.05, 20.0), sdpa=st.booleans(), causal=st.booleans())
def test_a_scale_factor_is_the_module_with_its_scale_times_it(factor, sdpa, causal):
    """In float64, the changed decoder attention is the decoder attention with its scale times the
    factor, whether it writes its softmax out or calls SDPA, masked or not."""
    torch.manual_seed(0)
    module = DecoderAttention(32, 4, sdpa=sdpa, causal=causal).double()
    x = torch.randn(1, 8, 32, dtype=torch.float64)
    with torch.no_grad():
        changed = with_change(module, AttentionChange(factor=factor))(x)
        if sdpa:  # the scale SDPA takes by default, times the factor
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(F, "scaled_dot_product_attention", partial(SDPA, scale=factor * 8**-0.5))
                expected = module(x)
        else:
            module.scale *= factor
            expected = module(x)
    torch.testing.assert_close(changed, expected, rtol=1e-12, atol=1e-14)
