"""TieredLayer: one model layer's view of a TieredCache (transformers' per-layer cache object)."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, cast

import torch
from transformers.cache_utils import CacheLayerMixin

if TYPE_CHECKING:
    from .cache import TieredCache


class TieredLayer(CacheLayerMixin):
    is_sliding = False

    def __init__(self, cache: TieredCache, layer_idx: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # transformers leaves it untyped
        self._cache = cast("TieredCache", weakref.proxy(cache))  # the proxy stands for the cache
        self.layer_idx = layer_idx
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        pass

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self._cache._update(self.layer_idx, key_states, value_states)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self._cache.get_mask_sizes(query_length)

    def get_seq_length(self) -> int:
        return self._cache.get_seq_length()

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        raise NotImplementedError("a TieredCache serves one generation: close it and create a new one")

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise NotImplementedError("TieredCache does not support beam search")

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove != 0:
            raise NotImplementedError("TieredCache cannot crop (assisted decoding is not supported)")

    def offload(self) -> None:  # kvtier moves the bytes
        pass

    def prefetch(self) -> None:
        pass
