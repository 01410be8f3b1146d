"""The first-order spread (torch_emulation.first_order_spread) is the quantity the Monte Carlo runs
estimate: per element, the runs' mean squared error agrees with it within the runs' own
statistical error, and the count of roundings is the same; where one error reaches the output
along two paths, it refuses and the runs stay."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from accuracy.core.dtypes import FORMATS
from accuracy.judge.emulation import recursive_sum_variance
from accuracy.judge.torch_emulation import NotFirstOrder, first_order_spread, monte_carlo_runs
from accuracy.workflows.model.trace import float64_throughout

RUNS = 200


def _conv_bn_relu(channels: int, seed: int):
    torch.manual_seed(seed)
    conv, bn = nn.Conv2d(3, channels, 3, padding=1).double(), nn.BatchNorm2d(channels).double().eval()
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        bn.weight.uniform_(0.5, 2)
    return lambda x: F.relu(bn(conv(x)))


def _linear_gelu(width: int, seed: int):
    torch.manual_seed(seed)
    linear = nn.Linear(width, 7).double()
    return lambda x: F.gelu(linear(x)) * 0.5


def _mean(width: int, seed: int):
    return lambda x: torch.tanh(x).mean(-1)


def _avg_pool(width: int, seed: int):
    return lambda x: F.avg_pool2d(torch.tanh(x), 2)


def _agreement(fn, x: np.ndarray, fmt_name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per element: (z-score of the runs' mean squared error against the first-order value, the
    first-order RMS, whether every run was exact there, the runs' mean squared error, the exact
    value); the
    z-score's standard error is the runs' own spread of squared errors."""
    fmt = FORMATS[fmt_name]
    with torch.no_grad(), float64_throughout():
        exact = fn(x=torch.from_numpy(x)).numpy()
        rms, _, _, counted = first_order_spread(fn, {"x": x}, fmt)
        runs, _, _, sampled = monte_carlo_runs(fn, {"x": x}, fmt, [[7, i] for i in range(RUNS)])
    assert counted == sampled
    squares = np.square(np.array(runs) - exact)
    spread = np.std(squares, axis=0) / np.sqrt(RUNS)
    z = (np.mean(squares, axis=0) - rms**2) / np.where(spread > 0, spread, 1.0)
    return z, rms, (squares == 0).all(axis=0), np.mean(squares, axis=0), exact


@settings(max_examples=8, deadline=None)
@given(
    case=st.sampled_from(
        [(_conv_bn_relu, (1, 3, 5, 5)), (_linear_gelu, (6, 9)), (_mean, (4, 33)), (_avg_pool, (1, 2, 6, 6))]
    ),
    size=st.integers(2, 6),
    seed=st.integers(0, 2**16),
    fmt_name=st.sampled_from(["float32", "bfloat16"]),
)
def test_the_first_order_spread_is_what_the_runs_estimate(case, size, seed, fmt_name):
    build, shape = case
    fn = build(size if build is _conv_bn_relu else shape[-1], seed)
    x = np.random.default_rng(seed).standard_normal(shape) * 3
    z, rms, runs_zero, ms, exact = _agreement(fn, x, fmt_name)
    # relu's zeros: exact in every run, and in first order but for the Gaussian tail of an input
    # below the kink, which the runs rarely reach (seed 188 in bfloat16: 4.6e-10 against a median
    # of 3.2e-3): never the size of a typical element's error
    assert (rms > 0).any() and (rms[runs_zero] < 0.25 * np.median(rms[rms > 0])).all()
    # no element off by more than its runs' statistical error, or by the ulp of a value within its
    # error of a power of two (2x in some runs; first order takes the exact value's ulp: seed 1298
    # in bfloat16, -0.03128 by 2^-5, 0.65x)
    ratio = ms / np.where(rms > 0, rms**2, 1.0)
    power = 2.0 ** np.round(np.log2(np.where(exact != 0, np.abs(exact), 1.0)))
    binade = (np.abs(np.abs(exact) - power) < 4 * rms) & (ratio >= 0.25) & (ratio <= 4)
    # at relu's kink (its output within a few errors of 0) first order is a Gaussian closed form:
    # where the error is the sum of few roundings (a 2x2 kernel) with lighter tails than a
    # Gaussian's it may overstate the runs' mean square, the more so the further below the kink
    # (seed 682 in bfloat16: 2.3x; seed 933, size 6: 4.9x), never understate it (a false alarm)
    kink = (np.abs(exact) < 4 * rms) & (ratio <= 1.25)
    assert np.all((np.abs(z) < 7) | (np.abs(ratio - 1) < 0.25) | kink | binade)
    # and no bias across the elements away from relu's kink and a power of two
    ordinary = z[~(kink | binade)]
    assert ordinary.size == 0 or abs(np.mean(ordinary)) < 6 / np.sqrt(ordinary.size) + 0.35


def test_a_missing_rounding_would_show():
    """The check above can fail: the runs against half the first-order spread are far off."""
    fn = _linear_gelu(9, 1)
    x = np.random.default_rng(1).standard_normal((6, 9))
    fmt = FORMATS["float32"]
    with torch.no_grad(), float64_throughout():
        exact = fn(x=torch.from_numpy(x)).numpy()
        rms, *_ = first_order_spread(fn, {"x": x}, fmt)
        runs, *_ = monte_carlo_runs(fn, {"x": x}, fmt, [[7, i] for i in range(RUNS)])
    squares = np.square(np.array(runs) - exact)
    z = (np.mean(squares, axis=0) - rms**2 / 2) / (np.std(squares, axis=0) / np.sqrt(RUNS))
    assert np.mean(z) > 5


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: F.layer_norm(x, (x.shape[-1],)),  # x - mean(x), then divided by its own spread
        lambda x: torch.softmax(x, -1),
        lambda x: (lambda t: t * t)(torch.tanh(x)),
    ],
    ids=["layer_norm", "softmax", "square_of_a_rounded_value"],
)
def test_an_error_reaching_the_output_twice_is_left_to_the_runs(fn):
    with pytest.raises(NotFirstOrder), torch.no_grad(), float64_throughout():
        first_order_spread(fn, {"x": np.random.default_rng(0).standard_normal((3, 8))}, FORMATS["float32"])


def test_relu_near_its_kink_keeps_the_error_it_can_give():
    """A linear layer's outputs within their rounding error of relu's kink: relu passes on part of
    the error, never none of it (a zero scale would call a correct port's tiny positive output an
    error), as much as the runs say (the sum's error is Gaussian in both)."""
    rng = np.random.default_rng(5)
    weight, x = torch.from_numpy(rng.standard_normal((41, 16))), rng.standard_normal((1, 16))
    bias = -(torch.from_numpy(x) @ weight.T)[0] + torch.linspace(-6e-7, 6e-7, 41, dtype=torch.float64)
    z, rms, runs_zero, _, _ = _agreement(lambda x: F.relu(F.linear(x, weight, bias)), x, "float32")
    assert (rms > 0).all() and runs_zero.any()  # some outputs the runs never move above 0
    assert np.max(np.abs(z)) < 7


def test_the_same_inputs_give_bitwise_the_same_spreads():
    """Determinism: the runs share the first run's ulps and sums within one call only, and the
    first-order spread has no randomness: a second call gives the same bits."""
    fn = _conv_bn_relu(3, 11)
    x = np.random.default_rng(11).standard_normal((1, 3, 5, 5))
    fmt = FORMATS["bfloat16"]
    with torch.no_grad(), float64_throughout():
        first = [monte_carlo_runs(fn, {"x": x}, fmt, [[3, i] for i in range(4)])[0] for _ in range(2)]
        spreads = [first_order_spread(fn, {"x": x}, fmt)[0] for _ in range(2)]
    assert all(np.array_equal(a, b) for a, b in zip(*first, strict=True))
    assert not np.array_equal(first[0][0], first[0][1])  # the runs themselves differ
    assert np.array_equal(spreads[0], spreads[1])


def test_an_average_pool_allows_the_rounding_of_its_float32_window_sum():
    """DenseNet-121's transition pools on ONNX Runtime without graph optimizations: an average of
    four activations near 2 that cancel to 3.3e-4, summed in float32, is 3.0e-8 from the exact
    value, 1,024 ulp of the result. Modelled as one rounding of its result, the pool allowed a few
    of those ulps and was flagged at 252x; as the mean of its window, its spread is the sum's."""
    window = np.array([[[[1.9, -2.3], [2.7, -2.29868965]]]], dtype=np.float32)
    fn = lambda x: F.avg_pool2d(x, 2)  # noqa: E731
    with torch.no_grad(), float64_throughout():
        exact = fn(torch.from_numpy(window.astype(np.float64))).item()
        rms, *_ = first_order_spread(fn, {"x": window.astype(np.float64)}, FORMATS["float32"])
    a, b, c, d = window.ravel()
    summed = float((((a + b) + c) + d) / np.float32(4))  # float32 throughout, as the kernel sums
    assert abs(summed - exact) > 1000 * np.spacing(np.float32(exact))
    assert abs(summed - exact) < 2 * rms.item()


def test_a_global_average_allows_a_loop_that_sums_near_equal_pixels():
    """ONNX Runtime's optimized GlobalAveragePool is a float32 loop in storage order (bit for bit
    numpy's add.accumulate). Over MaxViT-T's squeeze-excitation channels that GELU saturates near
    its minimum (3,136 pixels at -0.1697), each addition rounds the same way: the error was 34x
    the random-order expectation, and the layer 2.9x its typical threshold. The model allows the
    loop's own error."""
    rng = np.random.default_rng(60)
    saturated = -0.16972 + rng.normal(0.0, 2e-7, (2, 56, 56))
    varied = rng.normal(0.07, 0.4, (2, 56, 56))
    field = np.concatenate([saturated, varied]).astype(np.float32)[None]
    fn = lambda x: F.adaptive_avg_pool2d(x, 1)  # noqa: E731
    with torch.no_grad(), float64_throughout():
        exact = fn(torch.from_numpy(field.astype(np.float64))).numpy().ravel()
        rms, *_ = first_order_spread(fn, {"x": field.astype(np.float64)}, FORMATS["float32"])
    flat = field.reshape(4, -1)
    k = flat.shape[1]
    total = np.zeros(4, np.float32)
    for column in flat.T:  # float32 throughout, in storage order, as the kernel sums
        total = (total + column).astype(np.float32)
    error = np.abs(total / np.float32(k) - exact)
    f64 = flat.astype(np.float64)
    random_order = np.sqrt(recursive_sum_variance(f64.sum(1), np.square(f64).sum(1), np.full(4, k), FORMATS["float32"]))
    assert np.all(error[:2] > 10 * random_order[:2] / k)  # the saturated channels: far beyond a random order
    assert np.all(error <= 1.01 * rms.ravel())


def test_a_sum_over_a_scalars_only_dimension_is_modelled_as_over_all_of_them():
    """`dim=0` of a 0-d tensor is allowed by torch and names its one term: modelled as the sum over
    all its dimensions (the loop model tried to move that dimension and raised)."""
    x = np.random.default_rng(60).standard_normal((3, 4))
    with torch.no_grad(), float64_throughout():
        whole, *_ = first_order_spread(lambda x: torch.sum(x.sum()), {"x": x}, FORMATS["float32"])
        named, *_ = first_order_spread(lambda x: torch.sum(x.sum(), dim=0), {"x": x}, FORMATS["float32"])
    assert whole.item() > 0 and named.item() == whole.item()
