"""kvtier.copy_rows (libkvtier's copy_rows kernel) against torch's index ops, and its checks: what
TieredCache assembles a layer's keys and values with on the CPU."""

import numpy as np
import pytest

import torch
import kvtier
from kvtier import copy_rows


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_copy_rows_equals_index_copy_from_a_store_and_from_staged_rows(dtype):
    g = torch.Generator().manual_seed(5)
    store = [torch.randn(3, 40, 16, generator=g).to(dtype) for _ in range(2)]  # K, V [heads, slots, dim]
    staged = [torch.randn(6, 3, 16, generator=g).to(dtype).transpose(0, 1) for _ in range(2)]  # token-major
    slots, at = np.array([7, 8, 9, 30, 2]), np.array([0, 1, 2, 5, 11])
    host = np.array([3, 4, 6, 7, 8, 12])
    got = [torch.zeros(3, 13, 16, dtype=dtype) for _ in range(2)]
    copy_rows(got, store, slots, at)
    copy_rows(got, staged, np.arange(6), host)
    for g_, s, t in zip(got, store, staged):
        want = torch.zeros(3, 13, 16, dtype=dtype)
        want.index_copy_(1, torch.as_tensor(at), s.index_select(1, torch.as_tensor(slots)))
        want.index_copy_(1, torch.as_tensor(host), t)
        assert torch.equal(g_, want)


def test_bad_tensors_or_indices_raise_and_copy_nothing():
    dst, src = torch.zeros(2, 4, 8), torch.ones(2, 4, 8)
    rows = np.array([0, 1])
    with pytest.raises(kvtier.InvalidArgumentError, match="outside"):
        copy_rows([dst], [src], np.array([0, 4]), rows)
    with pytest.raises(kvtier.InvalidArgumentError, match="destinations"):
        copy_rows([dst], [src], rows, np.array([1]))
    assert not dst.any()
    with pytest.raises(ValueError, match="heads and head_dim"):
        copy_rows([dst], [torch.ones(3, 4, 8)], rows, rows)
    with pytest.raises(ValueError, match="one dtype"):
        copy_rows([dst], [src.double()], rows, rows)
    with pytest.raises(ValueError, match="contiguous"):
        copy_rows([dst], [torch.ones(2, 8, 4).transpose(1, 2)], rows, rows)
    with pytest.raises(ValueError, match="share one shape"):
        copy_rows([dst, torch.zeros(2, 5, 8)], [src, src], rows, rows)
