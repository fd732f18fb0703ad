"""kvtier for Hugging Face transformers: :class:`TieredCache`, a ``Cache`` backed by kvtierd.

Written against transformers 5.24 (the cache-layer API of 5.x) and torch 2.15, tested on Llama
and Qwen2-family decoders (tests/python/test_hf*.py)::

    model = AutoModelForCausalLM.from_pretrained(..., device_map="cuda")   # any attention implementation
    with TieredCache(model, max_length=8192, hbm_ratio=0.3) as cache:       # the daemon's default socket
        out = model.generate(**batch, past_key_values=cache, max_new_tokens=4096)

What the model's device holds. T0 only: per layer one K and one V tensor ``[batch, kv_heads,
slots, head_dim]`` (kvtier.hf.store) that grows in blocks of ``block_tokens`` as the T0 tokens of
the fullest row need more slots; a token kvtierd moves to T1/T2 frees its slot for a new token,
an evicted one (T3) holds nothing. Per forward, one layer at a time, the cache assembles that
layer's keys and values for attention (``[batch, kv_heads, length, head_dim]``: T0 rows copied,
T1/T2 rows staged from the daemon's pools, evicted and padding positions zero and masked). On the
CPU every row is copied once: T0 rows by kvtier.copy_rows, host rows by libkvtier straight from the
pool to their positions (``Client.stage_at``). On CUDA two staging buffers per row hold its host
rows for layers l and l + 1, and torch's index ops place both. :class:`TieredCacheStats`
reports these as allocated storage bytes. With ``host_attention=True`` (CPU only) nothing is
assembled: libkvtier computes each decode step's attention over the T0 tensors and the pool rows
where they are (kvtier.hf.split), exact up to float32 rounding instead of bit-identical.

Exactness. Keys keep their absolute positions (RoPE is applied before caching), the assembled
keys are in position order and ``get_mask_sizes`` is ``DynamicCache``'s, so with nothing evicted
the attention implementation receives exactly what it receives over ``DynamicCache``: outputs are
bit-identical (T2, int8, is lossy by design and off by default).

Attention and scores. The cache switches the model to ``kvtier_<implementation>`` for its
lifetime (kvtier.hf.attention): the model's own eager, SDPA or flash attention, plus the masking
of evicted keys and the per-token scores kvtierd ranks by. vase gets each token's value range and
r_kv its key digest (a middle layer's head-mean key) as features.

Batches. Each row is its own kvtier sequence (left padding: the padding is not part of it); a
row whose next input is an end-of-sequence token (``eos_token_id``, default the model's
generation config; ``[]`` when generate() is told to run past it) closes its sequence at once.

Devices. CPU tensors use libkvtier's CPU executor, CUDA tensors its CUDA executor (the wheel
builds it where nvcc is found): the engine's current stream is bound to each sequence and layer
l + 1's host rows are staged while layer l computes.

Clients. By default every TieredCache of a model shares one kvtier client per socket: one
connection, one registered pool (``pool_tokens`` rows, default ``max_length``: a batch needs
about ``batch × (1 − hbm_ratio) × length`` of them, and when the pool is full the daemon keeps
tokens in T0 rather than failing), reused by the next cache; closing a cache closes its
sequences, :func:`release_model` (or the model's deletion) the client. Plans are routed by
sequence, so several caches may be open at once. Pass ``client=`` to use your own.

Parameters of :class:`TieredCache`: ``max_length`` (most positions per row), ``hbm_ratio``,
``evict_ratio``, ``sink_tokens``, ``window_tokens``, ``interval``, ``mode``, ``hysteresis``,
``policy`` and, by keyword, every other tier parameter of ``Client.open_sequence`` (``seed``,
``int8_ratio``, ``int8_tokens``, ``protect_prompt``, ``recent_window``, ``value_protect_ratio``,
``value_protect_tokens``, ``rkv_lambda``, ``key_digest_dim``, ``hbm_tokens``, ``evict_tokens``,
``decay``); ``int8_pool_tokens`` sizes the model's int8 pool (T2); ``host_attention`` (above).
``plan_wait_ms`` > 0 syncs with kvtierd after a step that ends a decision interval, so a plan
takes effect at the same step on every run (tests); 0 (default) applies plans whenever they
arrive.

Limits: no beam search, no ``crop`` (assisted decoding), one ``generate`` per cache, left
padding only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .cache import TieredCache, TieredCacheStats
from .clients import release_model
from .store import storage_bytes

if TYPE_CHECKING:
    import torch

__all__ = ["TieredCache", "TieredCacheStats", "cache_bytes", "release_model"]


def cache_bytes(cache: object) -> int:
    """Allocated bytes of a transformers cache's K/V tensors (storage sizes; a TieredCache: its
    T0 tensors and staging buffers). For comparing caches by what they really hold."""
    if isinstance(cache, TieredCache):
        return cache.stats.kv_bytes
    tensors: list[torch.Tensor | None] = []
    for layer in getattr(cache, "layers", []):
        tensors += [getattr(layer, "keys", None), getattr(layer, "values", None)]
    return storage_bytes(tensors)
