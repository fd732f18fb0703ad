"""One batch row of a TieredCache: its kvtier sequence, where its tokens are, its plans.

A row's positions are its own (0 = its first prompt token after left padding); in the batch's
key index space position p of row b is key ``pad + p``. Plans execute here (the copies are
libkvtier's) and host rows are staged per layer: on CUDA with double buffering (layer l + 1's
staging is issued on libkvtier's copy stream before layer l's is waited for, so it overlaps layer
l's compute) into two buffers the cache then copies from; on the CPU, which copies at once,
straight to their positions in the layer's assembled keys and values (``Client.stage_at``: one
copy per row, no buffer), or with host attention not at all (``Client.attend``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .._errors import KvtierError
from .._kvtier import Plan, StagingOrder
from .._slots import T0, T1, T2, T3, SlotMap
from .clients import PlanRouter


@dataclass
class RowCounts:
    plans_applied: int = 0
    plans_failed: int = 0
    rows_offloaded: int = 0  # T0 -> T1/T2
    rows_restored: int = 0  # T1/T2 -> T0
    rows_evicted: int = 0  # -> T3
    bytes_moved: int = 0  # plan copies and staging, host <-> engine, all layers


@dataclass
class Row:
    router: PlanRouter
    sequence: int | None
    pad: int
    slots: SlotMap
    hidden: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # masked prompt positions
    counts: RowCounts = field(default_factory=RowCounts)
    step: int = 0  # next decode step
    _buffers: list[torch.Tensor] = field(default_factory=list)  # CUDA
    _staged: int = 0  # rows a stage returns this forward

    @property
    def open(self) -> bool:
        return self.sequence is not None

    @property
    def live_sequence(self) -> int:
        """The sequence of an open row."""
        assert self.sequence is not None, "the row's sequence is closed"
        return self.sequence

    def close(self) -> None:
        if self.sequence is not None and not self.router.client.closed:
            self.router.close_sequence(self.sequence)
        self.sequence = None
        self.slots.close()
        self._buffers.clear()

    # ---- plans -----------------------------------------------------------------------------

    def apply(self, plan: Plan, row_bytes: int) -> None:
        """Executes and acknowledges one plan of this row (the tensors have room for its
        restores: a restore takes a slot before the plan's offloads free theirs). A plan whose
        copies fail is acknowledged as not applied (kvtierd keeps the old placement) and the error
        raised."""
        client = self.router.client
        hbm = self.slots.hbm_slots(plan)
        try:
            client.execute_plan(plan, hbm)
        except KvtierError:
            self.slots.release_reserved(plan, hbm)
            client.ack_plan(plan.epoch, applied=False)
            self.counts.plans_failed += 1
            raise
        self.slots.commit(plan, hbm)
        client.ack_plan(plan.epoch, applied=True)
        c, f, t = self.counts, plan.from_tiers, plan.to_tiers
        c.plans_applied += 1
        offloaded = int(np.count_nonzero((f == T0) & (t != T3)))
        restored = int(np.count_nonzero((f != T0) & (t == T0)))
        c.rows_offloaded += offloaded
        c.rows_restored += restored
        c.rows_evicted += int(np.count_nonzero(t == T3))
        c.bytes_moved += (offloaded + restored) * row_bytes

    # ---- staging ---------------------------------------------------------------------------

    def host_positions(self) -> np.ndarray:
        """Positions staged from the pool (T1 and T2), ascending."""
        tiers = self.slots.tier[: self.slots.length]
        return np.flatnonzero((tiers == T1) | (tiers == T2))

    def begin_staging(self, expected: int, dtype: torch.dtype, device: torch.device) -> None:
        """Checks the host rows libkvtier will stage this forward; on CUDA sizes the two staging
        buffers and issues layer 0's staging."""
        client = self.router.client
        rows, nbytes = client.t1_rows(self.live_sequence) if expected else (0, 0)
        if rows != expected:
            raise RuntimeError(f"libkvtier stages {rows} rows, the cache expects {expected}")
        self._staged = rows
        if rows == 0 or device.type == "cpu":
            return
        es = torch.empty(0, dtype=dtype).element_size()
        if not self._buffers or self._buffers[0].numel() * es < nbytes:
            self._buffers = [torch.empty(nbytes // es, dtype=dtype, device=device) for _ in range(2)]
        # The binding takes any DLPack tensor; its stub (_kvtier.pyi) says NumPy only.
        client.stage_prefetch(self.live_sequence, 0, self._buffers[0],  # type: ignore[arg-type]
                              StagingOrder.POSITION_ORDER)

    def stage_at(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> int:
        """CPU: layer `layer`'s host rows straight into this row's assembled keys and values
        ([kv_heads, length, head_dim], contiguous; position p at key pad + p). Returns the bytes
        copied."""
        if self._staged == 0:
            return 0
        es = keys.element_size()
        self.router.client.stage_at(self.live_sequence, layer, k=keys.data_ptr(), v=values.data_ptr(),
                                    rows=keys.shape[1], token_stride=keys.stride(1) * es,
                                    head_stride=keys.stride(0) * es, row_offset=self.pad)
        return 2 * self._staged * keys.shape[0] * keys.shape[2] * es

    def attend(self, layer: int, q: np.ndarray, t0_slots: np.ndarray, out: np.ndarray, lse: np.ndarray,
               scores: np.ndarray) -> None:
        """CPU host attention (kvtier.hf.split): query q [q_heads, head_dim] (already scaled) over
        layer `layer`'s T0 slots `t0_slots` and host rows where they live (Client.attend) into out
        and lse, adding each row's probabilities to scores. Counts the query, the result and the
        scores as moved (what would cross a link to a device)."""
        self.router.client.attend(self.live_sequence, layer, q=q, scale=1.0, out=out, lse=lse, t0_slots=t0_slots,
                                  scores=scores)
        self.counts.bytes_moved += q.nbytes + out.nbytes + lse.nbytes + scores.nbytes

    def staged(self, layer: int, layers: int, shape: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor,
                                                                            np.ndarray] | None:
        """CUDA: layer `layer`'s staged K and V, each [kv_heads, rows, head_dim], with their
        positions (valid until the next call); layer + 1's staging is issued first."""
        if self._staged == 0:
            return None
        client = self.router.client
        if layer + 1 < layers:
            following = self._buffers[(layer + 1) % 2]
            client.stage_prefetch(self.live_sequence, layer + 1, following,  # type: ignore[arg-type]  # a tensor
                                  StagingOrder.POSITION_ORDER)
        got = client.stage_wait(self.live_sequence, layer)
        buffer = self._buffers[layer % 2]
        es, n = buffer.element_size(), got.rows * shape[0] * shape[1]
        k = buffer[got.k_offset // es: got.k_offset // es + n].view(got.rows, *shape).transpose(0, 1)
        v = buffer[got.v_offset // es: got.v_offset // es + n].view(got.rows, *shape).transpose(0, 1)
        return k, v, got.positions

    def staging_bytes(self) -> int:
        return sum(b.untyped_storage().nbytes() for b in self._buffers)
