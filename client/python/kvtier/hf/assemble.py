"""Row copies for a layer's assembly on the CPU: libkvtier's copy_rows kernel over torch tensors.

``TieredCache`` returns each layer's keys and values in position order, written from the T0
store and the staged host rows. On the CPU, ``index_select`` + ``index_copy_`` copied every T0 row
twice and each index op was several times slower per row than a memcpy; :func:`copy_rows` copies
each row once, with runs of consecutive rows as one memcpy. CUDA tensors keep torch's index ops
(one kernel each, on the engine's stream).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .._kvtier import _copy_rows


def copy_rows(dsts: Sequence[torch.Tensor], srcs: Sequence[torch.Tensor], from_rows: np.ndarray,
              to_rows: np.ndarray) -> None:
    """``dst[:, to_rows[i]] = src[:, from_rows[i]]`` for every i and every pair (dst, src) of
    `dsts` and `srcs` (a layer's K and V). The tensors are CPU tensors ``[heads, rows, head_dim]``
    of one dtype, every dst of one shape, every src likewise, with unit stride in head_dim and no
    negative stride; the index arrays int64 (copied to contiguous when they are not). ValueError
    for tensors that do not fit, kvtier.InvalidArgumentError (nothing copied) for an index out of
    range."""
    dst, src = dsts[0], srcs[0]
    if len(dsts) != len(srcs):
        raise ValueError(f"copy_rows: {len(srcs)} sources for {len(dsts)} destinations")
    for t in (*dsts, *srcs):
        if t.device.type != "cpu" or t.dtype != dst.dtype or t.dim() != 3:
            raise ValueError(f"copy_rows: CPU tensors [heads, rows, head_dim] of one dtype, got {t.device.type} "
                             f"{t.dtype} {tuple(t.shape)} beside {dst.dtype}")
        if t.stride(2) != 1 or min(t.stride()) < 0:
            raise ValueError("copy_rows: head_dim must be contiguous and strides non-negative")
    if any(t.shape != dst.shape for t in dsts) or any(t.shape != src.shape for t in srcs):
        raise ValueError("copy_rows: the destinations (and the sources) must share one shape")
    if dst.shape[0] != src.shape[0] or dst.shape[2] != src.shape[2]:
        raise ValueError(f"copy_rows: heads and head_dim differ: {tuple(src.shape)} -> {tuple(dst.shape)}")
    es = dst.element_size()
    _copy_rows([(t.data_ptr(), t.stride(1) * es, t.stride(0) * es) for t in dsts], dst.shape[1],
               [(t.data_ptr(), t.stride(1) * es, t.stride(0) * es) for t in srcs], src.shape[1],
               dst.shape[0], dst.shape[2] * es, np.ascontiguousarray(from_rows, dtype=np.int64),
               np.ascontiguousarray(to_rows, dtype=np.int64))
