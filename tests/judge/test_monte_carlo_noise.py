"""A Monte Carlo run adds its sampled rounding errors into the noise's own array, not a new one
(an attention's scores are 16 M values at 2,048 tokens), and gets the bits `t + noise` gives."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from accuracy.judge.torch_emulation import _plus

_VALUES = arrays(np.float64, st.integers(1, 6).map(lambda n: (n, 3)), elements=st.floats(allow_nan=False, width=64))


@given(_VALUES, st.data())
def test_the_sum_is_t_plus_noise_bit_for_bit_and_reuses_the_noise_where_it_can(values, data):
    noise = data.draw(arrays(np.float64, values.shape, elements=st.floats(-1e3, 1e3, width=64)))
    expected = torch.from_numpy(values) + torch.from_numpy(noise.copy())
    got = _plus(torch.from_numpy(values), noise)
    assert torch.equal(got.view(torch.int64), expected.view(torch.int64))  # bit for bit, signed zeros too
    assert got.data_ptr() == torch.from_numpy(noise).data_ptr()  # written in place, no new array


def test_a_transposed_or_float32_tensor_gets_a_new_array_with_its_own_layout():
    t = torch.arange(6, dtype=torch.float64).reshape(2, 3).T  # not contiguous
    noise = np.full((3, 2), 0.25)
    got = _plus(t, noise)
    assert got.stride() == (t + 0.25).stride() and torch.equal(got, t + 0.25)
    assert got.data_ptr() != torch.from_numpy(noise).data_ptr()
    single = torch.ones(2, 3, dtype=torch.float32)
    assert _plus(single, np.full((2, 3), 0.5)).dtype == torch.float32
