"""vLLM's CPU attention (CPU_ATTN) with kvtier's part: host rows staged into reserved blocks and
the layer's block table pointing at them, evicted blocks left out (or, with host attention,
kvtier's decode rows attended by libkvtier where their keys live, host_attention.py), and each
key block's score (the attention probability its tokens received, averaged over query heads and
layers, summed over the step's queries) pushed to kvtierd after the last layer. Without kvtier
(no connector, no daemon) it is vLLM's backend unchanged."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Protocol, cast

import torch
from vllm import _custom_ops as ops
from vllm import envs
from vllm.v1.attention.backend import AttentionType
from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend, CPUAttentionBackendImpl

import kvtier

from . import state
from .worker_side import BlockScores

if TYPE_CHECKING:
    from vllm.v1.attention.backend import AttentionLayer
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionMetadata

    from .worker_side import ForwardState, WorkerSide

    class CPULayer(AttentionLayer, Protocol):
        """The layer vLLM's CPU attention gets (an Attention module) as kvtier reads it: its name,
        and the ISA CPUAttentionMetadataBuilder sets on it."""

        layer_name: str
        isa: str


class KvtierCPUAttentionBackend(CPUAttentionBackend):
    @staticmethod
    def get_impl_cls() -> type[KvtierCPUAttentionImpl]:
        return KvtierCPUAttentionImpl


class KvtierCPUAttentionImpl(CPUAttentionBackendImpl):
    def forward(self, layer: AttentionLayer, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                kv_cache: torch.Tensor, attn_metadata: CPUAttentionMetadata | None, output: torch.Tensor,
                output_scale: torch.Tensor | None = None,
                output_block_scale: torch.Tensor | None = None) -> torch.Tensor:
        worker = state.worker()
        if worker is None or worker.client is None or attn_metadata is None or self.attn_type != AttentionType.DECODER:
            return super().forward(layer, query, key, value, kv_cache, attn_metadata, output, output_scale,
                                   output_block_scale)
        if self.sliding_window != -1 or self.alibi_slopes is not None or self.sinks is not None or self.logits_soft_cap:
            raise RuntimeError("kvtier: sliding window, ALiBi, attention sinks and soft caps are not supported")
        cpu_layer = cast("CPULayer", layer)
        index = worker.layer_index[cpu_layer.layer_name]
        fs = worker.forward_state(attn_metadata)
        table: torch.Tensor | None
        if fs.attending:
            if fs.others:
                md = dataclasses.replace(
                    attn_metadata, seq_lens=fs.seq_lens,
                    scheduler_metadata=self._scheduler_metadata(fs, attn_metadata, cpu_layer, query))
                super().forward(layer, query, key, value, kv_cache, md, output)
            fs.attend(index, query, output, self.scale)
            table = attn_metadata.block_table + index * worker.num_blocks if fs.block_scored else None
            seq_lens = fs.seq_lens
        elif not fs.tiered:
            super().forward(layer, query, key, value, kv_cache, attn_metadata, output)
            table, seq_lens = attn_metadata.block_table + index * worker.num_blocks, attn_metadata.seq_lens
        else:
            fs.stage(index)
            table, seq_lens = fs.block_table(index), fs.seq_lens
            md = dataclasses.replace(attn_metadata, block_table=table, seq_lens=seq_lens,
                                     scheduler_metadata=self._scheduler_metadata(fs, attn_metadata, cpu_layer, query))
            whole = worker.cache.view(-1, worker.heads, worker.block_size, 2 * worker.head_size)
            super().forward(layer, query, key, value, whole, md, output)
        self._score(worker, fs, query, table, seq_lens, attn_metadata.query_start_loc)
        return output

    def _scheduler_metadata(self, fs: ForwardState, md: CPUAttentionMetadata, layer: CPULayer,
                            query: torch.Tensor) -> torch.Tensor | None:
        if not fs.compacted:
            return md.scheduler_metadata
        if fs.scheduler_metadata is None:  # the same for every layer of the forward
            fs.scheduler_metadata = ops.cpu_attn_get_scheduler_metadata(
                num_reqs=fs.seq_lens.shape[0], num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
                head_dim=self.head_size, seq_lens=fs.seq_lens, dtype=query.dtype, query_start_loc=md.query_start_loc,
                causal=md.causal, sliding_window_size=-1, isa=layer.isa, enable_kv_split=envs.VLLM_CPU_ATTN_SPLIT_KV,
                dynamic_causal=md.dynamic_causal, kv_cache_dtype=self.kv_cache_dtype)
        return fs.scheduler_metadata

    def _score(self, worker: WorkerSide, fs: ForwardState, query: torch.Tensor, table: torch.Tensor | None,
               seq_lens: torch.Tensor, query_start_loc: torch.Tensor) -> None:
        """This layer's block scores of every row over the keys it attended (kvtier.block_scores:
        vLLM's paged keys in place, one call for the batch), summed over the forward's layers;
        after the last layer each row's sums go to its units and on to kvtierd (host attention's rows
        are scored by their own pass)."""
        if fs.block_scored:
            assert table is not None, "the rows vLLM's kernel computed have a block table"
            rows = len(fs.rows)
            s = fs.block_scores
            if s is None:  # the table's width, the lengths and the queries are the same in every layer
                s = fs.block_scores = BlockScores(
                    layer=torch.empty(rows, table.shape[1], dtype=torch.float32),
                    sums=torch.zeros(rows, table.shape[1], dtype=torch.float32),
                    units=(seq_lens[:rows] // worker.block_size).tolist(),
                    lens=seq_lens[:rows].to(torch.int32).contiguous(),
                    starts=query_start_loc[: rows + 1].to(torch.int32).contiguous())
            q = query.view(query.shape[0], -1, self.head_size).float().contiguous()
            block_table = table[:rows].to(torch.int32).contiguous()
            # Tensors, which the binding takes (DLPack); its stub (_kvtier.pyi) says NumPy only.
            kvtier.block_scores(q, worker.keys, block_table, s.lens, s.starts, self.scale, s.layer)  # type: ignore[arg-type]
            s.sums += s.layer
        fs.layers_done += 1
        if fs.layers_done < worker.num_layers:
            return
        if fs.block_scores is not None:  # block_scored
            s = fs.block_scores
            for i, r in enumerate(fs.rows):
                if r is not None and s.units[i]:
                    visible = fs.visible[i] if fs.tiered else None
                    fs.add_scores(i, s.sums[i, : s.units[i]], visible)
        fs.push(self.num_heads)
