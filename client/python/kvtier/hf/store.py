"""The T0 storage of a TieredCache: one K and one V tensor per layer, ``[batch, kv_heads, slots,
head_dim]`` on the model's device, holding only the tokens kvtierd keeps in T0.

The tensors start at one block of slots and grow by whole blocks when the T0 tokens of some row
need more (:meth:`T0Store.grow`: new tensors, the old rows copied to the same slots, one layer at
a time so a growth briefly holds one extra layer, never a second copy of the cache). Every row of
the batch is its own kvtier sequence attached to its slice of the tensors; after a growth each is
attached again (kvtier_sequence_attach_cache moves a sequence, keeping its host rows).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .._kvtier import Backend, Client, DType

DTYPES: dict[torch.dtype, DType] = {torch.float32: DType.F32, torch.float16: DType.F16, torch.bfloat16: DType.BF16}


def storage_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes allocated for the storages of `tensors` (each storage counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is not None and t.numel() > 0:
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


class T0Store:
    def __init__(self, *, layers: int, batch: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device, block_tokens: int) -> None:
        self.layers, self.batch, self.kv_heads, self.head_dim = layers, batch, kv_heads, head_dim
        self.dtype, self.device, self.block_tokens = dtype, device, block_tokens
        self.element_size = torch.empty(0, dtype=dtype).element_size()
        self.row_bytes = 2 * layers * kv_heads * head_dim * self.element_size  # one token's K and V
        self.slots = 0
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self.growths = 0

    @property
    def backend(self) -> Backend:
        return Backend.CUDA if self.device.type == "cuda" else Backend.CPU

    def nbytes(self) -> int:
        return storage_bytes(self.k + self.v)

    def grow(self, slots: int) -> bool:
        """Makes room for at least `slots` rows per batch row (rounded up to whole blocks). True
        when the tensors were replaced (the sequences must be attached again)."""
        if slots <= self.slots:
            return False
        new = -(-slots // self.block_tokens) * self.block_tokens
        shape = (self.batch, self.kv_heads, new, self.head_dim)
        for tensors in (self.k, self.v):
            for layer in range(self.layers):
                grown = torch.zeros(shape, dtype=self.dtype, device=self.device)
                if layer < len(tensors):
                    grown[:, :, : self.slots].copy_(tensors[layer])
                    tensors[layer] = grown
                else:
                    tensors.append(grown)
        self.slots = new
        self.growths += 1
        return True

    def attach(self, client: Client, sequence: int, row: int) -> None:
        """Binds `sequence` to batch row `row` of the tensors (again after a growth)."""
        es = self.element_size
        head = self.slots * self.head_dim * es
        row_bytes = self.kv_heads * head
        client.attach_cache(
            sequence, k_base=[t.data_ptr() + row * row_bytes for t in self.k],
            v_base=[t.data_ptr() + row * row_bytes for t in self.v], num_kv_heads=self.kv_heads,
            head_dim=self.head_dim, dtype=DTYPES[self.dtype], num_slots=self.slots, block_size=self.slots,
            token_stride=self.head_dim * es, head_stride=head, block_stride=row_bytes, backend=self.backend)
