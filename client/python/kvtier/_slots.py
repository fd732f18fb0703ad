"""Token bookkeeping of one tiered sequence on the engine side (used by kvtier.hf).

Knows, per absolute position, the token's tier and, for T0 tokens, the slot of the engine's KV
tensors that holds it; hands out free slots (lowest first, so the slots in use stay packed at the
start of the tensors); applies a plan's moves to that picture. The engine's tensors hold
``slots`` rows; :meth:`grow` adds rows when the T0 tokens need more (the engine grows its tensors
to match). Pure NumPy, no torch, so it is testable on its own.
"""

from __future__ import annotations

import numpy as np

from ._kvtier import NO_SLOT, Plan, Tier

T0, T1, T2, T3 = int(Tier.T0), int(Tier.T1), int(Tier.T2), int(Tier.T3)


class CapacityError(RuntimeError):
    """More tokens than the cache's max_length."""


class SlotMap:
    """Tiers of positions [0, length) (at most max_length) and the T0 slot of each T0 position."""

    def __init__(self, max_length: int, slots: int = 0) -> None:
        self.max_length = max_length
        self.length = 0
        self.tier = np.full(max_length, T3, dtype=np.uint8)  # positions >= length: unused
        self.slot_of = np.full(max_length, -1, dtype=np.int64)
        self.free = np.ones(slots, dtype=bool)

    @property
    def slots(self) -> int:
        return len(self.free)

    def count(self, tier: int) -> int:
        return int(np.count_nonzero(self.tier[: self.length] == tier))

    def positions_in(self, tier: int) -> np.ndarray:
        return np.flatnonzero(self.tier[: self.length] == tier)

    def slots_needed(self, n: int) -> int:
        """Slots the tensors need so that n more T0 tokens fit."""
        return self.slots - int(np.count_nonzero(self.free)) + n

    def grow(self, slots: int) -> None:
        """The engine's tensors now hold `slots` rows (more than before)."""
        assert slots >= self.slots
        self.free = np.concatenate([self.free, np.ones(slots - self.slots, dtype=bool)])

    def _take(self, n: int) -> np.ndarray:
        slots = np.flatnonzero(self.free)[:n]
        if len(slots) < n:
            raise CapacityError(f"the KV tensors hold {self.slots} slots; {n} more T0 tokens do not fit (grow first)")
        self.free[slots] = False
        return slots

    def append(self, n: int) -> np.ndarray:
        """Adds positions [length, length + n) to T0 and returns their slots."""
        if self.length + n > self.max_length:
            raise CapacityError(f"sequence of {self.length + n} tokens exceeds max_length={self.max_length}")
        positions = np.arange(self.length, self.length + n)
        slots = self._take(n)
        self.tier[positions] = T0
        self.slot_of[positions] = slots
        self.length += n
        return slots

    def hbm_slots(self, plan: Plan) -> np.ndarray:
        """The engine slot of each move where it touches T0 (kvtier_plan_execute's hbm_slots).
        Reserves slots for moves into T0; release_reserved() gives them back if the plan fails."""
        positions = plan.positions.astype(np.int64)
        from_tier, to_tier = plan.from_tiers, plan.to_tiers
        if np.any(positions >= self.length):
            raise ValueError("plan names a position the engine has not written")
        hbm = np.full(len(positions), NO_SLOT, dtype=np.uint32)
        out_of_t0 = from_tier == T0
        if np.any(self.tier[positions[out_of_t0]] != T0):
            raise ValueError("plan moves a token out of T0 that is not in T0")
        hbm[out_of_t0] = self.slot_of[positions[out_of_t0]]
        into_t0 = to_tier == T0
        hbm[into_t0] = self._take(int(np.count_nonzero(into_t0)))
        return hbm

    def release_reserved(self, plan: Plan, hbm: np.ndarray) -> None:
        self.free[hbm[plan.to_tiers == T0].astype(np.int64)] = True

    def commit(self, plan: Plan, hbm: np.ndarray) -> None:
        """Applies the executed plan: frees slots of tokens leaving T0, maps tokens entering it."""
        positions = plan.positions.astype(np.int64)
        from_tier, to_tier = plan.from_tiers, plan.to_tiers
        leaving = positions[from_tier == T0]
        self.free[self.slot_of[leaving]] = True
        self.slot_of[leaving] = -1
        entering = to_tier == T0
        self.slot_of[positions[entering]] = hbm[entering].astype(np.int64)
        self.tier[positions] = to_tier

    def close(self) -> None:
        """The sequence is gone: every slot is free, no position is live."""
        self.free[:] = True
        self.tier[: self.length] = T3
        self.slot_of[: self.length] = -1
