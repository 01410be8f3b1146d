"""`--port onnxruntime-cache`: the decoder exported once with its past key/values as explicit
inputs and outputs, then decoded in ONNX Runtime as `generate` decodes: the prompt prefilled on an
empty cache, then one token a step on the cache the step before returned.

The graph is the dynamo exporter's (torch.onnx.export(dynamo=True)) of a wrapper whose forward
takes the new tokens, their position ids and each layer's past keys and values, fills a
transformers DynamicCache with them and returns the logits and the cache after the call: the
token and past lengths are dynamic dimensions, so one graph serves the prefill (past length 0)
and every step. Optimum's export is not among opbench's dependencies (nor installed here).
"""

from __future__ import annotations

import contextlib
import copy
import io
import warnings
from typing import Any

import numpy as np
import torch

from accuracy.core.errors import first_line, quiet_stderr
from accuracy.workflows.model.generation_cache import cache_position

MOST_TOKENS = 4096


def kv_geometry(model: Any) -> tuple[int, int, int]:
    """(layers, key/value heads, head_dim) of a transformers decoder, from its config."""
    config = model.config
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return config.num_hidden_layers, getattr(config, "num_key_value_heads", None) or heads, int(head_dim)


class CachedStep(torch.nn.Module):
    """The decoder as a function of explicit tensors: (input_ids, position_ids, past keys and
    values of each layer) -> (logits, each layer's keys and values after the call)."""

    def __init__(self, model: Any, layers: int):
        super().__init__()
        self.model, self.layers = model, layers

    def forward(self, input_ids: Any, position_ids: Any, past: tuple) -> tuple:
        from transformers import DynamicCache

        cache = DynamicCache()
        for layer in range(self.layers):
            cache.update(past[2 * layer], past[2 * layer + 1], layer)
        start = past[0].shape[2]
        out = self.model(
            input_ids=input_ids,
            position_ids=position_ids,
            past_key_values=cache,
            cache_position=torch.arange(input_ids.shape[1]) + start,
            use_cache=True,
        )
        after = out.past_key_values.layers
        return (out.logits, *(t for layer in after[: self.layers] for t in (layer.keys, layer.values)))


def names(layers: int) -> tuple[list[str], list[str]]:
    """The graph's input and output names."""
    past = [f"past_{kind}_{i}" for i in range(layers) for kind in ("key", "value")]
    return ["input_ids", "position_ids", *past], ["logits", *(p.replace("past_", "present_") for p in past)]


def export_cached(model: Any, inputs: dict | None = None) -> Any:
    """The ONNX graph of the float32 decoder with past key/values, token and past lengths dynamic
    (`inputs`: export_cache's key only; the graph takes any length)."""
    from torch.export import Dim

    from accuracy.workflows.model import onnx_graph

    layers, kv, head_dim = kv_geometry(model)
    step = CachedStep(copy.deepcopy(model).float().eval(), layers)
    ids, positions = torch.tensor([[1, 2]]), torch.tensor([[3, 4]])
    past = tuple(torch.zeros(1, kv, 3, head_dim) for _ in range(2 * layers))
    tokens, held = Dim("tokens", min=1, max=MOST_TOKENS), Dim("past", min=0, max=MOST_TOKENS)
    shapes = ({1: tokens}, {1: tokens}, tuple({2: held} for _ in past))
    feeds, outputs = names(layers)
    with (
        warnings.catch_warnings(),
        quiet_stderr(),
        contextlib.redirect_stdout(io.StringIO()),
        onnx_graph.torchlib_read_once(),
    ):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            step,
            (ids, positions, past),
            dynamo=True,
            dynamic_shapes=shapes,
            input_names=feeds,
            output_names=outputs,
            verbose=False,
        )
    if program is None:
        raise RuntimeError("the dynamo exporter gave no program")
    return program.model_proto


def onnx_cached_rows(
    session: Any, model: Any, text: np.ndarray, prompt: int, steps: int, bug: str | None = None
) -> np.ndarray:
    """The logits [steps, vocab] of the cached graph decoding the teacher-forced `text`: the prompt
    prefilled on an empty cache, then one token a step on the cache the step before returned; with
    `bug` (generation_cache.CACHE_BUGS), the runtime's bookkeeping wrong so. The graph takes no
    attention mask: a mask built one key short, the first key masked, is the runtime feeding its
    past without the first key (a masked key adds nothing to the softmax) and keeping it."""
    from accuracy.workflows.model import onnx_graph

    layers, kv, head_dim = kv_geometry(model)
    inputs, outputs = names(layers)
    cache = [np.zeros((1, kv, 0, head_dim), np.float32) for _ in range(2 * layers)]
    prefilled = None
    rows, start, length = [], 0, prompt
    for _ in range(steps):
        positions = np.arange(start, start + length, dtype=np.int64)[None]
        past = prefilled or cache
        one_short = prefilled is not None and bug == "mask built for the wrong length"
        if prefilled is not None:  # a step fed through the cache
            positions = np.array([[cache_position(bug, start)]], dtype=np.int64)
        if one_short:
            past = [np.ascontiguousarray(held[:, :, 1:]) for held in past]
        feeds = {"input_ids": np.ascontiguousarray(text[:, start : start + length]), "position_ids": positions}
        out = onnx_graph.run(session, feeds | dict(zip(inputs[2:], past, strict=True)), outputs)
        rows.append(out["logits"][0, -1])
        returned = [out[name] for name in outputs[1:]]
        cache = (
            [np.concatenate([held[:, :, :1], new], axis=2) for held, new in zip(cache, returned, strict=True)]
            if one_short
            else returned
        )
        if prefilled is None:
            prefilled = cache if bug == "cache not appended" else []
        start, length = start + length, 1
    return np.stack(rows)


def why_not(exc: Exception) -> str:
    """The exporter's or ONNX Runtime's one line, for the absent port."""
    return f"the decoder with past key/values does not export: {first_line(exc, typed=True)}"
