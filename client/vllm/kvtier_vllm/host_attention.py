"""Host attention (``host_attention: true``): each decode row of a kvtier request is attended by
libkvtier where its keys live (``Client.attend``): the request's T0 blocks and the block being
written in vLLM's cache, read token by token, then its host rows in kvtierd's pool, in one
softmax. Nothing is staged, and the same pass gives the per-token weights the scores come from.

The rows' order, and so each score's unit: the T0 units ascending, the blocks after the known
units (the last one being written), then the host units ascending (kvtierd's order of host rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    import kvtier

    from .worker_side import Request


@dataclass
class AttendRow:
    row: int  # the batch row
    token: int  # its query token
    request: Request
    slots: np.ndarray  # uint32: vLLM's block of each T0 unit, then the blocks being written
    t0_tokens: int  # the tokens those blocks hold
    unit_of: torch.Tensor  # int64 per key token: its unit (complete units first; the partial block's: `complete`)
    complete: int  # the request's complete blocks this step: the units scored
    scores: np.ndarray  # float32 per key token, summed over heads and layers


def plan_row(row: int, token: int, r: Request, seq_len: int, block_size: int, t0: int, host: set[int]) -> AttendRow:
    """Row `row`'s keys for a request `r` with `seq_len` tokens (the query's included)."""
    tiers = r.tier
    t0_units = [u for u, t in enumerate(tiers) if t == t0]
    host_units = [u for u, t in enumerate(tiers) if t in host]
    tail = list(range(len(tiers), -(-seq_len // block_size)))
    slots = np.array([r.where[u] for u in t0_units] + [r.blocks[u] for u in tail], dtype=np.uint32)
    t0_tokens = len(t0_units) * block_size + seq_len - len(tiers) * block_size
    complete = seq_len // block_size
    units = np.concatenate([np.repeat(np.array(t0_units + tail, dtype=np.int64), block_size)[:t0_tokens],
                            np.repeat(np.array(host_units, dtype=np.int64), block_size)])
    units[units >= complete] = complete  # the block being written: no score
    return AttendRow(row, token, r, slots, t0_tokens, torch.from_numpy(units), complete,
                     np.zeros(len(units), dtype=np.float32))


def attend_layer(client: kvtier.Client, rows: list[AttendRow], layer: int, query: torch.Tensor,
                 output: torch.Tensor, scale: float) -> None:
    """Layer `layer`'s attention of every row: output[token] from query[token] ([heads, head_size]),
    through NumPy views (a torch tensor costs a DLPack export per call)."""
    f32 = query.dtype == torch.float32
    q_all = (query if f32 else query.float()).numpy()
    out_all = output.numpy() if f32 else np.empty(query.shape, dtype=np.float32)
    lse = np.empty(query.shape[1], dtype=np.float32)
    for a in rows:
        client.attend(a.request.sequence, layer, q=q_all[a.token], scale=scale, out=out_all[a.token], lse=lse,
                      t0_slots=a.slots, t0_tokens=a.t0_tokens, keys_dim_major=True, scores=a.scores)
        if not f32:
            output[a.token].copy_(torch.from_numpy(out_all[a.token]))


def unit_scores(a: AttendRow, q_heads: int) -> torch.Tensor:
    """The forward's score of each complete unit, summed over the layers, averaged over query heads."""
    sums = torch.zeros(a.complete + 1, dtype=torch.float32).index_add_(0, a.unit_of, torch.from_numpy(a.scores))
    return sums[: a.complete] / q_heads
