"""The conventions where today's decoder families differ from Llama, as causes: the rotary base
(a fitted theta) and rope scaling ignored, the attention soft-cap (dropped, or a fitted cap) and
the scale applied before it, the sliding window (dropped, off by one, another width: the mask
rebuilt under causes.attention's mode), grouped-query heads mapped tiled for interleaved, a norm's weight
offset (Gemma's 1 + w against w, or applied twice), and transformers' own GELU classes told by
what they compute (not torch.nn.GELU's class). Each change is made on a copy of the module
through what transformers' own forward reads (an attribute, a buffer), or through hooks on its
projections for the length of its call (what a port records of the projections is their own).
"""

from __future__ import annotations

import copy
import math
import weakref
from typing import Any

import torch
from torch import nn

from accuracy.workflows.model.causes.attention import AttentionChange, geometry, is_attention, with_change
from accuracy.workflows.model.causes.cause import GROWS, WINDOW, Cause, named, with_attribute
from accuracy.workflows.model.causes.normalization import norm_kind
from accuracy.workflows.model.kinds import cached
from accuracy.workflows.model.trace import float64_throughout

THETAS = {1e4: "Llama 2's, Mistral's", 5e5: "Llama 3's", 1e6: "Qwen2's, Qwen3's, Gemma 3's"}
ERF, TANH = "erf", "tanh"
SCALE_FORMATS = ("bfloat16", "float16")

# --- the rotary frequencies ----------------------------------------------------------------


def is_rotary(module: Any) -> bool:
    """transformers' rotary embedding: a module keeping `inv_freq` and the config it came from."""
    return isinstance(getattr(module, "inv_freq", None), torch.Tensor) and hasattr(module, "config")


def _theta(module: Any) -> float:
    return float(getattr(module.config, "rope_theta", 10_000.0))


def _with_theta(module: Any, theta: float) -> Any:
    """The rotary module with the default frequencies of base `theta` over its rotated width."""
    changed = copy.deepcopy(module)
    width = 2 * module.inv_freq.numel()
    changed.inv_freq = 1.0 / theta ** (torch.arange(0, width, 2, dtype=torch.float64) / width)
    changed.original_inv_freq = changed.inv_freq
    return changed


def _scaling_ignored(module: Any, value: Any) -> Any:
    if getattr(module, "rope_type", "default") == "default":
        raise ValueError("no rope scaling to ignore")
    changed = _with_theta(module, _theta(module))
    changed.attention_scaling = 1.0
    changed.rope_type = "default"
    return changed


def _head_dim(module: Any) -> int:
    config = module.config
    return int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)


def _fractions(module: Any, context: Any) -> list[float]:
    """The fractions of head_dim a port may rotate instead of the module's (an even number of
    channels): the whole head first for a partial module (its factor ignored), half for a whole one."""
    own, head = 2 * module.inv_freq.numel(), _head_dim(module)
    widths = sorted(
        (w for w in range(2, head + 1, 2) if w != own), key=lambda w: (w != (head if own < head else head // 2), w)
    )
    return [w / head for w in widths]


def _partial(module: Any, fraction: float) -> Any:
    """The rotary module rotating `fraction` of head_dim: the default frequencies of its theta over
    that width, cos and sin that wide (transformers' partial_rotary_factor)."""
    changed = _with_theta(module, _theta(module))
    width = round(fraction * _head_dim(module))
    changed.inv_freq = 1.0 / _theta(module) ** (torch.arange(0, width, 2, dtype=torch.float64) / width)
    changed.original_inv_freq = changed.inv_freq
    return changed


def _partial_words(module: Any, fraction: float) -> str:
    head, own = _head_dim(module), 2 * module.inv_freq.numel()
    return (
        f"rotary applied to {round(fraction * head)} of {head} channels (partial_rotary_factor {fraction:g}); "
        f"this model rotates {own}"
    )


# --- the embedding scale sqrt(hidden) ------------------------------------------------------


def _scale_of(module: Any) -> float | None:
    """The scale an embedding multiplies its rows by (Gemma 3's sqrt(hidden), BART's), or None."""
    scale = getattr(module, "embed_scale", None)
    if isinstance(scale, torch.Tensor) and scale.numel() == 1:
        scale = float(scale)
    return scale if isinstance(scale, float) and scale != 1.0 else None


def _with_scale(module: Any, scale: float) -> Any:
    changed = copy.deepcopy(module)
    own = module.embed_scale
    changed.embed_scale = torch.tensor(scale, dtype=torch.float64) if isinstance(own, torch.Tensor) else scale
    return changed


def _scale_rounded(module: Any, dtype: str) -> float:
    """The module's scale rounded to `dtype` (Gemma's normalizer in bfloat16: 55.5 for sqrt(3072))."""
    return float(torch.tensor(_scale_of(module), dtype=torch.float64).to(getattr(torch, dtype)))


def _scale_in(module: Any, dtype: str) -> Any:
    """The embedding whose scale is computed in `dtype`."""
    return _with_scale(module, _scale_rounded(module, dtype))


def _scale_formats(module: Any, context: Any) -> list[str]:
    """The formats whose rounding changes the module's scale."""
    return [d for d in SCALE_FORMATS if _scale_rounded(module, d) != _scale_of(module)]


def _scale_format_words(module: Any, dtype: str) -> str:
    rounded = _scale_rounded(module, dtype)
    return f"the embedding scale {_scale_of(module):.6g} (sqrt(hidden)) computed in {dtype}: {rounded:.6g}"


# --- the attention soft-cap and the scale before it ----------------------------------------


def _softcapped(module: Any) -> bool:
    return is_attention(module) and getattr(module, "attn_logit_softcapping", None) is not None


def _before_cap(module: Any, factor: float) -> Any:
    changed = copy.deepcopy(module)
    changed.scaling = module.scaling * factor
    return changed


def _scale_words(module: Any, factor: float) -> str:
    width = geometry(module)[1]  # type: ignore[index]
    own = module.scaling**-2
    as_width = abs(factor - math.sqrt(own / width)) <= 0.1 * factor
    said = f" (1/sqrt(head_dim = {width}) for 1/sqrt(query_pre_attn_scalar = {own:g}))" if as_width else ""
    return f"the attention scores {factor:.3g} times the reference's before the soft-cap{said}"


# --- the sliding window ---------------------------------------------------------------------


def window_of(module: Any) -> int | None:
    """The attention's sliding window: its own (Gemma 2's layers) or its config's (Mistral's)."""
    own = getattr(module, "sliding_window", getattr(getattr(module, "config", None), "sliding_window", None))
    return own if isinstance(own, int) and not isinstance(own, bool) and own > 0 else None


def _windowed(module: Any) -> bool:
    return is_attention(module) and window_of(module) is not None


def _other_widths(module: Any, context: Any) -> list[int]:
    """Widths other than the module's and the two beside it (those are "off by one"), up to twice
    it and below the keys the call sees (a wider window is no window)."""
    own = window_of(module) or 0
    inputs = getattr(getattr(context, "call", None), "inputs", None) or []
    keys = int(inputs[0].shape[-2]) if inputs and inputs[0].ndim >= 2 else 2 * own
    return _onset_allows(module, context, [w for w in range(1, min(2 * own, keys) + 1) if abs(w - own) > 1])


def _beside(module: Any, context: Any) -> list[int]:
    own = window_of(module) or 0
    return _onset_allows(module, context, [w for w in (own - 1, own + 1) if w > 0])


def _onset_allows(module: Any, context: Any, widths: list[int]) -> list[int]:
    """The widths whose error starts where the port's does: a window of w' keys for w changes the
    queries from position min(w, w') on (causes/positional.py); all of them where no onset was seen."""
    shape = getattr(context, "positions", None)
    if shape is None or shape.kind != WINDOW:
        return widths
    own = window_of(module) or 0
    return [w for w in widths if min(w, own) == shape.onset]


def _window_cause(name: str, words: Any, choices: Any) -> Cause:
    """A cause whose port's window is another width, chosen among `choices(module, context)`."""
    return Cause(
        name,
        (),
        lambda m, width, context: with_change(m, AttentionChange(window=width)),
        words,
        parameter="window",
        choices=choices,
        contextual=True,
        accepts=_windowed,
        positions=WINDOW,
    )


# --- grouped-query heads -------------------------------------------------------------------


def _grouped(module: Any) -> bool:
    groups = getattr(module, "num_key_value_groups", 1)
    # the query projection apart (Phi-3 fuses q, k and v into one: its heads are another layout)
    return is_attention(module) and isinstance(groups, int) and groups > 1 and hasattr(module, "q_proj")


def _tiled(module: Any, value: Any) -> Any:
    """The attention whose query head h reads key/value head h % kv_heads (tiled), where the
    reference's reads h // groups (interleaved, repeat_kv): its query heads permuted into the
    reference's slots for the call, and the outputs back to the port's order before o_proj."""
    heads, width = geometry(module)  # type: ignore[misc]
    groups = module.num_key_value_groups
    kv = heads // groups
    slot_head = torch.tensor([(j % groups) * kv + j // groups for j in range(heads)])  # slot j holds head π(j)
    head_slot = torch.argsort(slot_head)
    q_rows = (slot_head[:, None] * width + torch.arange(width)).flatten()
    o_rows = (head_slot[:, None] * width + torch.arange(width)).flatten()

    def queries(_: Any, args: Any, output: Any) -> Any:
        return torch.index_select(output, -1, q_rows)

    def outputs(_: Any, args: Any) -> Any:
        return (torch.index_select(args[0], -1, o_rows), *args[1:])

    return _hooked(module, [("q_proj", "forward", queries), ("o_proj", "pre", outputs)])


def _tiled_words(module: Any, value: Any) -> str:
    groups = module.num_key_value_groups
    kv = geometry(module)[0] // groups  # type: ignore[index]
    return (
        f"grouped-query heads tiled (query head h reads key/value head h % {kv}) "
        f"for interleaved (h // {groups}, transformers' repeat_kv)"
    )


_HOOKED: dict[Any, Any] = {}


def _hooked(module: Any, hooks: list[tuple[str, str, Any]]) -> Any:
    """A copy of `module` whose forward holds `hooks` (submodule, "forward" or "pre", hook) on its
    submodules for the length of each call, after any already there; same class name and paths."""
    cls = type(module)

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        handles = []
        for name, kind, hook in self.family_hooks:
            sub = getattr(self, name)
            handles.append(
                sub.register_forward_hook(hook) if kind == "forward" else sub.register_forward_pre_hook(hook)
            )
        try:
            return cls.forward(self, *args, **kwargs)
        finally:
            for handle in handles:
                handle.remove()

    if cls not in _HOOKED:
        _HOOKED[cls] = type(cls.__name__, (cls,), {"forward": forward, "__qualname__": cls.__qualname__})
    changed = copy.deepcopy(module)
    changed.__class__ = _HOOKED[cls]
    changed.family_hooks = hooks
    return changed


# --- a norm's weight offset ----------------------------------------------------------------


def has_offset(module: Any) -> bool:
    """Whether a module is an RMS norm scaling by 1 + w (Gemma's): with w = 0 it still normalizes."""
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.ndim != 1 or list(module.children()):
        return False
    try:
        probe = copy.deepcopy(module).double()
        with torch.no_grad(), float64_throughout():
            probe.weight.zero_()
            x = torch.linspace(-1.0, 1.0, weight.shape[0], dtype=torch.float64)[None]
            y = probe(x)
    except Exception:  # a module that takes something else: no norm
        return False
    # with w = 0 it computes x / rms(x) itself (its epsilon far below the mean square of x)
    return isinstance(y, torch.Tensor) and y.shape == x.shape and torch.allclose(y, x / x.square().mean().sqrt(), 1e-3)


def _weighted_rms(module: Any) -> bool:
    """An RMS norm keeping a weight: Llama's (w), or Gemma's (1 + w: zero weights, which the norm
    probe cannot divide by, tell it by its output)."""
    if not isinstance(getattr(module, "weight", None), torch.Tensor):
        return False
    return norm_kind(module) == "rms" or has_offset(module)


def _offsets(module: Any, context: Any) -> list[float]:
    """The shifts of the weight a port with another convention computes: -1 (w for 1 + w) and +1
    (the offset applied twice) for an offset norm, +1 (1 + w for w) for any other."""
    return [-1.0, 1.0] if has_offset(module) else [1.0]


def _shifted(module: Any, shift: float) -> Any:
    changed = copy.deepcopy(module)
    with torch.no_grad():
        changed.weight.add_(shift)
    return changed


def _offset_words(module: Any, shift: float) -> str:
    if not has_offset(module):
        return "the norm's weight as 1 + w (Gemma's convention) for w"
    if shift < 0:
        return "the norm's weight as w for 1 + w (Gemma's convention)"
    return "the norm's 1 + w offset applied twice (2 + w)"


# --- transformers' GELU classes ------------------------------------------------------------


_gelus: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def gelu_kind(module: Any) -> str | None:
    """ERF or TANH: a parameterless module computing a GELU, told by what it computes in float64
    (transformers' GELUActivation, GELUTanh, NewGELUActivation, ...), probed once per module
    (the cause's applies, change and words each ask); None for any other module."""
    if isinstance(module, nn.GELU) or list(module.parameters()) or list(module.children()):
        return None
    return cached(_gelus, module, _gelu_probe)


def _gelu_probe(module: Any) -> str | None:
    x = torch.linspace(-4.0, 4.0, 33, dtype=torch.float64)
    try:
        with torch.no_grad(), float64_throughout():
            y = module(x)
    except Exception:
        return None
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        return None
    for kind, approximate in ((ERF, "none"), (TANH, "tanh")):
        if torch.allclose(y, nn.functional.gelu(x, approximate=approximate), rtol=1e-6, atol=1e-9):
            return kind
    return None


def _other_gelu(module: Any, value: Any) -> Any:
    return nn.GELU(approximate="none" if gelu_kind(module) == TANH else "tanh")


def _gelu_words(module: Any, value: Any) -> str:
    own = gelu_kind(module)
    other = ERF if own == TANH else TANH
    return f"the {other} GELU for the {own} GELU ({type(module).__name__})"


CAUSES: tuple[Cause, ...] = (
    Cause(
        "GELU approximation (transformers)",
        (),
        _other_gelu,
        _gelu_words,
        accepts=lambda m: gelu_kind(m) is not None,
    ),
    Cause(
        "norm weight offset",
        (),
        lambda m, shift, context: _shifted(m, shift),
        _offset_words,
        parameter="shift",
        choices=_offsets,
        contextual=True,
        accepts=_weighted_rms,
    ),
    Cause(
        "rope scaling ignored",
        (),
        _scaling_ignored,
        lambda m, v: f"its rope scaling ({m.rope_type}) ignored: the default frequencies of theta {_theta(m):g}",
        accepts=lambda m: is_rotary(m) and getattr(m, "rope_type", "default") != "default",
        positions=GROWS,
    ),
    Cause(
        "rope base",
        (),
        _with_theta,
        lambda m, v: f"the rotary base theta = {named(v, THETAS)}; this model has {_theta(m):g}",
        values=lambda m: (1e2, 1e8),
        parameter="theta",
        example=5e5,
        accepts=is_rotary,
        positions=GROWS,
    ),
    Cause(
        "partial rotary",
        (),
        lambda m, fraction, context: _partial(m, fraction),
        _partial_words,
        parameter="fraction",
        choices=_fractions,
        contextual=True,
        accepts=is_rotary,
        positions=GROWS,
    ),
    Cause(
        "embedding scale dropped",
        (),
        lambda m, v: _with_scale(m, 1.0),
        lambda m, v: f"no embedding scale: its rows not multiplied by {_scale_of(m):.6g} (sqrt(hidden))",
        accepts=lambda m: isinstance(m, nn.Embedding) and _scale_of(m) is not None,
    ),
    Cause(
        "embedding scale format",
        (),
        lambda m, dtype, context: _scale_in(m, dtype),
        _scale_format_words,
        parameter="format",
        choices=_scale_formats,
        contextual=True,
        accepts=lambda m: isinstance(m, nn.Embedding) and _scale_of(m) is not None,
    ),
    Cause(
        "attention soft-cap dropped",
        (),
        lambda m, v: with_attribute("attn_logit_softcapping")(m, None),
        lambda m, v: f"no attention soft-cap: its scores not capped at {m.attn_logit_softcapping:g} (tanh(s/c) c)",
        accepts=_softcapped,
    ),
    Cause(
        "attention soft-cap",
        (),
        with_attribute("attn_logit_softcapping"),
        lambda m, v: (
            f"the attention scores soft-capped at {v:.3g} (tanh(s/c) c); this model caps at "
            f"{m.attn_logit_softcapping:g}"
        ),
        values=lambda m: (1.0, 1e3),
        parameter="cap",
        example=20.0,
        accepts=_softcapped,
    ),
    Cause(
        "attention scale before the soft-cap",
        (),
        _before_cap,
        _scale_words,
        values=lambda m: (1e-2, 1e2),
        parameter="factor",
        example=2.0,
        accepts=lambda m: _softcapped(m) and isinstance(getattr(m, "scaling", None), float),
    ),
    Cause(
        "sliding window dropped",
        (),
        lambda m, v: with_change(m, AttentionChange(window="none")),
        lambda m, v: f"no sliding window: each query sees every key before it, not the last {window_of(m)}",
        accepts=_windowed,
        positions=WINDOW,
    ),
    _window_cause(
        "sliding window off by one",
        lambda m, v: f"a sliding window of {v} keys for {window_of(m)}: off by one",
        _beside,
    ),
    _window_cause(
        "sliding window width",
        lambda m, v: f"a sliding window of {v} keys; this model's is {window_of(m)}",
        _other_widths,
    ),
    Cause(
        "grouped-query heads tiled",
        (),
        _tiled,
        _tiled_words,
        accepts=_grouped,
    ),
)
