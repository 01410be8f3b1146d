"""Models for `opbench model`'s tests, docs and asv suite, built with fixed seeds (no downloads).

- `resnet18`: torchvision's own code, random weights (`weights=None`);
- `bert2`: transformers' BertModel with 2 layers (hidden 64), random weights from a config;
- `small_cnn` and `small_transformer`: a few layers of the same kinds (conv, batch norm,
  dropout, flatten before a linear; linear, layer norm, GELU), small enough to judge in seconds,
  for the injected-bug tests and the asv suite.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from accuracy.backends.torchvision_import import import_torchvision, import_transformers

SEED = 0
BERT_TOKENS = 8


def _seeded_batch_norm(model: nn.Module, generator: torch.Generator) -> nn.Module:
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
    return _seeded_batch_norm(import_torchvision().models.resnet18(weights=None), torch.Generator().manual_seed(SEED))


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
    return _seeded_batch_norm(SmallCNN(), torch.Generator().manual_seed(SEED))


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


def example_inputs(name: str) -> dict[str, np.ndarray]:
    """Inputs for each model here, from the seeded PCG64 generator."""
    rng = np.random.default_rng(SEED)
    if name == "bert2":
        return {"input_ids": rng.integers(0, 512, (1, BERT_TOKENS)).astype(np.int64)}
    shapes = {"resnet18": (1, 3, 224, 224), "small_cnn": (2, 3, 8, 8), "small_transformer": (2, 4, 16)}
    return {"x": rng.standard_normal(shapes[name]).astype(np.float32)}


class _Spectrum(nn.Module):
    """A linear layer, then a spectrum: aten::fft_rfft has no ONNX opset 17 form."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        return torch.fft.rfft(self.linear(x)).abs()


def not_exportable() -> nn.Module:
    torch.manual_seed(SEED)
    return _Spectrum()


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
