"""Attention causes: the scale 1/sqrt(d_model) for 1/sqrt(head_dim) (a fitted factor), a missing
or shifted causal mask, the other rotary convention, another mask fill, a softmax in bfloat16 or
float16 inside a float32 attention.

These bugs live in an attention module's own forward (scores, scale, mask, softmax), which no
attribute holds. The changed reference is the module run under a torch function mode that
intercepts what every common implementation calls there: `F.scaled_dot_product_attention` (its
scale, `is_causal`, `attn_mask`), `softmax` (its input's scale, its dtype) and the mask's
application (a `masked_fill` or `torch.where` with a large negative fill, the add of a 0/-large
mask). The mode sits inside the module's forward, above the float64 reference's mode
(trace.float64_throughout) and the Monte Carlo runs' dispatch mode (accuracy.judge.torch_emulation),
which see what it computes. The rotary convention needs no mode: interleaved pairs (2i, 2i+1)
are rotate-half's pairs (i, i + d/2) with the query and key channels permuted within each head,
so the q and k projections' outputs are reordered (by hooks after any already there: what a
port built with the change records of its projections is theirs). The changed module is a copy
of the module itself, its class a subclass of the same name: every submodule keeps its path.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from accuracy.backends.pytorch import tensor_to_numpy
from accuracy.workflows.model.causes.cause import Cause

# a mask's fill: below this a score is masked out (HF fills finfo.min, older ports -1e4 or -1e9)
MASKED = -1e4
ATTENTION: tuple[str, ...] = ()  # no class names: `accepts=is_attention` tells an attention by what it keeps


def _first_int(*values: Any) -> int | None:
    return next((int(v) for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0), None)


# the names an attention's head count, head width and model width go by, as implementations keep them
HEADS = ("num_heads", "num_attention_heads", "heads", "n_heads", "n_head", "n_local_heads")
HEAD_WIDTHS = ("head_dim", "head_width", "attention_head_size", "head_size")
MODEL_WIDTHS = ("n_embd", "embed_dim", "hidden_size", "d_model")


def _field(held: Any, names: tuple[str, ...]) -> int | None:
    """The first positive int among `held`'s `names`: attributes, or keys of a dict config."""
    values = (held.get(n) for n in names) if isinstance(held, dict) else (getattr(held, n, None) for n in names)
    return _first_int(*values)


def geometry(module: Any) -> tuple[int, int] | None:
    """(heads, head width) of an attention module, from what its implementation keeps: its own
    attributes (the zoo's decoder: heads, head_width; GPT-2: num_heads, head_dim; BERT:
    num_attention_heads, attention_head_size; Meta's Llama: n_local_heads, head_dim; nanoGPT:
    n_head and n_embd, the width n_embd / n_head), or the heads in its config (an object, as
    transformers' Llama family keeps it, or a dict) beside a head width of its own; None for any
    other module (a decoder layer keeps a config and a model width, but no head width)."""
    config = getattr(module, "config", None)
    width = _field(module, HEAD_WIDTHS)
    heads = _field(module, HEADS) or (_field(config, HEADS) if width else None)
    if heads and not width:
        model_width = _field(module, MODEL_WIDTHS)
        width = model_width // heads if model_width and model_width % heads == 0 else None
    return (heads, width) if heads and width else None


def is_attention(module: Any) -> bool:
    """An attention module: one with heads and a head width (a decoder layer holding one has neither).
    Not torch's MultiheadAttention: its core runs inside F.multi_head_attention_forward, where the
    changes' mode does not reach (a torch function's own body runs with the mode set aside)."""
    from torch import nn

    return geometry(module) is not None and not isinstance(module, nn.MultiheadAttention)


@dataclass(frozen=True)
class AttentionChange:
    """What the changed attention computes otherwise: its scores times `factor`, the causal mask
    (`causal`: None as the module has it, "none" without, an int: shifted by that many keys),
    masked scores filled with `fill` (None: the module's own), the softmax in `softmax_dtype`,
    its queries and keys in the other rotary convention's channel order (`rotary`)."""

    factor: float = 1.0
    causal: str | int | None = None
    fill: float | None = None
    softmax_dtype: Any = None
    rotary: str | None = None  # "interleaved" or "rotate-half": the port's convention, the reference's the other
    window: int | str | None = None  # a sliding window of that many keys, or "none": causal alone (causes/families.py)

    @property
    def masks(self) -> bool:
        return self.causal is not None or self.fill is not None or self.window is not None

    @property
    def computes(self) -> bool:
        """Whether the scores' computation changes (the rotary convention alone needs no mode)."""
        return self.factor != 1.0 or self.masks or self.softmax_dtype is not None


def _numpy(t: Any) -> np.ndarray:
    return np.asarray(tensor_to_numpy(t.detach()), dtype=np.float64)


def _large_negative(value: Any) -> float | None:
    """A mask fill: a number, or a one-element tensor, below MASKED (-inf included)."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or not value.is_floating_point():
            return None
        value = float(_numpy(value).reshape(()))
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= MASKED:
        return float(value)
    return None


def _bools(mask: Any) -> np.ndarray:
    """A boolean mask as numpy's: the masks are combined there, out of sight of the Monte Carlo
    runs' dispatch mode, whose reason would otherwise list ops that compute no float."""
    return np.asarray(mask.detach().numpy(), dtype=bool)


def _additive_mask(value: Any) -> np.ndarray | None:
    """Where an additive mask (0 kept, large negative masked, at least one masked) masks; else None."""
    import torch

    if not (isinstance(value, torch.Tensor) and value.is_floating_point() and value.ndim >= 2):
        return None
    values = _numpy(value)
    masked = values <= MASKED
    if not masked.any() or not ((values == 0) | masked).all():
        return None
    return masked


def _causal(rows: int, keys: int, shift: int) -> np.ndarray:
    """The keys a causal query may not see, shifted by `shift` keys (aligned to the last key, as a cache is)."""
    return np.triu(np.ones((rows, keys), dtype=bool), 1 + shift + keys - rows)


def _outside(rows: int, keys: int, change: AttentionChange) -> np.ndarray:
    """The keys at least `change.window` positions before a query (aligned to the last key): out of its window."""
    queries = np.arange(rows)[:, None] + keys - rows
    return queries - np.arange(keys)[None, :] >= int(change.window)  # type: ignore[arg-type]


def _rounded(x: Any, dtype: Any) -> Any:
    """`x` rounded to `dtype`, in x's dtype: past the float64 reference's mode, which keeps casts at float64."""
    import torch

    with torch._C.DisableTorchFunction():
        return x.to(dtype).to(x.dtype)


def _disallowed(change: AttentionChange, recorded: list, rows: int, keys: int) -> np.ndarray:
    """The (rows, keys) positions the changed attention masks: the masks recorded on the scores'
    way to the softmax, with the change's causal offset or window in place of theirs."""
    disallowed = np.zeros((rows, keys), dtype=bool)
    for m in recorded:
        disallowed = disallowed | m
    if change.causal is not None:
        disallowed = disallowed & ~_causal(rows, keys, 0)
        if change.causal != "none":
            disallowed = disallowed | _causal(rows, keys, int(change.causal))
    if change.window is not None:  # the mask rebuilt: causal, and the window's where it has one
        disallowed = _causal(rows, keys, 0) | (False if change.window == "none" else _outside(rows, keys, change))
    return disallowed


def _mask_taken(name: str, args: tuple, kwargs: dict) -> tuple[Any, float, Any] | None:
    """A torch call that applies a mask to attention scores (a masked_fill or where with a large
    negative fill, an additive mask): (where it masks, its fill, the scores unmasked), or None."""
    import torch

    if name in ("masked_fill", "masked_fill_"):
        fill = _large_negative(args[2] if len(args) > 2 else kwargs.get("value"))
        if fill is not None:
            return _bools(args[1]), fill, args[0]
    if name == "where" and len(args) == 3:
        fill = _large_negative(args[2])
        if fill is not None and isinstance(args[0], torch.Tensor) and args[0].dtype == torch.bool:
            return ~_bools(args[0]), fill, args[1]
    if name in ("add", "__add__", "__radd__", "add_", "__iadd__") and len(args) == 2:
        for scores, mask in (args, args[::-1]):
            additive = _additive_mask(mask)
            if additive is not None:
                return additive, float(_numpy(mask).min()), scores
    return None


def _attention_mode(change: AttentionChange):
    """The torch function mode in which an attention's forward computes with `change`."""
    import torch
    from torch.overrides import TorchFunctionMode

    class AttentionChanged(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.disallowed: list = []  # the masks applied to the scores on their way to the softmax
            self.fills: list[float] = []

        def _recorded(self, disallowed: Any, fill: float) -> None:
            self.disallowed.append(disallowed)
            self.fills.append(fill)

        def softmax(self, x: Any, dim: int, safe: bool = False) -> Any:
            """The softmax of scores `x`, with the masks recorded on their way here applied as the
            change has them; `safe`: as F.scaled_dot_product_attention, a row all -inf gives 0."""
            if change.factor != 1.0:
                x = x * change.factor
            disallowed = _disallowed(change, self.disallowed, *x.shape[-2:])
            fill = change.fill if change.fill is not None else min(self.fills, default=-math.inf)
            self.disallowed, self.fills = [], []
            if disallowed.any():
                x = x.masked_fill(torch.from_numpy(disallowed), fill)
            if change.softmax_dtype is None:
                probs = torch.softmax(x, dim)
            else:
                probs = _rounded(torch.softmax(_rounded(x, change.softmax_dtype), dim), change.softmax_dtype)
            empty = disallowed.all(-1, keepdims=True)
            if safe and fill == -math.inf and empty.any():
                probs = probs.masked_fill(torch.from_numpy(empty), 0.0)
            return probs

        def attention(self, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
            """F.scaled_dot_product_attention written out (eval: no dropout), its softmax changed."""
            if enable_gqa:
                k, v = (t.repeat_interleave(q.shape[-3] // t.shape[-3], -3) for t in (k, v))
            scores = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale)
            if is_causal:
                self._recorded(_causal(*scores.shape[-2:], 0), -math.inf)
            if attn_mask is not None and attn_mask.dtype == torch.bool:
                self._recorded(~_bools(attn_mask), -math.inf)
            elif attn_mask is not None:
                additive = _additive_mask(attn_mask) if change.masks else None
                if additive is None:
                    scores = scores + attn_mask
                else:
                    self._recorded(additive, float(_numpy(attn_mask).min()))
            # a port's explicit softmax with another fill has no safe rows: a fully masked row is its fill's
            return self.softmax(scores, -1, safe=change.fill is None) @ v

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            if name == "scaled_dot_product_attention":
                return self.attention(*args, **kwargs)
            if name == "softmax":
                x, dim = args[0], kwargs.get("dim", args[1] if len(args) > 1 else -1)
                dtype = kwargs.get("dtype") or next((a for a in args[2:] if isinstance(a, torch.dtype)), None)
                return self.softmax(x if dtype is None or change.softmax_dtype else x.to(dtype), dim)
            taken = _mask_taken(name, args, kwargs) if change.masks else None
            if taken is None:
                return func(*args, **kwargs)
            # the mask's application, taken out and recorded: the softmax applies the changed mask
            disallowed, fill, scores = taken
            self._recorded(disallowed, fill)
            return scores

    return AttentionChanged()


def _reordered(rows: Any):
    """A forward hook giving a projection's output with its channels in `rows`' order."""
    import torch

    return lambda module, args, output: torch.index_select(output, -1, rows)


_CHANGED_CLASSES: dict[Any, Any] = {}


def _changed_class(cls: Any) -> Any:
    """`cls` whose forward runs with the instance's `attention_change`: same name, same submodules
    (a port with the change keeps every activation key), copied and converted as `cls` is."""

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        change: AttentionChange = self.attention_change
        hooks = []
        if change.rotary is not None:  # after any hook already there: what they record is the projection's own
            _, width = geometry(self)  # type: ignore[misc]
            order = _half_order(width)
            if change.rotary == "rotate-half":
                order = torch.argsort(order)
            for projection in (self.q_proj, self.k_proj):
                rows = (torch.arange(projection.out_features // width)[:, None] * width + order).flatten()
                hooks.append(projection.register_forward_hook(_reordered(rows)))
        try:
            if not change.computes:
                return cls.forward(self, *args, **kwargs)
            with _attention_mode(change):
                return cls.forward(self, *args, **kwargs)
        finally:
            for hook in hooks:
                hook.remove()

    if cls not in _CHANGED_CLASSES:
        _CHANGED_CLASSES[cls] = type(cls.__name__, (cls,), {"forward": forward, "__qualname__": cls.__qualname__})
    return _CHANGED_CLASSES[cls]


def with_change(module: Any, change: AttentionChange) -> Any:
    """A copy of the attention `module` that computes with `change`."""
    changed = copy.deepcopy(module)
    changed.__class__ = _changed_class(type(module))
    changed.attention_change = change
    return changed


def _changed(**fields: Any):
    def change(module: Any, value: Any) -> Any:
        return with_change(
            module, replace(AttentionChange(), **{k: (value if v is None else v) for k, v in fields.items()})
        )

    return change


# --- the scale -----------------------------------------------------------------------------


def scale_conventions(module: Any) -> dict[float, str]:
    """The factors by which another convention's scale differs from 1/sqrt(head_dim), in words."""
    heads, width = geometry(module)  # type: ignore[misc]
    return {
        heads**-0.5: "1/sqrt(d_model) for 1/sqrt(head_dim)",
        width**0.5: "no scale for 1/sqrt(head_dim)",
        width**-0.5: "1/head_dim for 1/sqrt(head_dim)",
        heads**0.5: "1/sqrt(head_dim) for 1/sqrt(d_model)",
    }


def _scale_words(module: Any, factor: float) -> str:
    known = next((w for f, w in scale_conventions(module).items() if abs(factor - f) <= 0.1 * f), None)
    heads, width = geometry(module)  # type: ignore[misc]
    if known is None:
        return f"the attention scores {factor:.3g} times the reference's ({heads} heads of {width})"
    return f"the attention scale {known} (the scores {factor:.3g} times the reference's; {heads} heads of {width})"


# --- the rotary convention -----------------------------------------------------------------


def _half_order(width: int):
    """The channel order that makes interleaved pairs (2i, 2i+1) rotate-half's pairs (i, i + width/2)."""
    import torch

    return torch.cat((torch.arange(0, width, 2), torch.arange(1, width, 2)))


def _has_rotary(module: Any) -> bool:
    return is_attention(module) and hasattr(module, "q_proj") and hasattr(module, "k_proj")


# --- the catalogue -------------------------------------------------------------------------


def _softmax_in(dtype_name: str) -> Cause:
    def change(module: Any, value: Any) -> Any:
        import torch

        return _changed(softmax_dtype=getattr(torch, dtype_name))(module, value)

    return Cause(
        f"softmax in {dtype_name}",
        ATTENTION,
        change,
        lambda m, v: f"its softmax computed in {dtype_name} (inputs and probabilities rounded to {dtype_name})",
        accepts=is_attention,
    )


CAUSES: tuple[Cause, ...] = (
    Cause(
        "attention scale",
        ATTENTION,
        _changed(factor=None),
        _scale_words,
        values=lambda m: (1e-2, 1e2),
        parameter="factor",
        example=0.5,  # 1/sqrt(d_model) for 1/sqrt(head_dim) with 4 heads: the zoo's decoder, llama_tiny, gpt2_tiny
        accepts=is_attention,
    ),
    Cause(
        "no causal mask",
        ATTENTION,
        _changed(causal="none"),
        lambda m, v: "no causal mask: every query sees the keys after it",
        accepts=is_attention,
    ),
    Cause(
        "causal mask shifted",
        ATTENTION,
        _changed(causal=1),
        lambda m, v: "the causal mask shifted by one: each query sees the next key too",
        accepts=is_attention,
    ),
    Cause(
        "interleaved rotary",
        ATTENTION,
        _changed(rotary="interleaved"),
        lambda m, v: "the interleaved rotary convention (pairs 2i, 2i+1: GPT-J, Meta's Llama) for rotate-half (HF)",
        accepts=_has_rotary,
    ),
    Cause(
        "rotate-half rotary",
        ATTENTION,
        _changed(rotary="rotate-half"),
        lambda m, v: "the rotate-half rotary convention (pairs i, i+d/2: HF) for interleaved (GPT-J, Meta's Llama)",
        accepts=_has_rotary,
    ),
    Cause(
        "mask fill -inf",
        ATTENTION,
        _changed(fill=-math.inf),
        lambda m, v: "masked scores filled with -inf in its own softmax: a fully masked row (padding) gives NaN",
        accepts=is_attention,
    ),
    Cause(
        "mask fill finite",
        ATTENTION,
        _changed(fill=float(np.finfo(np.float32).min)),
        lambda m, v: (
            "masked scores filled with a large finite value (finfo.min, -1e9, -1e4) for -inf: "
            "a fully masked row (padding) attends to the masked keys instead of giving 0"
        ),
        accepts=is_attention,
    ),
    _softmax_in("bfloat16"),
    _softmax_in("float16"),
)
