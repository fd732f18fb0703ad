"""Host attention (``TieredCache(host_attention=True)``, CPU): a decode step's attention split
between the keys the model's tensors hold and the host rows where they live, merged by
log-sum-exp (DESIGN §6).

Per layer, for the one query token of each row:

* part A, over the T0 storage itself (``[batch, kv_heads, slots, head_dim]`` in slot order, free
  slots masked): keys carry their positions (RoPE is applied before caching) and a decode query
  attends every live key, so their order does not matter and nothing is assembled. kvtier
  computes it in float32 (grouped matmuls, a softmax, no repeat of the KV heads) rather than the
  model's implementation, because the scores need the same logits and their log-sum-exp.
* part B, ``Client.attend_host`` over each row's T1/T2 rows in the pool (libkvtier's
  PartialAttention): no row is copied; a query goes in, (out, lse, logits) come back.
* merge: ``lse = logaddexp(lse_A, lse_B)``, ``out = e^(lse_A − lse)·out_A + e^(lse_B − lse)·out_B``.

The scores are both parts' probabilities against the merged lse, summed over the layers by slot
and by host row and put at their positions once per forward. Exact up to float32 rounding, not
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
        self.cache, self.f, self.layers = cache, f, 0
        # numpy arrays for libkvtier (no DLPack export per call), torch views of the same memory.
        self.q = np.zeros((batch, q_heads, head_dim), dtype=np.float32)
        self.out = np.zeros((batch, q_heads, head_dim), dtype=np.float32)
        self.lse = np.full((batch, q_heads), -np.inf, dtype=np.float32)  # rows without host rows keep −inf
        live = torch.ones(batch, slots, dtype=torch.bool)  # a closed row attends finite junk, unused
        self.hosts: list[tuple[int, Any, np.ndarray, torch.Tensor]] = []
        for r in f["rows"]:
            b, row = r["b"], r["row"]
            live[b] = False
            t0 = np.setdiff1d(row.slots.positions_in(T0), row.hidden, assume_unique=True)
            live[b, torch.from_numpy(row.slots.slot_of[t0])] = True
            if len(r["host"]):
                self.hosts.append((b, row, np.empty((q_heads, len(r["host"])), dtype=np.float32),
                                   torch.zeros(len(r["host"]))))
        self.dead = ~live[:, None, None, :]
        self.slot_scores = torch.zeros(batch, slots)

    def attend(self, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               scaling: float) -> torch.Tensor:
        """[batch, 1, q_heads, head_dim] in query's dtype; key and value are the layer's T0 storage."""
        b, hq, _, d = query.shape
        hkv = key.shape[1]
        g = hq // hkv
        logits = torch.matmul(query.float().reshape(b, hkv, g, d), key.float().transpose(-1, -2)).mul_(scaling)
        logits.masked_fill_(self.dead, float("-inf"))
        top = logits.amax(dim=-1, keepdim=True)
        p = logits.sub_(top).exp_()  # [batch, kv_heads, group, slots]
        total = p.sum(dim=-1, keepdim=True)
        out_a = torch.matmul(p, value.float()).div_(total).view(b, hq, d)
        lse_a = (top + total.log()).view(b, hq)
        torch.from_numpy(self.q).copy_(query[:, :, 0])
        for i, row, logits_b, _ in self.hosts:
            row.attend_host(layer, self.q[i], scaling, self.out[i], self.lse[i], logits_b)
        lse_b, out_b = torch.from_numpy(self.lse), torch.from_numpy(self.out)
        lse = torch.logaddexp(lse_a, lse_b)
        w_a = (lse_a - lse).exp()
        merged = out_a.mul_(w_a[..., None]).add_(out_b * (lse_b - lse).exp()[..., None])
        self.slot_scores += p.mul_((w_a.view(b, hkv, g, 1) / total)).mean(dim=(1, 2))
        for i, _, logits_b, sums in self.hosts:
            sums += (torch.from_numpy(logits_b) - lse[i, :, None]).exp_().mean(dim=0)
        self.layers += 1
        if self.layers == self.cache.num_layers:
            self._score()
        return merged.to(query.dtype)[:, None]

    def _score(self) -> None:
        """The forward's per-layer probabilities summed, put at the rows' positions."""
        scores = self.f["scores"]
        host = {i: sums for i, _, _, sums in self.hosts}
        for r in self.f["rows"]:
            b = r["b"]
            scores[b, torch.from_numpy(r["t0_keys"])] = self.slot_scores[b, torch.from_numpy(r["t0_slots"])]
            if b in host:
                scores[b, torch.from_numpy(r["row"].pad + r["host"])] = host[b]
        self.cache.scored_forward()


def split_attention(cache: Any, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                    value: torch.Tensor, scaling: float):
    """The kvtier attention function's body for a host-attention forward: `key` and `value` are
    the layer's T0 storage. Returns (output [batch, 1, q_heads, head_dim], None)."""
    step = cache.host_step(query.shape[1], query.shape[3])
    return step.attend(module.layer_idx, query, key, value, scaling), None
