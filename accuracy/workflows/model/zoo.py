"""Models for `opbench model`'s tests, docs and asv suite, built with fixed seeds (no downloads).

- `resnet18`: torchvision's own code, random weights (`weights=None`);
- `bert2`: transformers' BertModel with 2 layers (hidden 64), random weights from a config;
- `small_cnn` and `small_transformer`: a few layers of the same kinds (conv, batch norm,
  dropout, flatten before a linear; linear, layer norm, GELU), small enough to judge in seconds,
  for the injected-bug tests and the asv suite;
- `decoder`: a Llama-style decoder written out (RMSNorm, rotary attention, SiLU-gated MLP), with
  keywords that inject the common transformer port bugs where they live;
- `bert_base`, `llama_8x512` and `qwen2_5_shape`: real-size transformers (random weights from
  configs) for the timings in docs/models.md and docs/generation.md;
- `llama_tiny`, `gpt2_tiny`, `vit_tiny` (transformers, tiny configs) and `mobilenet_v3`
  (torchvision's, in-place Hardswish): models as users bring them; `llama_padded`, llama_tiny on
  left-padded inputs (where an attention mask's fill matters).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from accuracy.workflows.model.torchvision_import import import_torchvision, import_transformers

SEED = 0
BERT_TOKENS = 8
LARGE_TOKENS = 128  # the real-size models' sequence length


def seeded_batch_norm(model: nn.Module, generator: torch.Generator) -> nn.Module:
    """Running statistics and affine parameters away from (0, 1, 1, 0): a fresh BatchNorm is the
    identity, on which an epsilon or a train-mode bug would hardly show."""
    with torch.no_grad():
        for m in model.modules():
            if (
                isinstance(m, nn.modules.batchnorm._BatchNorm)
                and m.running_mean is not None
                and m.running_var is not None
            ):
                m.running_mean.uniform_(-0.5, 0.5, generator=generator)
                m.running_var.uniform_(0.05, 2.0, generator=generator)
                m.weight.uniform_(0.5, 1.5, generator=generator)
                m.bias.uniform_(-0.5, 0.5, generator=generator)
    return model


def resnet18() -> nn.Module:
    torch.manual_seed(SEED)
    return seeded_batch_norm(import_torchvision().models.resnet18(weights=None), torch.Generator().manual_seed(SEED))


def bert2() -> nn.Module:
    transformers = import_transformers()
    torch.manual_seed(SEED)
    config = transformers.BertConfig(
        vocab_size=512,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    return transformers.BertModel(config, add_pooling_layer=True)


def bert_base() -> nn.Module:
    """BertModel at BERT-base's size (12 layers, hidden 768, 12 heads, intermediate 3072), random
    weights from the config: the size issue 41's budgets are set for (scripts/measure_models.py)."""
    transformers = import_transformers()
    torch.manual_seed(SEED)
    config = transformers.BertConfig(max_position_embeddings=LARGE_TOKENS, attn_implementation="eager")
    return transformers.BertModel(config, add_pooling_layer=True).eval()


def llama_8x512() -> nn.Module:
    """A Llama-style LlamaModel: 8 layers, hidden 512, GQA (8 heads, 2 key/value heads), random weights."""
    transformers = import_transformers()
    torch.manual_seed(SEED)
    config = transformers.LlamaConfig(
        vocab_size=32000, hidden_size=512, intermediate_size=1376, num_hidden_layers=8, num_attention_heads=8,
        num_key_value_heads=2, max_position_embeddings=LARGE_TOKENS,
    )  # fmt: skip
    return transformers.LlamaModel(config).eval()


def qwen2_5_shape() -> nn.Module:
    """transformers' Qwen2Model at Qwen2.5-0.5B's shape (24 layers, hidden 896, 14 heads, 2
    key/value heads, intermediate 4864, its 151,936-token vocabulary, rope theta 1e6), random
    weights from the config: issue 59's real-size budget for LLM users (scripts/measure_models.py)."""
    transformers = import_transformers()
    torch.manual_seed(SEED)
    config = transformers.Qwen2Config(
        vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, rope_theta=1e6, rms_norm_eps=1e-6, max_position_embeddings=LARGE_TOKENS,
        tie_word_embeddings=True, attn_implementation="eager",
    )  # fmt: skip
    return transformers.Qwen2Model(config).eval()


class SmallCNN(nn.Module):
    """conv (stride 2) -> batch norm -> relu -> conv -> relu -> dropout -> flatten -> linear."""

    def __init__(self, channels: int = 4, size: int = 8):
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.dropout = nn.Dropout(0.5)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(channels * (size // 2) ** 2, 5)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.dropout(self.relu(self.conv2(x)))
        return self.fc(self.flatten(x))


def small_cnn() -> nn.Module:
    torch.manual_seed(SEED)
    return seeded_batch_norm(SmallCNN(), torch.Generator().manual_seed(SEED))


class SmallMixed(nn.Module):
    """conv -> group norm -> LeakyReLU -> conv -> hardswish -> avg pool (padded) -> softmax (last
    axis) -> bilinear upsample -> SiLU -> flatten -> linear -> hardsigmoid: the layer kinds the
    other zoo models lack, for the self-test of causes."""

    def __init__(self, channels: int = 4):
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.norm = nn.GroupNorm(2, channels)
        self.leaky = nn.LeakyReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.hardswish = nn.Hardswish()
        self.pool = nn.AvgPool2d(3, stride=2, padding=1)
        self.softmax = nn.Softmax(dim=-1)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear")
        self.silu = nn.SiLU()
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(channels * 64, 6)
        self.hardsigmoid = nn.Hardsigmoid()

    def forward(self, x):
        x = self.pool(self.hardswish(self.conv2(self.leaky(self.norm(self.conv1(x))))))
        return self.hardsigmoid(self.fc(self.flatten(self.silu(self.up(self.softmax(x))))))


def small_mixed() -> nn.Module:
    torch.manual_seed(SEED)
    return SmallMixed()


class SmallTransformerBlock(nn.Module):
    """linear -> layer norm -> linear -> GELU (erf) -> linear: a transformer MLP block's layers."""

    def __init__(self, width: int = 16):
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.gelu = nn.GELU()
        self.down = nn.Linear(2 * width, width)

    def forward(self, x):
        return self.down(self.gelu(self.up(self.norm(self.proj(x)))))


def small_transformer() -> nn.Module:
    torch.manual_seed(SEED)
    return SmallTransformerBlock()


class RMSNorm(nn.Module):
    """x / rms(x) * w, by rsqrt (as Llama writes it) or by division (`by_division`: another correct route)."""

    def __init__(self, width: int, eps: float = 1e-5, by_division: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, width))
        self.eps, self.by_division = eps, by_division

    def forward(self, x):
        mean_square = x.pow(2).mean(-1, keepdim=True) + self.eps
        return self.weight * (x / torch.sqrt(mean_square) if self.by_division else x * torch.rsqrt(mean_square))


def _rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def _rotate_interleaved(x):
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


class DecoderAttention(nn.Module):
    """Causal self-attention with rotary position embeddings, its core (scores, scale, mask,
    softmax, weighted sum, rotary) in its own forward, between its four linear leaves: where the
    common transformer port bugs live. Each keyword but `sdpa` reintroduces one: the scale
    1/sqrt(width) for 1/sqrt(head width), no causal mask, the interleaved rotary convention for
    rotate-half, a bfloat16 softmax. `sdpa`: F.scaled_dot_product_attention, another correct route."""

    def __init__(self, width: int, heads: int, *, scale_by_width=False, causal=True, interleaved=False,
                 softmax_dtype=None, sdpa=False):  # fmt: skip
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(width, width, bias=False) for _ in range(4))
        self.heads, self.head_width = heads, width // heads
        self.scale = (width if scale_by_width else self.head_width) ** -0.5
        self.causal, self.interleaved, self.softmax_dtype, self.sdpa = causal, interleaved, softmax_dtype, sdpa

    def _rotary(self, x):
        t, half = x.shape[-2], self.head_width // 2
        angles = torch.arange(t, dtype=x.dtype)[:, None] * 10000.0 ** (-torch.arange(half, dtype=x.dtype) / half)
        if self.interleaved:
            cos, sin = angles.cos().repeat_interleave(2, -1), angles.sin().repeat_interleave(2, -1)
            return x * cos + _rotate_interleaved(x) * sin
        cos, sin = torch.cat((angles.cos(), angles.cos()), -1), torch.cat((angles.sin(), angles.sin()), -1)
        return x * cos + _rotate_half(x) * sin

    def forward(self, x):
        b, t, width = x.shape
        q, k, v = (
            p(x).view(b, t, self.heads, self.head_width).transpose(1, 2)
            for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        q, k = self._rotary(q), self._rotary(k)
        if self.sdpa:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        else:
            scores = q @ k.transpose(-1, -2) * self.scale
            if self.causal:
                scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
            if self.softmax_dtype is not None:
                probs = torch.softmax(scores.to(self.softmax_dtype), -1).to(scores.dtype)
            else:
                probs = torch.softmax(scores, -1)
            out = probs @ v
        return self.o_proj(out.transpose(1, 2).reshape(b, t, width))


class DecoderMLP(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(width, 2 * width, bias=False), nn.Linear(width, 2 * width, bias=False)
        self.down_proj, self.act_fn = nn.Linear(2 * width, width, bias=False), nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, width: int, heads: int, eps: float, by_division: bool, attention: dict):
        super().__init__()
        self.input_layernorm = RMSNorm(width, eps, by_division)
        self.self_attn = DecoderAttention(width, heads, **attention)
        self.post_attention_layernorm = RMSNorm(width, eps, by_division)
        self.mlp = DecoderMLP(width)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    """A Llama-style decoder written out, so that a test can inject each common port bug where
    it lives (`decoder(**bug)`), with no download and no transformers import."""

    def __init__(self, width=32, heads=4, depth=2, eps=1e-5, by_division=False, **attention):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(width, heads, eps, by_division, attention) for _ in range(depth))
        self.norm = RMSNorm(width, eps, by_division)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


def decoder(**bug) -> nn.Module:
    """The correct decoder (no keyword), or a port of it with one bug or another correct route."""
    torch.manual_seed(SEED)
    return Decoder(**bug).eval()


def decoder_24(**bug) -> nn.Module:
    """`decoder` 24 layers deep (313 units): the model page is measured on it (docs/models.md)."""
    return decoder(depth=24, **bug)


# transformers' decoders from a tiny config (GQA: 4 heads, 2 key/value heads), random weights
TINY_DECODER = {
    "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 64,
}  # fmt: skip


def qwen2_tiny() -> nn.Module:
    """transformers' Qwen2ForCausalLM (its units under `model.`, as users load it) from TINY_DECODER."""
    transformers = import_transformers()
    torch.manual_seed(SEED)
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**TINY_DECODER)).eval()


def llama_tiny() -> nn.Module:
    """transformers' LlamaModel from TINY_DECODER."""
    transformers = import_transformers()
    torch.manual_seed(SEED)
    return transformers.LlamaModel(transformers.LlamaConfig(**TINY_DECODER)).eval()


def llama_padded() -> nn.Module:
    """`llama_tiny`, whose example inputs are left-padded (`attention_mask` 0 on the first 3 of 8
    tokens): their queries see no key, the rows where a mask's fill matters (SDPA gives them 0)."""
    return llama_tiny()


def gpt2_tiny() -> nn.Module:
    transformers = import_transformers()
    torch.manual_seed(SEED)
    config = transformers.GPT2Config(vocab_size=64, n_positions=64, n_embd=32, n_layer=2, n_head=4)
    return transformers.GPT2Model(config).eval()


def vit_tiny() -> nn.Module:
    transformers = import_transformers()
    torch.manual_seed(SEED)
    config = transformers.ViTConfig(
        image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64,
    )  # fmt: skip
    return transformers.ViTModel(config, add_pooling_layer=False).eval()


def mobilenet_v3() -> nn.Module:
    """torchvision's MobileNetV3-Small as it ships: its Hardswish and ReLU layers are in place."""
    torch.manual_seed(SEED)
    return import_torchvision().models.mobilenet_v3_small(weights=None)


def example_inputs(name: str) -> dict[str, np.ndarray]:
    """Inputs for each model here, from the seeded PCG64 generator."""
    rng = np.random.default_rng(SEED)
    if name == "llama_padded":
        padded = np.ones((1, BERT_TOKENS), dtype=np.int64)
        padded[:, :3] = 0
        return example_inputs("llama_tiny") | {"attention_mask": padded}
    if name in ("bert_base", "llama_8x512", "qwen2_5_shape"):
        vocabulary = {"bert_base": 30522, "llama_8x512": 32000, "qwen2_5_shape": 151936}[name]
        return {"input_ids": rng.integers(0, vocabulary, (1, LARGE_TOKENS)).astype(np.int64)}
    if name in ("bert2", "llama_tiny", "gpt2_tiny", "qwen2_tiny"):
        return {"input_ids": rng.integers(0, 512 if name == "bert2" else 64, (1, BERT_TOKENS)).astype(np.int64)}
    if name == "vit_tiny":
        return {"pixel_values": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}
    shapes = {
        "resnet18": (1, 3, 224, 224),
        "small_cnn": (2, 3, 8, 8),
        "small_mixed": (2, 3, 8, 8),
        "small_transformer": (2, 4, 16),
        "decoder": (1, 8, 32),
        "decoder_24": (1, 8, 32),
        "mobilenet_v3": (1, 3, 32, 32),
    }
    return {"x": rng.standard_normal(shapes[name]).astype(np.float32)}


class _Bessel(nn.Module):
    """A linear layer, then a Bessel function: aten::i0 has no ONNX form in either exporter."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        return torch.special.i0(self.linear(x))


def not_exportable() -> nn.Module:
    torch.manual_seed(SEED)
    return _Bessel()


def not_a_module():
    return "a string"


def keras_small_cnn(*, bn_epsilon: float = 1e-5, same_padding: bool = False, channels_first_flatten: bool = True):
    """small_cnn ported to Keras with its weights, and the mapping from Keras layers to torch layers.

    The defaults are a correct port; each keyword reintroduces a known port bug: Keras
    BatchNormalization's default epsilon (1e-3), padding="same" for torch's padding=1 at stride 2
    (TensorFlow pads after only), and a channels-last Flatten before the Dense."""
    from accuracy.backends import start_tensorflow

    start_tensorflow()  # before any Keras layer starts TF's runtime
    import keras

    torch_model = small_cnn().eval()
    layers = [keras.Input((8, 8, 3))]
    if not same_padding:
        layers.append(keras.layers.ZeroPadding2D(1, name="pad1"))
    layers += [
        keras.layers.Conv2D(4, 3, strides=2, padding="same" if same_padding else "valid", use_bias=False, name="conv1"),
        keras.layers.BatchNormalization(epsilon=bn_epsilon, name="bn1"),
        keras.layers.ReLU(name="relu1"),
        keras.layers.Conv2D(4, 3, padding="same", name="conv2"),
        keras.layers.ReLU(name="relu2"),
        keras.layers.Dropout(0.5, name="dropout"),
    ]
    if channels_first_flatten:
        layers.append(keras.layers.Permute((3, 1, 2), name="to_nchw"))
    layers += [keras.layers.Flatten(name="flatten"), keras.layers.Dense(5, name="fc")]
    model = keras.Sequential(layers)
    t = {k: v.detach().numpy() for k, v in torch_model.state_dict().items()}
    model.get_layer("conv1").set_weights([t["conv1.weight"].transpose(2, 3, 1, 0)])
    model.get_layer("bn1").set_weights([t["bn1.weight"], t["bn1.bias"], t["bn1.running_mean"], t["bn1.running_var"]])
    model.get_layer("conv2").set_weights([t["conv2.weight"].transpose(2, 3, 1, 0), t["conv2.bias"]])
    model.get_layer("fc").set_weights([t["fc.weight"].T, t["fc.bias"]])
    mapping = {"conv1": "conv1", "bn1": "bn1", "relu1": "relu", "conv2": "conv2", "relu2": "relu#2"}
    mapping |= {"dropout": "dropout", "flatten": "flatten", "fc": "fc"}
    mapping |= ({} if same_padding else {"pad1": "conv1"}) | ({"to_nchw": "flatten"} if channels_first_flatten else {})
    return model, mapping
