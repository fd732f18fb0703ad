"""kvtier.block_scores (libkvtier's paged_block_scores) against a PyTorch softmax, on a cache laid
out as vLLM's CPU backend lays it out: [blocks, kv_heads, K rows then V rows, head_dim]."""

import pytest

import torch
import kvtier

BLOCKS, KV_HEADS, Q_HEADS, BS, DIM = 10, 2, 4, 8, 16
SCALE = DIM ** -0.5


def case(dtype=torch.float32):
    g = torch.Generator().manual_seed(3)
    cache = torch.randn(BLOCKS, KV_HEADS, 2 * BS, DIM, generator=g).to(dtype)
    keys = cache[:, :, :BS]  # strided: the V rows sit between two heads' keys
    # Row 0 decodes over 29 keys (3 full blocks + 5); row 1 prefills 6 queries over 16 keys.
    table = torch.tensor([[4, 9, 1, 6], [2, 7, 0, 0]], dtype=torch.int32)
    seq_lens = torch.tensor([29, 16], dtype=torch.int32)
    query_start = torch.tensor([0, 1, 7], dtype=torch.int32)
    query = torch.randn(7, Q_HEADS, DIM, generator=g)
    return query, keys, table, seq_lens, query_start


def reference(query, keys, table, seq_lens, query_start):
    out = torch.zeros(table.shape[0], table.shape[1], dtype=torch.float64)
    group = Q_HEADS // KV_HEADS
    for r in range(table.shape[0]):
        n, q0, q1 = int(seq_lens[r]), int(query_start[r]), int(query_start[r + 1])
        k = keys[table[r].long()].double().permute(1, 0, 2, 3).reshape(KV_HEADS, -1, DIM)[:, :n]
        for j in range(q1 - q0):
            seen = n - (q1 - q0) + j + 1
            for h in range(Q_HEADS):
                p = torch.softmax(SCALE * k[h // group, :seen] @ query[q0 + j, h].double(), dim=0)
                full = min(seen, n // BS * BS)
                out[r].index_add_(0, torch.arange(full) // BS, p[:full] / Q_HEADS)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_block_scores_equal_a_softmax_per_row(dtype):
    args = case(dtype)
    out = torch.full((2, 4), -1.0)
    kvtier.block_scores(*args, SCALE, out)
    assert torch.allclose(out.double(), reference(*args), atol=1e-5)
    assert out[0, 3] == 0 and out[1, 2] == 0  # the partial block and the blocks past the row: no score
    assert abs(float(out[1].sum()) - 6.0) < 1e-4  # each of the six queries sees only full blocks


def test_bad_input_raises():
    query, keys, table, seq_lens, query_start = case()
    out = torch.zeros(2, 4)
    bad = table.clone()
    bad[0, 1] = BLOCKS
    with pytest.raises(kvtier.InvalidArgumentError, match="block id 10"):
        kvtier.block_scores(query, keys, bad, seq_lens, query_start, SCALE, out)
    with pytest.raises(kvtier.InvalidArgumentError, match="6 queries over 5 keys"):
        kvtier.block_scores(query, keys, table, torch.tensor([29, 5], dtype=torch.int32), query_start, SCALE, out)
    with pytest.raises(kvtier.InvalidArgumentError, match="float32, bfloat16 or float16"):
        kvtier.block_scores(query, keys.double(), table, seq_lens, query_start, SCALE, out)
