"""The ops every opbench build offers: what the listing and the catalog tests both require."""

CORE_OPS = frozenset(
    {
        "matmul",
        "linear",
        "dot",
        "sum",
        "mean",
        "var",
        "std",
        "softmax",
        "log_softmax",
        "logsumexp",
        "layer_norm",
        "exp",
        "log",
        "tanh",
        "sigmoid",
        "gelu",
        "erf",
        "conv1d",
    }
)
