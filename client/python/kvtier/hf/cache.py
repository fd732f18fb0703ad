"""TieredCache: a transformers ``Cache`` whose tokens kvtierd tiers (see kvtier.hf)."""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from transformers.cache_utils import Cache

from .._kvtier import Client, EvictionMode, Feature, Plan, Policy
from .._rows import copy_rows
from .._slots import T0, T3, SlotMap
from .attention import implementation_for
from .clients import PlanRouter, geometry, shared_router
from .forward import DeviceIndex, Forward, RowForward
from .hooks import install_hooks, plan_handler, remove_hooks
from .layer import TieredLayer
from .rows import Row
from .split import HostStep
from .store import T0Store

if TYPE_CHECKING:
    from transformers.modeling_utils import PreTrainedModel

# Tier parameters TieredCache passes to Client.open_sequence beyond its named ones.
_SEQUENCE_PARAMS = {"hbm_tokens", "evict_tokens", "decay", "seed", "protect_prompt", "recent_window",
                    "value_protect_ratio", "value_protect_tokens", "rkv_lambda", "key_digest_dim", "int8_ratio",
                    "int8_tokens"}


@dataclass
class TieredCacheStats:
    """One TieredCache, summed over its batch rows. Bytes are allocated bytes of the tensors the
    cache owns on the model's device (storage sizes), not counts of occupied slots."""

    tokens: int = 0  # logical lengths (evicted tokens included)
    tokens_t0: int = 0
    tokens_host: int = 0  # T1 + T2: staged from the pools per layer
    tokens_t3: int = 0
    sequences_closed: int = 0  # rows whose sequence closed (finished early or the cache closed)
    plans_applied: int = 0
    plans_failed: int = 0
    rows_offloaded: int = 0
    rows_restored: int = 0
    rows_evicted: int = 0
    kv_bytes: int = 0  # now: T0 tensors + staging buffers
    peak_kv_bytes: int = 0  # max over forwards of T0 tensors + staging + one layer's assembled K/V
    peak_transient_bytes: int = 0  # max of one layer's assembled K/V (returned by update())
    storage_growths: int = 0
    bytes_moved: int = 0  # between host pools and the model's tensors: plan copies + staging
    decode_steps: int = 0


def _index_place(dsts: tuple[torch.Tensor, ...], srcs: tuple[torch.Tensor, ...], src_rows: torch.Tensor | None,
                 dst_rows: torch.Tensor) -> None:
    """dst[:, dst_rows] = src[:, src_rows] (all of src when src_rows is None) for each pair of
    [heads, rows, dim] tensors, with torch's index ops (CUDA; the CPU uses kvtier.copy_rows)."""
    for dst, src in zip(dsts, srcs):
        dst.index_copy_(1, dst_rows, src if src_rows is None else src.index_select(1, src_rows))


class TieredCache(Cache):
    """A transformers ``Cache`` backed by kvtierd. Args are described in kvtier.hf's docstring."""

    def __init__(self, model: PreTrainedModel, *, max_length: int, client: Client | None = None,
                 socket_path: str | None = None, name: str | None = None, pool_tokens: int | None = None,
                 int8_pool_tokens: int = 0, block_tokens: int = 32, hbm_ratio: float = 0.5,
                 evict_ratio: float = 0.0, sink_tokens: int = 4, window_tokens: int = 128, interval: int = 64,
                 mode: EvictionMode = EvictionMode.CUMULATIVE, hysteresis: float = 0.0,
                 policy: Policy = Policy.PAPER, plan_wait_ms: int = 0, eos_token_id: int | list[int] | None = None,
                 host_attention: bool = False, **params: Any) -> None:
        unknown = set(params) - _SEQUENCE_PARAMS
        if unknown:
            raise TypeError(f"unknown TieredCache parameters: {sorted(unknown)}")
        if host_attention and (device := next(model.parameters()).device).type != "cpu":
            raise ValueError(f"host_attention needs the model on the CPU (libkvtier's CPU executor), not {device}")
        self.host_attention = host_attention
        self.num_layers, self.num_kv_heads, self.head_dim = geometry(model)
        super().__init__(layers=[TieredLayer(self, i) for i in range(self.num_layers)])
        self.model_ref = weakref.ref(model)
        self.max_length, self.block_tokens, self.plan_wait_ms = max_length, block_tokens, plan_wait_ms
        self.interval, self.policy = interval, policy
        self._params = dict(hbm_ratio=hbm_ratio, evict_ratio=evict_ratio, sink_tokens=sink_tokens,
                            window_tokens=window_tokens, interval=interval, mode=mode, hysteresis=hysteresis,
                            policy=policy, **params)
        self._digest_dim = params.get("key_digest_dim") or 16
        if policy == Policy.R_KV and self.head_dim % self._digest_dim:
            raise ValueError(f"key_digest_dim {self._digest_dim} must divide head_dim {self.head_dim}")
        if client is not None:
            self.router = PlanRouter(client, owned=False)
        else:
            self.router = shared_router(model, socket_path, name, pool_tokens or max_length, int8_pool_tokens)
        eos = model.generation_config.eos_token_id if eos_token_id is None else eos_token_id
        self._eos = set() if eos is None else {eos} if isinstance(eos, int) else set(eos)
        self.rows: list[Row] = []
        self.store: T0Store | None = None
        self._stats = TieredCacheStats()
        self._length = 0  # keys in the batch index space (padding included)
        self._forward: Forward | None = None
        self._prompt_mask: np.ndarray | None = None  # [batch, prompt] of the first forward
        self._await_plan = False
        self._model_attention = model.config._attn_implementation
        model.set_attn_implementation(implementation_for(self._model_attention))
        self._hooks = install_hooks(self, model)
        self._finalizer = weakref.finalize(self, remove_hooks, self._hooks)

    @property
    def stats(self) -> TieredCacheStats:
        """A copy of the counts now (after close(): as the generation left them, kv_bytes 0)."""
        if self.store is not None:
            self._update_stats()
        return dataclasses.replace(self._stats)

    @property
    def client(self) -> Client:
        return self.router.client

    # ---- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Closes every row's sequence (the daemon frees its pool rows), frees the tensors,
        removes the hooks and gives the model its attention implementation back. The model's
        shared client stays for its next cache (kvtier.hf.release_model disconnects it); a
        client passed in stays the caller's. Idempotent."""
        remove_hooks(self._hooks)
        if self.store is not None:
            self._update_stats()  # the counts as the generation left them
        for row in self.rows:
            if row.open:
                row.close()
                self._stats.sequences_closed += 1
        self.store = None
        model = self.model_ref()
        if model is not None and model.config._attn_implementation != self._model_attention:
            model.set_attn_implementation(self._model_attention)
        self._stats.kv_bytes = 0

    def __enter__(self) -> TieredCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- transformers' Cache interface -----------------------------------------------------

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self._update(layer_idx, key_states, value_states)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._length

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return -1

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self._length + query_length, 0  # every position has a key (dead ones masked)

    @property
    def is_compileable(self) -> bool:
        return False

    @property
    def is_croppable(self) -> bool:
        return False

    # ---- the step --------------------------------------------------------------------------

    def owns_forward(self) -> bool:
        return self._forward is not None

    def _before_forward(self, kwargs: dict[str, Any]) -> None:
        """Before a forward: the padding of a first forward, rows that finished, the plans."""
        ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
        if not self.rows:
            if mask is not None and mask.dim() == 2:
                self._prompt_mask = mask.detach().cpu().numpy() != 0
            return
        if ids is not None and self._eos:
            for b, token in enumerate(ids[:, -1].tolist()):
                if self.rows[b].open and token in self._eos:
                    self.rows[b].close()  # its chain is complete: nothing it holds is needed again
                    self._stats.sequences_closed += 1
        if self._await_plan and self.plan_wait_ms > 0 and not self.client.sync(self.plan_wait_ms):
            raise TimeoutError(f"kvtierd did not decide within plan_wait_ms={self.plan_wait_ms}")
        self._await_plan = False
        self.router.drain()

    def _on_plan(self, row: Row, plan: Plan) -> None:
        """A plan for one of this cache's rows (PlanRouter.drain, before some cache's forward)."""
        self._grow(row.slots.slots_needed(int(np.count_nonzero(plan.to_tiers == T0))))
        row.apply(plan, self._store().row_bytes)

    def _store(self) -> T0Store:
        """The T0 storage (made by the first forward)."""
        assert self.store is not None, "no forward has run"
        return self.store

    def _grow(self, slots: int) -> None:
        if self.store is not None and self.store.grow(slots):
            for b, row in enumerate(self.rows):
                if row.open:
                    row.slots.grow(self.store.slots)
                    self.store.attach(self.client, row.live_sequence, b)

    def _open(self, key_states: torch.Tensor) -> T0Store:
        batch, q = key_states.shape[0], key_states.shape[2]
        mask = self._prompt_mask if self._prompt_mask is not None else np.ones((batch, q), dtype=bool)
        if mask.shape != (batch, q):
            raise ValueError(f"attention_mask is {mask.shape}, the prompt {(batch, q)}")
        # Left padding is not part of a row's sequence; masked tokens after its first real one
        # (e.g. a pad id inside a chat template) are positions transformers' mask hides.
        pads = np.where(mask.any(axis=1), mask.argmax(axis=1), q)
        store = self.store = T0Store(layers=self.num_layers, batch=batch, kv_heads=self.num_kv_heads,
                                     head_dim=self.head_dim, dtype=key_states.dtype, device=key_states.device,
                                     block_tokens=self.block_tokens)
        store.grow(int(q - pads.min()))
        for b in range(batch):
            row = Row(self.router, None, int(pads[b]), SlotMap(self.max_length, store.slots),
                      hidden=np.flatnonzero(~mask[b, pads[b]:]))
            row.sequence = sequence = self.router.open(int(q - pads[b]), plan_handler(self, row), **self._params)
            self.rows.append(row)
            store.attach(self.client, sequence, b)
            if store.device.type == "cuda":
                self.client.set_stream(sequence, torch.cuda.current_stream(store.device).cuda_stream)
        return store

    def _begin(self, key_states: torch.Tensor) -> Forward:
        """Layer 0 of a forward: admit the new tokens and fix where every layer's keys go."""
        prefill = not self.rows
        store = self._open(key_states) if prefill else self._store()
        q = key_states.shape[2]
        rows = [(b, r) for b, r in enumerate(self.rows) if r.open]
        if not prefill:
            self._grow(max((r.slots.slots_needed(q) for _, r in rows), default=0))
        length = self._length + q
        host_attention = self.host_attention and not prefill and q == 1
        device = store.device
        row_forwards = []
        for b, row in rows:
            n = q - row.pad if prefill else q
            first = row.slots.length
            new_slots = row.slots.append(n)
            t0 = row.slots.positions_in(T0)
            host = row.host_positions()
            row.begin_staging(len(host), store.dtype, device)
            r = RowForward(b=b, row=row, cols=slice(q - n, q), new_slots=new_slots.astype(np.int64, copy=False),
                           new_rows=np.arange(n, dtype=np.int64), t0_keys=(row.pad + t0).astype(np.int64, copy=False),
                           t0_slots=row.slots.slot_of[t0], host=host, first_new=first)
            if device.type != "cpu":  # torch's index ops, on the engine's stream (the CPU stages at positions)
                r.device = DeviceIndex(new_slots=torch.as_tensor(r.new_slots, device=device),
                                       t0_keys=torch.as_tensor(r.t0_keys, device=device),
                                       t0_slots=torch.as_tensor(r.t0_slots, device=device),
                                       host_keys=torch.as_tensor(row.pad + host, device=device))
            row_forwards.append(r)
        self._length += q
        dead = None
        if not prefill and not host_attention:  # host attention reads live rows only: nothing to mask
            dead = torch.zeros(len(self.rows), length, dtype=torch.bool)
            for b, row in enumerate(self.rows):
                if row.open:
                    dead[b, row.pad: row.pad + row.slots.length] = torch.from_numpy(
                        row.slots.tier[: row.slots.length] == T3)
            dead = dead.to(device) if dead.any() else None
        f = Forward(prefill=prefill, q=q, length=length, host=host_attention, rows=row_forwards, dead=dead,
                    covered=dead is None and len(rows) == len(self.rows) and all(r.pad == 0 for _, r in rows),
                    scores=torch.zeros(len(self.rows), length, dtype=torch.float32, device=device))
        self._forward = f
        return f

    def _forward_now(self) -> Forward:
        """The forward under way (from its layer 0 until its scores went to kvtierd)."""
        assert self._forward is not None, "no forward under way"
        return self._forward

    def _update(self, layer: int, key_states: torch.Tensor,
                value_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = self._begin(key_states) if layer == 0 else self._forward_now()
        store = self._store()
        for r in f.rows:
            dsts, srcs = (store.k[layer][r.b], store.v[layer][r.b]), (key_states[r.b, :, r.cols],
                                                                      value_states[r.b, :, r.cols])
            if r.device is None:
                copy_rows(dsts, srcs, r.new_rows, r.new_slots)
            else:
                _index_place(dsts, srcs, None, r.device.new_slots)
        if layer == self.num_layers // 2:
            self._push_features(f, key_states, value_states)
        if f.prefill:
            return key_states, value_states  # the keys of this forward are all there is
        if f.host:
            return store.k[layer], store.v[layer]  # attended in slot order (kvtier.hf.split)
        shape = (key_states.shape[0], self.num_kv_heads, f.length, self.head_dim)
        # Keys no row writes (padding, evicted, rows that ended) must be finite: zeros. When every
        # key is written, no memset.
        fill = torch.empty if f.covered else torch.zeros
        keys = fill(shape, dtype=key_states.dtype, device=key_states.device)
        values = fill(shape, dtype=key_states.dtype, device=key_states.device)
        for r in f.rows:
            b, row = r.b, r.row
            dsts, srcs = (keys[b], values[b]), (store.k[layer][b], store.v[layer][b])
            if r.device is None:  # the CPU
                copy_rows(dsts, srcs, r.t0_slots, r.t0_keys)
                row.counts.bytes_moved += row.stage_at(layer, keys[b], values[b])
                continue
            _index_place(dsts, srcs, r.device.t0_slots, r.device.t0_keys)
            staged = row.staged(layer, self.num_layers, (self.num_kv_heads, self.head_dim))
            if staged is not None:
                k, v, positions = staged
                if not np.array_equal(positions, r.host):
                    raise RuntimeError("staged host positions differ from the cache's T1/T2 set")
                _index_place(dsts, (k, v), None, r.device.host_keys)
                row.counts.bytes_moved += 2 * k.numel() * k.element_size()
        f.transient = max(f.transient, 2 * keys.untyped_storage().nbytes())
        return keys, values

    def _push_features(self, f: Forward, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """vase: each new token's value range; r_kv: its key digest (this middle layer's head-mean
        key, average-pooled to key_digest_dim floats)."""
        if self.policy not in (Policy.VASE, Policy.R_KV):
            return
        for r in f.rows:
            b, row = r.b, r.row
            if self.policy == Policy.VASE:
                v = value_states[b, :, r.cols].float()  # [heads, n, dim]
                ranges = (v.amax(dim=(0, 2)) - v.amin(dim=(0, 2))).cpu().numpy()
                self.client.push_features(row.live_sequence, Feature.VALUE_RANGE, ranges, r.first_new)
            else:
                k = key_states[b, :, r.cols].float().mean(dim=0)  # [n, dim]
                digest = k.view(k.shape[0], self._digest_dim, -1).mean(dim=2).reshape(-1).cpu().numpy()
                self.client.push_features(row.live_sequence, Feature.KEY_DIGEST, digest, r.first_new)

    # ---- host attention (kvtier.hf.split) ----------------------------------------------------

    def attends_host(self) -> bool:
        return self._forward_now().host

    def host_step(self, q_heads: int, head_dim: int) -> HostStep:
        f = self._forward_now()
        if f.host_step is None:
            f.host_step = HostStep(self, f, q_heads, head_dim)
        return f.host_step

    def dead_keys(self) -> torch.Tensor | None:
        return self._forward_now().dead

    def key_mask(self, q: int) -> torch.Tensor | None:
        """[batch, q, keys] bool: key j is live for row b and not after query i (scoring); None
        when that holds for every key (one query per row, no padding, hidden or dead key). The
        same for every layer of a forward, so built once."""
        f = self._forward_now()
        if not f.key_mask_built:
            f.key_mask, f.key_mask_built = self._build_key_mask(f, q), True
        return f.key_mask

    def _build_key_mask(self, f: Forward, q: int) -> torch.Tensor | None:
        if q == 1 and f.covered and not any(len(r.row.hidden) for r in f.rows):
            return None
        keys = f.length
        live = torch.zeros(len(self.rows), keys, dtype=torch.bool, device=f.scores.device)
        for r in f.rows:
            row = r.row
            live[r.b, row.pad:] = True
            live[r.b, torch.as_tensor(row.pad + row.hidden, device=live.device)] = False
        if f.dead is not None:
            live &= ~f.dead
        causal = torch.ones(q, keys, dtype=torch.bool, device=live.device).tril(keys - q)
        return live[:, None, :] & causal[None]

    def on_scores(self, layer: int, probs: torch.Tensor) -> None:
        """probs [batch, q, keys]: one layer's mean over query heads. After the last layer the
        step's scores go to kvtierd."""
        f = self._forward_now()
        if f.prefill and f.q > 1:  # padding query rows score nothing
            valid = torch.zeros(probs.shape[0], probs.shape[1], 1, device=probs.device)
            for r in f.rows:
                valid[r.b, r.row.pad:] = 1.0
            probs = probs * valid
        f.scores += probs.sum(dim=1)
        f.layers_scored += 1
        if f.layers_scored == self.num_layers:
            self.scored_forward()

    def scored_forward(self) -> None:
        """Every layer scored (Forward.scores: the sums over layers): the step's scores go to kvtierd."""
        f = self._forward_now()
        scores = (f.scores / self.num_layers).cpu().numpy()
        for r in f.rows:
            row = r.row
            self.client.push_scores(row.live_sequence, row.step, np.ascontiguousarray(scores[r.b, row.pad:]))
            if not f.prefill:
                self.client.step_end(row.live_sequence, row.step)
                row.step += 1
                self._await_plan = self._await_plan or row.step % self.interval == 0
        if not f.prefill:
            self._stats.decode_steps += 1
        self._end_forward(f)

    def _end_forward(self, f: Forward) -> None:
        s = self._stats
        self._forward = None
        held = self._held_bytes()
        s.peak_transient_bytes = max(s.peak_transient_bytes, f.transient)
        s.peak_kv_bytes = max(s.peak_kv_bytes, held + f.transient)
        self._update_stats()

    def _held_bytes(self) -> int:
        if self.store is None:
            return 0
        return self.store.nbytes() + sum(r.staging_bytes() for r in self.rows)

    def _update_stats(self) -> None:
        s = self._stats
        live = [r for r in self.rows if r.open]
        s.tokens = sum(r.slots.length for r in live)
        s.tokens_t0 = sum(r.slots.count(T0) for r in live)
        s.tokens_t3 = sum(r.slots.count(T3) for r in live)
        s.tokens_host = s.tokens - s.tokens_t0 - s.tokens_t3
        for name in ("plans_applied", "plans_failed", "rows_offloaded", "rows_restored", "rows_evicted",
                     "bytes_moved"):
            setattr(s, name, sum(getattr(r.counts, name) for r in self.rows))
        s.kv_bytes = self._held_bytes()
        s.storage_growths = self.store.growths if self.store else s.storage_growths
