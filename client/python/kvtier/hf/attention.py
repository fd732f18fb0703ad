"""The kvtier attention function: the model's own attention implementation plus per-token scores.

While a model serves a TieredCache its attention implementation is ``kvtier_<inner>`` (e.g.
``kvtier_sdpa``), registered with transformers' ``AttentionInterface`` and, with the inner
implementation's mask function, with ``AttentionMaskInterface``. For a forward over a TieredCache
the function

1. masks the keys that are not live for a row (evicted T3 tokens, positions of a finished row)
   in the mask format of the inner implementation, and calls it unchanged otherwise: with nothing
   to mask the inner implementation gets exactly the arguments it gets over ``DynamicCache`` (the
   TieredCache returns the same keys and values in the same order), so outputs are bit-identical;
2. scores: the probability each key received, averaged over the query heads (every head of every
   GQA group) and summed over the query rows (column sums for a prefill, one row when decoding).
   Eager attention returns the probabilities; for SDPA and flash attention they are recomputed
   for the scored rows as ``softmax(scale·q·kᵀ + mask)`` in float32, one grouped matmul per layer
   (no repeat of the KV heads).

With ``host_attention`` (kvtier.hf.split) libkvtier computes a decode forward's attention itself,
over the T0 storage and the host rows where they live, in one softmax. For any other forward (no
TieredCache in use) it is the inner implementation.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Protocol

import torch
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

from .split import split_attention

if TYPE_CHECKING:
    from collections.abc import Callable

    from .cache import TieredCache

    # transformers' attention functions: (module, query, key, value, attention_mask, ..., scaling=,
    # ...) -> (output, attention probabilities or None).
    AttentionFunction = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]

PREFIX = "kvtier_"
_active: list[TieredCache] = []  # the TieredCache of the forward under way (set by the model's pre-hook)


class AttentionModule(Protocol):
    """What kvtier reads of the attention module of a transformers decoder layer."""

    layer_idx: int


def activate(cache: TieredCache) -> None:
    _active.append(cache)


def deactivate(cache: TieredCache) -> None:
    if _active and _active[-1] is cache:
        _active.pop()


def implementation_for(inner: str) -> str:
    """Registers (once) and returns the kvtier name wrapping attention implementation `inner`."""
    if inner.startswith(PREFIX):
        return inner
    name = PREFIX + inner
    if name not in ALL_ATTENTION_FUNCTIONS:
        if inner != "eager" and inner not in ALL_ATTENTION_FUNCTIONS:
            raise ValueError(f"attention implementation {inner!r} is not registered with transformers")
        AttentionInterface.register(name, functools.partial(_attention, inner=inner))
        mask = ALL_MASK_ATTENTION_FUNCTIONS[inner] if inner in ALL_MASK_ATTENTION_FUNCTIONS else None
        if mask is not None:
            AttentionMaskInterface.register(name, mask)
    return name


def _inner_function(module: AttentionModule, inner: str) -> AttentionFunction:
    if inner == "eager":
        # The model's own eager function (its modeling file's eager_attention_forward).
        eager: AttentionFunction = __import__(type(module).__module__,
                                             fromlist=["eager_attention_forward"]).eager_attention_forward
        return eager
    inner_function: AttentionFunction = ALL_ATTENTION_FUNCTIONS[inner]
    return inner_function


def _attention(module: AttentionModule, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None, *args: Any, inner: str,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    fn = _inner_function(module, inner)
    cache = _active[-1] if _active else None
    if cache is None or not cache.owns_forward():
        return fn(module, query, key, value, attention_mask, *args, **kwargs)
    scaling = kwargs.get("scaling")
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    if cache.attends_host():
        return split_attention(cache, module, query, scaling)
    dead = cache.dead_keys()  # [batch, keys] bool, True = not live; None when every key is live
    if dead is not None:
        attention_mask = _mask_dead(attention_mask, dead, query, inner)
    output, weights = fn(module, query, key, value, attention_mask, *args, **kwargs)
    if weights is None:
        weights = _probabilities(query, key, cache.key_mask(query.shape[2]), scaling)
    cache.on_scores(module.layer_idx, weights.detach().float().mean(dim=1))
    return output, weights if inner == "eager" else None


def _mask_dead(mask: torch.Tensor | None, dead: torch.Tensor, query: torch.Tensor, inner: str) -> torch.Tensor:
    """`mask` with the dead keys masked too, in the inner implementation's format."""
    q, keys = query.shape[2], dead.shape[1]
    if inner.startswith("flash"):  # a 2-D padding mask (1 = attend) or None
        live = (~dead).to(torch.int32)
        return live if mask is None else mask * live
    if mask is None:  # sdpa skipped the mask: no padding, causal within the query block
        causal = torch.ones(q, keys, dtype=torch.bool, device=dead.device).tril(keys - q)
        return causal[None, None] & ~dead[:, None, None, :]
    if mask.dtype == torch.bool:  # sdpa: True = attend
        return mask & ~dead[:, None, None, : mask.shape[-1]]
    # eager: additive, min of the dtype where masked
    return mask.masked_fill(dead[:, None, None, : mask.shape[-1]], torch.finfo(mask.dtype).min)


def _probabilities(query: torch.Tensor, key: torch.Tensor, keep: torch.Tensor | None, scaling: float) -> torch.Tensor:
    """softmax(scale·q·kᵀ) over the keys `keep` allows ([batch, q, keys] bool; None: all),
    float32, [batch, query_heads, q, keys]; a row with no key allowed is 0."""
    b, hq, q, d = query.shape
    hkv = key.shape[1]
    grouped = query.float().reshape(b, hkv, hq // hkv * q, d)
    logits = torch.matmul(grouped, key.float().transpose(-1, -2)).view(b, hq, q, -1) * scaling
    if keep is None:
        return torch.softmax(logits, dim=-1)
    logits = logits.masked_fill(~keep[:, None], float("-inf"))
    return torch.softmax(logits, dim=-1).nan_to_num_(0.0)
