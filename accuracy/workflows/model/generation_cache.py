"""A port that decodes with a KV cache (transformers' DynamicCache), and the cache bugs that
explain one whose logits are not the full recompute's.

The cached port prefills the prompt once, then feeds one token per step with the cache, as
`generate` does; `opbench generate` judges its logits against the float64 full recompute's typical
tier like any port's. Each cache bug is the same decode in float64 with the bug: where its logits
put the port's within their thresholds at every step judged, the bug explains the port (the
end-to-end comparison: no single layer holds a cache's bookkeeping).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import numpy as np
import torch

from accuracy.backends.pytorch import tensor_to_numpy
from accuracy.workflows.model.trace import first_tensor, float64_throughout

# each bug: (its words, what it changes in the decode)
CACHE_BUGS: dict[str, str] = {
    "position ids off by one": "the new token's position id one past its position (the cache length + 1)",
    "rotary at the wrong position": "the new token rotated at position 0, as if no cache held the tokens before it",
    "cache not appended": "the cache not appended: each step sees the prompt's keys and its own, none between",
    "mask built for the wrong length": "the attention mask built one key short: the first key masked at each step",
}


def cached_rows(model: Any, text: np.ndarray, prompt: int, steps: int, bug: str | None = None) -> np.ndarray:
    """The logits [steps, vocab] of `model` (in its own dtype) decoding the teacher-forced `text`
    with a DynamicCache: the prompt prefilled, then one token per step; with `bug`, its change."""
    rows = []
    wide = next(model.parameters()).dtype == torch.float64
    with torch.no_grad(), float64_throughout() if wide else contextlib.nullcontext():
        ids = torch.from_numpy(np.ascontiguousarray(text[:, :prompt]))
        out = model(input_ids=ids, use_cache=True)
        cache = out.past_key_values
        prefilled = copy.deepcopy(cache) if bug == "cache not appended" else None
        rows.append(tensor_to_numpy(first_tensor(out)[0, -1]))
        for step in range(1, steps):
            position = prompt + step - 1  # the fed token's place in the text
            token = torch.from_numpy(np.ascontiguousarray(text[:, position : position + 1]))
            past = copy.deepcopy(prefilled) if prefilled is not None else cache
            length = past.get_seq_length()  # keys before the fed token
            kwargs: dict = {"cache_position": torch.tensor([length])}
            kwargs["position_ids"] = torch.tensor([[cache_position(bug, position)]])
            if bug == "mask built for the wrong length":
                mask = torch.ones((1, length + 1), dtype=torch.long)
                mask[0, 0] = 0
                kwargs["attention_mask"] = mask
            out = model(input_ids=token, past_key_values=past, use_cache=True, **kwargs)
            rows.append(tensor_to_numpy(first_tensor(out)[0, -1]))
    return np.stack(rows)


def cache_position(bug: str | None, position: int) -> int:
    """The position id a decode with `bug` gives the token fed at `position` through the cache."""
    if bug == "position ids off by one":
        return position + 1
    if bug == "rotary at the wrong position":
        return 0
    return position


def takes_cache(model: Any) -> bool:
    """A causal LM whose forward takes a cache and position ids (transformers' decoders)."""
    import inspect

    taken = inspect.signature(model.forward).parameters
    return all(name in taken for name in ("past_key_values", "position_ids", "cache_position"))


def cache_cause(
    model: Any, port: np.ndarray, tiers: Any, steps: list[int], text: np.ndarray, prompt: int
) -> dict | None:
    """The cache bug whose float64 decode puts the port's logits within their typical thresholds
    at every step in `steps` (`tiers.at(step)`: the step's evidence); None where none does."""
    if not takes_cache(model):
        return None
    model64 = copy.deepcopy(model).double()
    total = port.shape[0]
    for name, words in CACHE_BUGS.items():
        try:
            changed = cached_rows(model64, text, prompt, total, name)
        except Exception:  # a model whose cache takes no such change: not this bug
            continue
        ratios = []
        for step in steps:
            tier = tiers.at(step).op.model
            if tier is None:
                return None
            ratios.append(tier.ratio(np.abs(np.asarray(port[step], dtype=np.float64) - changed[step])))
        if ratios and max(ratios) <= 1:
            return {"name": name, "words": words, "parameters": {}, "ratio": max(ratios), "explains": True}
    return None
