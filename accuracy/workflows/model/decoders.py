"""Tiny causal language models of transformers' decoder families, and hand ports of them with
one bug each, for `opbench generate` (its tests, its docs and a first run with no download).

Each model is a factory this module exports by name (`decoders:llama`), built as the census
builds its families (census_models.tiny_config: width 32, 2 layers, 4 heads, 2 KV heads,
vocabulary 99) with the language-model head, random weights from a fixed seed. A hand port is
`FUNCTION(reference model) -> module` (`opbench generate --port-model LABEL=MODULE:FUNCTION`):
a copy of the reference holding one convention of another family or a port bug.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from accuracy.workflows.model.census_models import TOKENS, VOCAB, Family, tiny_config
from accuracy.workflows.model.torchvision_import import import_transformers
from accuracy.workflows.model.zoo import SEED

# weights drawn 10x transformers' default spread (0.02): the tiny models' text then depends on
# position and context as a trained model's does, not one token repeated
INIT_STD = 0.2
CAUSAL_LMS = {
    "llama": Family("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": Family("Qwen2Config", "Qwen2ForCausalLM"),
    "gemma2": Family("Gemma2Config", "Gemma2ForCausalLM"),
}


# the decoders the self-test of causes injects the families' conventions into (their base models,
# as the census builds them): Llama 3 with its rope scaling, Gemma 2 with its soft-caps, Gemma 3
LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}
SELFTEST = {
    "transformers_llama3": Family("LlamaConfig", "LlamaModel", settings={"rope_scaling": LLAMA3_SCALING}),
    # a window of 4 keys on 8 tokens (its first layer slides): the window decides what the last queries see
    "transformers_gemma2": Family("Gemma2Config", "Gemma2Model", settings={"sliding_window": 4}),
    # its embedding a module scaling by sqrt(hidden) (Gemma 2's scale is in the model's own forward)
    "transformers_gemma3": Family("Gemma3TextConfig", "Gemma3TextModel"),
}
# every family the families' causes are self-tested on, each entry on each class it applies to
FAMILY_SELFTEST = {
    **SELFTEST,
    "transformers_qwen2": Family("Qwen2Config", "Qwen2Model"),
    "transformers_qwen3": Family("Qwen3Config", "Qwen3Model"),
    # a window of 4 keys on 8 tokens: the window decides which keys the last queries see
    "transformers_mistral": Family("MistralConfig", "MistralModel", settings={"sliding_window": 4}),
    # rotary on half of each head (Phi-4-mini's 0.75, Phi-2's 0.4): the partial rotary entry both ways
    "transformers_phi3": Family("Phi3Config", "Phi3Model", settings={"partial_rotary_factor": 0.5}),
}


def base_model(name: str):
    """The self-test decoder `name` (a key of FAMILY_SELFTEST), seeded, in eval mode."""
    import torch

    torch.manual_seed(SEED)
    spec = FAMILY_SELFTEST[name]
    config = tiny_config(spec)
    config.initializer_range = INIT_STD
    return getattr(import_transformers(), spec.model)(config).eval()


def base_inputs(name: str) -> dict[str, np.ndarray]:
    """Its token ids, from the seeded PCG64 generator as the census draws them."""
    rng = np.random.default_rng(SEED)
    return {"input_ids": rng.integers(3, VOCAB, (1, TOKENS)).astype(np.int64)}


def llama3_base():
    """Llama 3's base model with its rope scaling (tiny config): the factory of the error-by-position tests."""
    return base_model("transformers_llama3")


def mistral_base():
    """Mistral's base model, a window of 4 keys on 8 tokens: the factory of the window's error-by-position test."""
    return base_model("transformers_mistral")


def causal_lm(family: str):
    """The family's tiny causal language model, seeded, in eval mode."""
    import torch

    torch.manual_seed(SEED)
    spec = CAUSAL_LMS[family]
    config = tiny_config(spec)
    config.initializer_range = INIT_STD
    return getattr(import_transformers(), spec.model)(config).eval()


def llama():
    return causal_lm("llama")


def qwen2():
    return causal_lm("qwen2")


def gemma2():
    return causal_lm("gemma2")


# --- hand ports, each with one bug ---------------------------------------------------------


def rope_base(model: Any, theta: float = 500_000.0) -> Any:
    """The reference with its rotary frequencies from another base (Llama 3's 500,000 for 10,000)."""
    import torch

    port = copy.deepcopy(model)
    rotary = port.model.rotary_emb
    width = 2 * rotary.inv_freq.numel()
    rotary.inv_freq = 1.0 / theta ** (torch.arange(0, width, 2, dtype=torch.float32) / width)
    rotary.original_inv_freq = rotary.inv_freq
    return port


def no_final_softcap(model: Any) -> Any:
    """The reference without its final-logit soft-cap (Gemma 2's tanh(x / 30) * 30 dropped)."""
    port = copy.deepcopy(model)
    port.config.final_logit_softcapping = None
    return port


def same(model: Any) -> Any:
    """A correct hand port: the reference's own modules, as a rewrite that computes the same."""
    return copy.deepcopy(model)


def normalizer_bfloat16(model: Any) -> Any:
    """The reference with Gemma 2's normalizer sqrt(hidden) computed in bfloat16 in a float32 port
    (transformers PR #29402: 55.5 for sqrt(3072)): the first layer's input rescaled by a hook."""
    import torch

    port = copy.deepcopy(model)
    scale = port.config.hidden_size**0.5
    factor = float(torch.tensor(scale).to(torch.bfloat16)) / scale
    port.model.layers[0].register_forward_pre_hook(lambda m, args: (args[0] * factor, *args[1:]))
    return port
