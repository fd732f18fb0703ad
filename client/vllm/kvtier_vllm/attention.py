"""vLLM's CPU attention (CPU_ATTN) with kvtier's part: host rows staged into reserved blocks and
the layer's block table pointing at them, evicted blocks left out (or, with host attention,
kvtier's decode rows attended by libkvtier where their keys live, host_attention.py), and each
key block's score (the attention probability its tokens received, averaged over query heads and
layers, summed over the step's queries) pushed to kvtierd after the last layer. Without kvtier
(no connector, no daemon) it is vLLM's backend unchanged."""

from __future__ import annotations

import dataclasses

import torch

import kvtier
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
        if fs.attending:
            if fs.others:
                md = dataclasses.replace(attn_metadata, seq_lens=fs.seq_lens,
                                         scheduler_metadata=self._scheduler_metadata(fs, attn_metadata, layer, query))
                super().forward(layer, query, key, value, kv_cache, md, output)
            fs.attend(l, query, output, self.scale)
            table = attn_metadata.block_table + l * worker.num_blocks if fs.block_scored else None
            seq_lens = fs.seq_lens
        elif not fs.tiered:
            super().forward(layer, query, key, value, kv_cache, attn_metadata, output)
            table, seq_lens = attn_metadata.block_table + l * worker.num_blocks, attn_metadata.seq_lens
        else:
            fs.stage(l)
            table, seq_lens = fs.block_table(l), fs.seq_lens
            md = dataclasses.replace(attn_metadata, block_table=table, seq_lens=seq_lens,
                                     scheduler_metadata=self._scheduler_metadata(fs, attn_metadata, layer, query))
            whole = worker.cache.view(-1, worker.heads, worker.block_size, 2 * worker.head_size)
            super().forward(layer, query, key, value, whole, md, output)
        self._score(worker, fs, query, table, seq_lens, attn_metadata.query_start_loc)
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

    def _score(self, worker, fs, query, table, seq_lens, query_start_loc) -> None:
        """This layer's block scores of every row over the keys it attended (kvtier.block_scores:
        vLLM's paged keys in place, one call for the batch), summed over the forward's layers;
        after the last layer each row's sums go to its units and on to kvtierd (host attention's rows
        are scored by their own pass)."""
        if fs.block_scored:
            rows = len(fs.rows)
            if fs.layer_scores is None:  # the table's width, the lengths and the queries are the same in every layer
                fs.layer_scores = torch.empty(rows, table.shape[1], dtype=torch.float32)
                fs.score_sums = torch.zeros(rows, table.shape[1], dtype=torch.float32)
                fs.scored_units = (seq_lens[:rows] // worker.block_size).tolist()
                fs.score_lens = seq_lens[:rows].to(torch.int32).contiguous()
                fs.score_starts = query_start_loc[: rows + 1].to(torch.int32).contiguous()
            kvtier.block_scores(query.view(query.shape[0], -1, self.head_size).float().contiguous(), worker.keys,
                                table[:rows].to(torch.int32).contiguous(), fs.score_lens, fs.score_starts,
                                self.scale, fs.layer_scores)
            fs.score_sums += fs.layer_scores
        fs.layers_done += 1
        if fs.layers_done < worker.num_layers:
            return
        if fs.block_scored:
            for i, r in enumerate(fs.rows):
                if r is not None and fs.scored_units[i]:
                    visible = fs.visible[i] if fs.tiered else None
                    fs.add_scores(i, fs.score_sums[i, : fs.scored_units[i]], visible)
        fs.push(self.num_heads)
