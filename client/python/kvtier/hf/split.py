"""Host attention (``TieredCache(host_attention=True)``, CPU): a decode step's attention split
between the keys the model's tensors hold and the host rows where they live, merged by
log-sum-exp (DESIGN §6).

Per layer, for the one query token of each row:

* part A, over the T0 storage itself (``[batch, kv_heads, slots, head_dim]`` in slot order, free
  slots masked): keys carry their positions (RoPE is applied before caching) and a decode query
  attends every live key, so their order does not matter and nothing is assembled. kvtier
  computes it in float32 (grouped matmuls, a softmax, no repeat of the KV heads) rather than the
  model's implementation, because the scores need the same probabilities and their log-sum-exp.
* part B, ``Client.attend_host`` over each row's T1/T2 rows in the pool (libkvtier's
  PartialAttention): no row is copied; a query goes in, (out, lse, probs) come back.
* merge: with ``w = e^(lse_A − lse) = sigmoid(lse_A − lse_B)``, part A's share,
  ``out = w·out_A + (1 − w)·out_B``.

The scores are both parts' probabilities scaled by their shares (``w``, ``1 − w``), summed over
the layers and query heads by slot and by host row, and put at their positions once per forward. Exact up to float32 rounding, not
bit-identical to the default cache (another summation order, two parts); tests/python/test_hf.py
bounds the difference in the logits.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._slots import T0


class HostStep:
    """One host-attention decode forward: its buffers, the live slots and the score sums."""

    def __init__(self, cache: Any, f: dict[str, Any], q_heads: int, head_dim: int) -> None:
        batch, slots = len(cache.rows), cache.store.slots
        self.cache, self.f, self.q_heads, self.layers = cache, f, q_heads, 0
        # numpy arrays for libkvtier (no DLPack export per call) and torch views of the same memory.
        self.q = np.zeros((batch, q_heads, head_dim), dtype=np.float32)  # scaled by the softmax scale
        self.out = np.zeros((batch, q_heads, head_dim), dtype=np.float32)
        self.lse = np.full((batch, q_heads), -np.inf, dtype=np.float32)  # rows without host rows keep −inf
        self.q_t, self.out_t, self.lse_t = (torch.from_numpy(a) for a in (self.q, self.out, self.lse))
        live = torch.ones(batch, slots, dtype=torch.bool)  # a closed row attends finite junk, unused
        # Per row with host rows: (batch row, Row, probs [q_heads, rows] in numpy and torch, score sums).
        self.hosts: list[tuple[int, Any, np.ndarray, torch.Tensor, torch.Tensor]] = []
        for r in f["rows"]:
            b, row = r["b"], r["row"]
            live[b] = False
            t0 = np.setdiff1d(row.slots.positions_in(T0), row.hidden, assume_unique=True)
            live[b, torch.from_numpy(row.slots.slot_of[t0])] = True
            if len(r["host"]):
                probs = np.empty((q_heads, len(r["host"])), dtype=np.float32)
                self.hosts.append((b, row, probs, torch.from_numpy(probs), torch.zeros(len(r["host"]))))
        self.dead = ~live[:, None, None, :]
        self.slot_scores = torch.zeros(batch, 1, slots)  # Σ over layers and query heads

    def attend(self, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               scaling: float) -> torch.Tensor:
        """[batch, 1, q_heads, head_dim] in query's dtype; key and value are the layer's T0 storage."""
        b, hq, _, d = query.shape
        hkv = key.shape[1]
        torch.mul(query[:, :, 0], scaling, out=self.q_t)
        logits = torch.matmul(self.q_t.view(b, hkv, hq // hkv, d), key.float().transpose(-1, -2))
        logits.masked_fill_(self.dead, float("-inf"))  # [batch, kv_heads, group, slots]
        lse_a = torch.logsumexp(logits, dim=-1).view(b, hq)
        p = torch.softmax(logits, dim=-1)
        out_a = torch.matmul(p, value.float()).view(b, hq, d)
        for i, row, probs, _, _ in self.hosts:
            row.attend_host(layer, self.q[i], self.out[i], self.lse[i], probs)
        w_a = torch.sigmoid(lse_a - self.lse_t)  # e^(lse_A − lse): part A's share, 1 without host rows
        merged = torch.lerp(self.out_t, out_a, w_a[..., None])
        self.slot_scores.baddbmm_(w_a[:, None], p.view(b, hq, -1))
        if self.hosts:
            w_b = 1.0 - w_a
            for i, _, _, probs, sums in self.hosts:
                sums.addmv_(probs.T, w_b[i])
        self.layers += 1
        if self.layers == self.cache.num_layers:
            self._score()
        return merged.to(query.dtype)[:, None]

    def _score(self) -> None:
        """The forward's probabilities (summed over layers and query heads) as the per-layer mean
        over query heads that on_scores sums, put at the rows' positions."""
        scores, hq = self.f["scores"], self.q_heads
        host = {i: sums for i, _, _, _, sums in self.hosts}
        for r in self.f["rows"]:
            b = r["b"]
            scores[b, torch.from_numpy(r["t0_keys"])] = self.slot_scores[b, 0, torch.from_numpy(r["t0_slots"])] / hq
            if b in host:
                scores[b, torch.from_numpy(r["row"].pad + r["host"])] = host[b] / hq
        self.cache.scored_forward()


def split_attention(cache: Any, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                    value: torch.Tensor, scaling: float):
    """The kvtier attention function's body for a host-attention forward: `key` and `value` are
    the layer's T0 storage. Returns (output [batch, 1, q_heads, head_dim], None)."""
    step = cache.host_step(query.shape[1], query.shape[3])
    return step.attend(module.layer_idx, query, key, value, scaling), None
