"""The stock models `opbench selftest --census` runs: every torchvision classification model and
every transformers family in `FAMILIES`, each with random weights from a fixed seed (no downloads).

Each model is a factory this module exports by name (`torchvision_resnet18`, `transformers_llama`),
so that `opbench model`'s machinery loads it as MODULE:FUNCTION, here or on a Dask worker.
transformers' configs are tiny (width 32, 2 layers, 4 heads, vocabulary 99): built from one set of
sizes under every name a config gives them, then a family's own few settings.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accuracy.core.errors import OpbenchError
from accuracy.workflows.model.torchvision_import import import_torchvision, import_transformers
from accuracy.workflows.model.zoo import SEED, seeded_batch_norm

MODULE = __name__
TORCHVISION, TRANSFORMERS = "torchvision_", "transformers_"
IMAGE_SIZES = (64, 96, 128, 160, 224, 299)  # a torchvision model gets the first its forward takes
TOKENS = 8
VOCAB = 99
AUDIO_SAMPLES = 1600  # 5 frames of a wav2vec2-style feature encoder (stride 320)

# the tiny sizes, under each name transformers' configs give them (a config takes the names it has)
WIDTH, LAYERS, HEADS, KV_HEADS, FFN, POSITIONS = 32, 2, 4, 2, 64, 64
SIZES: dict[str, Any] = {
    **dict.fromkeys(("hidden_size", "d_model", "n_embd", "n_embed", "dim", "embed_dim", "embedding_size"), WIDTH),
    **dict.fromkeys(
        ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers"), LAYERS
    ),
    **dict.fromkeys(
        ("num_attention_heads", "num_heads", "n_head", "n_heads", "encoder_attention_heads", "decoder_attention_heads"),
        HEADS,
    ),
    **dict.fromkeys(
        ("intermediate_size", "d_ff", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "n_inner", "hidden_dim"), FFN
    ),
    **dict.fromkeys(("max_position_embeddings", "n_positions", "n_ctx", "max_source_positions"), POSITIONS),
    "num_key_value_heads": KV_HEADS,
    "head_dim": WIDTH // HEADS,
    "d_kv": WIDTH // HEADS,
    "vocab_size": VOCAB,
}
TOKEN_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 0}


@dataclass(frozen=True)
class Family:
    """A transformers model family: its config and model classes, what it takes (`tokens`,
    `pixels:SIZE`, `audio`, `mel`), its own settings beside the tiny sizes, and for an
    encoder-decoder `encoder=True`: the model's encoder alone."""

    config: str
    model: str
    inputs: str = "tokens"
    settings: dict[str, Any] = field(default_factory=dict)
    encoder: bool = False


VISION = {"image_size": 32, "patch_size": 8, "num_channels": 3}
STAGES = {"hidden_sizes": [16, 32], "depths": [1, 1], "num_stages": 2}
SPEECH = {
    "conv_dim": [WIDTH] * 7,
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 4,
    "do_stable_layer_norm": False,
}

FAMILIES: dict[str, Family] = {
    # decoders
    "llama": Family("LlamaConfig", "LlamaModel"),
    "mistral": Family("MistralConfig", "MistralModel"),
    "qwen2": Family("Qwen2Config", "Qwen2Model"),
    "qwen3": Family("Qwen3Config", "Qwen3Model"),
    "gemma": Family("GemmaConfig", "GemmaModel"),
    "gemma2": Family("Gemma2Config", "Gemma2Model"),
    "phi": Family("PhiConfig", "PhiModel"),
    "phi3": Family("Phi3Config", "Phi3Model"),
    "gpt2": Family("GPT2Config", "GPT2Model"),
    "gpt_neo": Family("GPTNeoConfig", "GPTNeoModel", settings={"attention_types": [[["global", "local"], 1]]}),
    "gpt_neox": Family("GPTNeoXConfig", "GPTNeoXModel"),
    "gptj": Family("GPTJConfig", "GPTJModel", settings={"rotary_dim": 4}),
    "codegen": Family("CodeGenConfig", "CodeGenModel", settings={"rotary_dim": 4}),
    "opt": Family("OPTConfig", "OPTModel", settings={"word_embed_proj_dim": WIDTH}),
    "bloom": Family("BloomConfig", "BloomModel"),
    "falcon": Family("FalconConfig", "FalconModel"),
    "stablelm": Family("StableLmConfig", "StableLmModel"),
    "starcoder2": Family("Starcoder2Config", "Starcoder2Model"),
    "olmo": Family("OlmoConfig", "OlmoModel"),
    "olmo2": Family("Olmo2Config", "Olmo2Model"),
    "cohere": Family("CohereConfig", "CohereModel"),
    "granite": Family("GraniteConfig", "GraniteModel"),
    "persimmon": Family("PersimmonConfig", "PersimmonModel"),
    "mpt": Family("MptConfig", "MptModel"),
    "biogpt": Family("BioGptConfig", "BioGptModel"),
    "xglm": Family("XGLMConfig", "XGLMModel"),
    "mixtral": Family("MixtralConfig", "MixtralModel", settings={"num_local_experts": 4, "num_experts_per_tok": 2}),
    # encoders
    "bert": Family("BertConfig", "BertModel"),
    "roberta": Family("RobertaConfig", "RobertaModel"),
    "distilbert": Family("DistilBertConfig", "DistilBertModel"),
    "albert": Family("AlbertConfig", "AlbertModel"),
    "electra": Family("ElectraConfig", "ElectraModel"),
    "deberta": Family("DebertaConfig", "DebertaModel"),
    "deberta_v2": Family("DebertaV2Config", "DebertaV2Model"),
    "xlm_roberta": Family("XLMRobertaConfig", "XLMRobertaModel"),
    "camembert": Family("CamembertConfig", "CamembertModel"),
    "mpnet": Family("MPNetConfig", "MPNetModel"),
    "convbert": Family("ConvBertConfig", "ConvBertModel"),
    "roformer": Family("RoFormerConfig", "RoFormerModel"),
    "megatron_bert": Family("MegatronBertConfig", "MegatronBertModel"),
    "ernie": Family("ErnieConfig", "ErnieModel"),
    "mobilebert": Family("MobileBertConfig", "MobileBertModel", settings={"intra_bottleneck_size": WIDTH}),
    "squeezebert": Family("SqueezeBertConfig", "SqueezeBertModel"),
    "nystromformer": Family(
        "NystromformerConfig", "NystromformerModel", settings={"num_landmarks": 4, "segment_means_seq_len": TOKENS}
    ),
    "modernbert": Family("ModernBertConfig", "ModernBertModel"),
    "esm": Family("EsmConfig", "EsmModel"),
    "data2vec_text": Family("Data2VecTextConfig", "Data2VecTextModel"),
    # encoder-decoders' encoders
    "t5": Family("T5Config", "T5EncoderModel"),
    "mt5": Family("MT5Config", "MT5EncoderModel"),
    "umt5": Family("UMT5Config", "UMT5EncoderModel"),
    "bart": Family("BartConfig", "BartModel", encoder=True),
    "mbart": Family("MBartConfig", "MBartModel", encoder=True),
    "pegasus": Family("PegasusConfig", "PegasusModel", encoder=True),
    "marian": Family("MarianConfig", "MarianModel", encoder=True),
    "m2m_100": Family("M2M100Config", "M2M100Model", encoder=True),
    "blenderbot": Family("BlenderbotConfig", "BlenderbotModel", encoder=True),
    "led": Family(
        "LEDConfig",
        "LEDModel",
        settings={"attention_window": [4, 4], "max_encoder_position_embeddings": POSITIONS},
        encoder=True,
    ),
    # vision encoders
    "vit": Family("ViTConfig", "ViTModel", "pixels:32", VISION),
    "deit": Family("DeiTConfig", "DeiTModel", "pixels:32", VISION),
    "beit": Family("BeitConfig", "BeitModel", "pixels:32", VISION),
    "dinov2": Family("Dinov2Config", "Dinov2Model", "pixels:32", VISION),
    "clip_vision": Family("CLIPVisionConfig", "CLIPVisionModel", "pixels:32", VISION),
    "siglip_vision": Family("SiglipVisionConfig", "SiglipVisionModel", "pixels:32", VISION),
    "swin": Family(
        "SwinConfig",
        "SwinModel",
        "pixels:32",
        {"image_size": 32, "patch_size": 4, "depths": [1, 1], "num_heads": [2, 4], "window_size": 4, "embed_dim": 16},
    ),
    "convnext": Family("ConvNextConfig", "ConvNextModel", "pixels:32", STAGES),
    "convnextv2": Family("ConvNextV2Config", "ConvNextV2Model", "pixels:32", STAGES),
    "resnet": Family("ResNetConfig", "ResNetModel", "pixels:32", {**STAGES, "embedding_size": 16}),
    "regnet": Family("RegNetConfig", "RegNetModel", "pixels:32", {**STAGES, "embedding_size": 16, "groups_width": 8}),
    "mobilevit": Family(
        "MobileViTConfig",
        "MobileViTModel",
        "pixels:32",
        {"image_size": 32, "hidden_sizes": [16, 24, 32], "neck_hidden_sizes": [8, 8, 16, 16, 24, 24, 32]},
    ),
    "levit": Family(
        "LevitConfig",
        "LevitModel",
        "pixels:64",
        {
            "image_size": 64,
            "hidden_sizes": [16, 32, 48],
            "num_attention_heads": [2, 2, 2],
            "depths": [1, 1, 1],
            "key_dim": [8, 8, 8],
        },
    ),
    "segformer": Family(
        "SegformerConfig",
        "SegformerModel",
        "pixels:32",
        {
            "num_encoder_blocks": 2,
            "depths": [1, 1],
            "sr_ratios": [2, 1],
            "hidden_sizes": [16, 32],
            "num_attention_heads": [1, 2],
            "patch_sizes": [7, 3],
            "strides": [4, 2],
        },
    ),
    # speech encoders
    "wav2vec2": Family("Wav2Vec2Config", "Wav2Vec2Model", "audio", SPEECH),
    "hubert": Family("HubertConfig", "HubertModel", "audio", SPEECH),
    "wavlm": Family("WavLMConfig", "WavLMModel", "audio", SPEECH),
    "data2vec_audio": Family("Data2VecAudioConfig", "Data2VecAudioModel", "audio", SPEECH),
    "sew": Family("SEWConfig", "SEWModel", "audio", {**SPEECH, "conv_dim": [WIDTH] * 13}),
    "unispeech": Family("UniSpeechConfig", "UniSpeechModel", "audio", SPEECH),
    "whisper": Family("WhisperConfig", "WhisperModel", "mel", {"num_mel_bins": 16}, encoder=True),
}


def torchvision_names() -> list[str]:
    """Every torchvision classification model, by its builder's name."""
    tv = import_torchvision()
    return sorted(tv.models.list_models(module=tv.models))


def census_names() -> list[str]:
    """Every model of the census: torchvision's, then transformers' families (factory names)."""
    return [TORCHVISION + n for n in torchvision_names()] + [TRANSFORMERS + f for f in FAMILIES]


def tiny_config(family: Family):
    """The family's config at the tiny sizes: each size under the names the config's own
    constructor takes, then the family's settings."""
    transformers = import_transformers()
    config_class = getattr(transformers, family.config)
    takes = inspect.signature(config_class.__init__).parameters
    sizes = {k: v for k, v in SIZES.items() if k in takes}
    return config_class(**(sizes | TOKEN_IDS | {"attn_implementation": "eager"} | family.settings))


def build(name: str):
    """The census model `name` (a factory name of this module), seeded, in eval mode."""
    import torch

    torch.manual_seed(SEED)
    if name.startswith(TORCHVISION):
        tv = import_torchvision()
        model = tv.models.get_model(name.removeprefix(TORCHVISION), weights=None)
        return seeded_batch_norm(model, torch.Generator().manual_seed(SEED)).eval()
    family = FAMILIES[name.removeprefix(TRANSFORMERS)]
    model = getattr(import_transformers(), family.model)(tiny_config(family))
    return (model.get_encoder() if family.encoder else model).eval()


def inputs_for(name: str, model) -> dict[str, np.ndarray]:
    """The model's inputs from the seeded PCG64 generator: token ids, or standard normal pixels,
    samples or mel features; a torchvision model at the smallest of IMAGE_SIZES its forward takes."""
    rng = np.random.default_rng(SEED)
    if name.startswith(TORCHVISION):
        return {"x": _smallest_image(model, rng)}
    family = FAMILIES[name.removeprefix(TRANSFORMERS)]
    kind, _, size = family.inputs.partition(":")
    if kind == "tokens":
        return {"input_ids": rng.integers(3, VOCAB, (1, TOKENS)).astype(np.int64)}
    if kind == "pixels":
        return {"pixel_values": rng.standard_normal((1, 3, int(size), int(size))).astype(np.float32)}
    if kind == "audio":
        return {"input_values": rng.standard_normal((1, AUDIO_SAMPLES)).astype(np.float32)}
    mel = model.config.num_mel_bins, 2 * model.config.max_source_positions  # whisper's encoder takes exactly this
    return {"input_features": rng.standard_normal((1, *mel)).astype(np.float32)}


def _smallest_image(model, rng: np.random.Generator) -> np.ndarray:
    import torch

    failures = []
    for size in IMAGE_SIZES:
        image = rng.standard_normal((1, 3, size, size)).astype(np.float32)
        try:
            with torch.no_grad():
                model(torch.from_numpy(image))
        except Exception as exc:  # too small for its pooling or its fixed patch grid
            failures.append(f"{size}: {' '.join(str(exc).split())[:120]}")
            continue
        return image
    raise OpbenchError(f"no input size of {IMAGE_SIZES} runs: {failures[-1]}")


def __getattr__(name: str):
    """`census_models:<name>` as a factory, for `opbench model`'s loader (here or on a worker)."""
    if name.startswith(TORCHVISION) or (name.startswith(TRANSFORMERS) and name.removeprefix(TRANSFORMERS) in FAMILIES):

        def factory():
            return build(name)

        factory.__name__ = name
        return factory
    raise AttributeError(name)
