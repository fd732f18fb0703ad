"""kvtier.copy_rows: libkvtier's row-copy kernel (kernels/include/kvtier/kernels/gather.hpp)
over CPU torch tensors, for engine integrations that place KV rows by index.

On the CPU kvtier.hf writes new tokens into its T0 store and the T0 rows into each layer's
position-ordered keys and values with it (the host rows come straight from the pool,
``Client.stage_at``): ``index_select`` + ``index_copy_`` copied every T0 row twice, each index op
several times slower per row than a memcpy; copy_rows copies each row once, runs of consecutive
rows as one memcpy per head. CUDA tensors keep torch's index ops (one kernel each, on the engine's
stream). Needs torch only for the tensors it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

# Private (copy_rows checks the tensors and calls it), so nanobind's stubgen leaves it out of _kvtier.pyi.
from ._kvtier import _copy_rows  # type: ignore[attr-defined]

if TYPE_CHECKING:  # kvtier itself does not need torch
    import torch


def copy_rows(dsts: Sequence[torch.Tensor], srcs: Sequence[torch.Tensor], from_rows: np.ndarray,
              to_rows: np.ndarray) -> None:
    """``dst[:, to_rows[i]] = src[:, from_rows[i]]`` for every i and every pair (dst, src) of
    `dsts` and `srcs` (a layer's K and V). The tensors are CPU tensors ``[heads, rows, head_dim]``
    of one dtype, every dst of one shape, every src likewise, with unit stride in head_dim and no
    negative stride; the index arrays int64 (copied to contiguous when they are not). ValueError
    for tensors that do not fit, kvtier.InvalidArgumentError (nothing copied) for an index out of
    range."""
    if len(dsts) != len(srcs) or not dsts:
        raise ValueError(f"copy_rows: {len(srcs)} sources for {len(dsts)} destinations")
    dst, src = dsts[0], srcs[0]
    views = []
    for group, first in ((dsts, dst), (srcs, src)):
        shape = first.shape
        for t in group:
            if t.device.type != "cpu" or t.dtype != dst.dtype or t.dim() != 3:
                raise ValueError(f"copy_rows: CPU tensors [heads, rows, head_dim] of one dtype, got "
                                 f"{t.device.type} {t.dtype} {tuple(t.shape)} beside {dst.dtype}")
            heads, token, unit = t.stride()
            if unit != 1 or heads < 0 or token < 0:
                raise ValueError("copy_rows: head_dim must be contiguous and strides non-negative")
            if t.shape != shape:
                raise ValueError("copy_rows: the destinations (and the sources) must share one shape")
            views.append((t.data_ptr(), token * t.element_size(), heads * t.element_size()))
    if dst.shape[0] != src.shape[0] or dst.shape[2] != src.shape[2]:
        raise ValueError(f"copy_rows: heads and head_dim differ: {tuple(src.shape)} -> {tuple(dst.shape)}")
    _copy_rows(views[: len(dsts)], dst.shape[1], views[len(dsts):], src.shape[1], dst.shape[0],
               dst.shape[2] * dst.element_size(), np.ascontiguousarray(from_rows, dtype=np.int64),
               np.ascontiguousarray(to_rows, dtype=np.int64))
