"""Host attention (``TieredCache(host_attention=True)``, CPU): libkvtier computes each decode
step's attention where the keys live, nothing copied or assembled (DESIGN §6).

Per layer and batch row, one ``Client.attend`` call: the query against the row's live T0 slots in
the cache's own storage (``[batch, kv_heads, slots, head_dim]``, read in slot order: keys carry
their positions, RoPE being applied before caching, and a decode query attends every live key, so
their order does not matter) and against its T1/T2 rows in the pool, in one softmax (libkvtier's
attend_rows: chunks of rows on a few threads). It returns the attention output and adds every
row's probability, summed over the query heads, to the step's scores, which go to kvtierd once
per forward at their positions.

Exact up to float32 rounding, not bit-identical to the default cache (another summation order);
tests/python/test_hf.py bounds the difference in the logits. The model's own attention
implementation still runs every prefill.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from .attention import AttentionModule
    from .cache import TieredCache
    from .forward import Forward
    from .rows import Row


class HostStep:
    """One host-attention decode forward: per open row its live T0 slots, the positions of its
    rows (T0 slots, then host rows ascending) and their score sums."""

    def __init__(self, cache: TieredCache, f: Forward, q_heads: int, head_dim: int) -> None:
        batch = len(cache.rows)
        self.cache, self.f, self.q_heads, self.layers = cache, f, q_heads, 0
        self.q = np.zeros((batch, q_heads, head_dim), dtype=np.float32)  # scaled by the softmax scale
        self.q_t = torch.from_numpy(self.q)
        self.lse = np.zeros((batch, q_heads), dtype=np.float32)
        self.rows: list[tuple[int, Row, np.ndarray, np.ndarray, np.ndarray]] = []
        for r in f.rows:  # the forward's T0 lists (_begin), less hidden prompt positions
            row = r.row
            live = ~np.isin(r.t0_keys - row.pad, row.hidden)
            keys = np.concatenate([r.t0_keys[live], row.pad + r.host])
            self.rows.append((r.b, row, r.t0_slots[live].astype(np.uint32), keys,
                              np.zeros(len(keys), dtype=np.float32)))

    def attend(self, layer: int, query: torch.Tensor, scaling: float) -> torch.Tensor:
        """[batch, 1, q_heads, head_dim] in query's dtype (zeros for a closed row)."""
        b, hq, _, d = query.shape
        torch.mul(query[:, :, 0], scaling, out=self.q_t)
        out = np.zeros((b, hq, d), dtype=np.float32)
        for i, row, slots, _, scores in self.rows:
            row.attend(layer, self.q[i], slots, out[i], self.lse[i], scores)
        self.layers += 1
        if self.layers == self.cache.num_layers:
            self._score()
        return torch.from_numpy(out).to(query.dtype)[:, None]

    def _score(self) -> None:
        """The forward's probabilities (summed over layers and query heads) as the per-layer mean
        over query heads that on_scores sums, put at the rows' positions."""
        scores = self.f.scores
        for b, _, _, keys, sums in self.rows:
            scores[b, torch.from_numpy(keys)] = torch.from_numpy(sums) / self.q_heads
        self.cache.scored_forward()


def split_attention(cache: TieredCache, module: AttentionModule, query: torch.Tensor,
                    scaling: float) -> tuple[torch.Tensor, None]:
    """The kvtier attention function's body for a host-attention forward (the keys and values
    transformers passes are the layer's T0 storage, which libkvtier reads through the sequence's
    attached cache). Returns (output [batch, 1, q_heads, head_dim], None)."""
    step = cache.host_step(query.shape[1], query.shape[3])
    return step.attend(module.layer_idx, query, scaling), None
