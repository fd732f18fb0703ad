"""vLLM's CPU attention (CPU_ATTN) with kvtier's part: host rows staged into reserved blocks and
the layer's block table pointing at them, evicted blocks left out, and each key block's score
(the attention probability its tokens received, averaged over query heads and layers, summed over
the step's queries) pushed to kvtierd after the last layer. Without kvtier (no connector, no
daemon) it is vLLM's backend unchanged."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from vllm import _custom_ops as ops
from vllm import envs
from vllm.v1.attention.backend import AttentionType
from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend, CPUAttentionBackendImpl

from . import state


class KvtierCPUAttentionBackend(CPUAttentionBackend):
    @staticmethod
    def get_impl_cls() -> type["KvtierCPUAttentionImpl"]:
        return KvtierCPUAttentionImpl


class KvtierCPUAttentionImpl(CPUAttentionBackendImpl):
    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None,
                output_block_scale=None):
        worker = state.worker()
        if worker is None or worker.client is None or attn_metadata is None or self.attn_type != AttentionType.DECODER:
            return super().forward(layer, query, key, value, kv_cache, attn_metadata, output, output_scale,
                                   output_block_scale)
        if self.sliding_window != -1 or self.alibi_slopes is not None or self.sinks is not None or self.logits_soft_cap:
            raise RuntimeError("kvtier: sliding window, ALiBi, attention sinks and soft caps are not supported")
        l = worker.layer_index[layer.layer_name]
        fs = worker.forward_state(attn_metadata)
        if not fs.tiered:
            super().forward(layer, query, key, value, kv_cache, attn_metadata, output)
            table, seq_lens = attn_metadata.block_table + l * worker.num_blocks, attn_metadata.seq_lens
        else:
            fs.stage(l)
            table, seq_lens = fs.block_table(l), fs.seq_lens
            md = dataclasses.replace(attn_metadata, block_table=table, seq_lens=seq_lens,
                                     scheduler_metadata=self._scheduler_metadata(fs, attn_metadata, layer, query))
            whole = worker.cache.view(-1, worker.heads, worker.block_size, 2 * worker.head_size)
            super().forward(layer, query, key, value, whole, md, output)
        self._score(worker, fs, l, query, table, seq_lens, attn_metadata.query_start_loc)
        return output

    def _scheduler_metadata(self, fs, md, layer, query):
        if not fs.compacted:
            return md.scheduler_metadata
        if getattr(fs, "scheduler_metadata", None) is None:  # the same for every layer of the forward
            fs.scheduler_metadata = ops.cpu_attn_get_scheduler_metadata(
                num_reqs=fs.seq_lens.shape[0], num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
                head_dim=self.head_size, seq_lens=fs.seq_lens, dtype=query.dtype, query_start_loc=md.query_start_loc,
                causal=md.causal, sliding_window_size=-1, isa=layer.isa, enable_kv_split=envs.VLLM_CPU_ATTN_SPLIT_KV,
                dynamic_causal=md.dynamic_causal, kv_cache_dtype=self.kv_cache_dtype)
        return fs.scheduler_metadata

    def _score(self, worker, fs, layer: int, query, table, seq_lens, query_start_loc) -> None:
        bs, h, g = worker.block_size, self.num_kv_heads, self.num_queries_per_kv
        for i, r in enumerate(fs.rows):
            if r is None:
                continue
            n = int(seq_lens[i])
            units = n // bs
            if units == 0:
                continue
            q0, q1 = int(query_start_loc[i]), int(query_start_loc[i + 1])
            blocks = table[i, :units].long()
            keys = worker.cache[blocks, :, :bs].permute(1, 0, 2, 3).reshape(h, units * bs, self.head_size)
            qs = query[q0:q1].float().view(q1 - q0, h, g, self.head_size).permute(1, 2, 0, 3).reshape(h, -1, self.head_size)
            logits = self.scale * torch.matmul(qs, keys.float().transpose(1, 2))  # [h, g * q, keys]
            nq = q1 - q0
            if nq > 1:  # a prefill chunk: query j sits at n - nq + j and sees keys up to it
                pos = torch.arange(n - nq, n).repeat(g)
                logits = logits.masked_fill(torch.arange(units * bs)[None, None, :] > pos[None, :, None],
                                            float("-inf"))
            # The keys past the last full block take part in the softmax but are not tiered.
            if n > units * bs:
                tail_keys = worker.cache[table[i, units].long(), :, : n - units * bs]
                tail = self.scale * torch.matmul(qs, tail_keys.float().transpose(1, 2))
                if nq > 1:
                    tail = tail.masked_fill(torch.arange(units * bs, n)[None, None, :] > pos[None, :, None],
                                            float("-inf"))
                logits = torch.cat([logits, tail], dim=-1)
            probs = torch.softmax(logits, dim=-1)[..., : units * bs]
            per_unit = probs.sum(dim=(0, 1)).view(units, bs).sum(-1) / (h * g)
            visible = fs.visible[i] if fs.tiered and fs.visible[i] is not None else None
            fs.add_scores(i, per_unit, visible)
        fs.layers_done += 1
        if fs.layers_done == worker.num_layers:
            fs.push()
