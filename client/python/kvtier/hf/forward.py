"""One forward of a TieredCache: what layer 0 fixes for every layer (``TieredCache._begin``: each
open row's new tokens and where its keys go) and what the layers add up (scores, the largest
assembled K/V). Positions and slots are NumPy arrays; on CUDA each row also has them as tensors on
the model's device for torch's index ops (the CPU copies with kvtier.copy_rows)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from .rows import Row
    from .split import HostStep


@dataclass
class DeviceIndex:
    """A row's indices on the model's (CUDA) device."""

    new_slots: torch.Tensor
    t0_keys: torch.Tensor
    t0_slots: torch.Tensor
    host_keys: torch.Tensor  # the key index of each host row (pad + position)


@dataclass
class RowForward:
    """One open row of the forward."""

    b: int  # the batch row
    row: Row
    cols: slice  # the forward's columns that hold this row's new tokens
    new_slots: np.ndarray  # int64: the T0 slot of each new token
    new_rows: np.ndarray  # int64: each new token's index within cols
    t0_keys: np.ndarray  # int64: the key index of each T0 position (pad + position)
    t0_slots: np.ndarray  # int64: the slot of each T0 position
    host: np.ndarray  # the positions staged from the pool (T1 and T2), ascending
    first_new: int  # the position of the first new token
    device: DeviceIndex | None = None  # CUDA


@dataclass
class Forward:
    prefill: bool
    q: int  # tokens per row of the forward's input
    length: int  # keys after it (the batch's index space, padding included)
    host: bool  # libkvtier attends this decode step (host_attention; kvtier.hf.split)
    rows: list[RowForward]
    dead: torch.Tensor | None  # [batch, length] bool, True = not live; None when every key is live
    covered: bool  # every key of the assembled K/V is written: no zeroing
    scores: torch.Tensor  # [batch, length] float32: probabilities summed over the layers scored
    layers_scored: int = 0
    transient: int = 0  # bytes of the largest assembled K/V of a layer
    host_step: HostStep | None = None  # host attention's pass (made by the first layer)
    key_mask: torch.Tensor | None = None  # TieredCache.key_mask, built once per forward
    key_mask_built: bool = False
