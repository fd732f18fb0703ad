"""kvtier for Hugging Face transformers: :class:`TieredCache`, a ``Cache`` backed by kvtierd.

Written against transformers 5.24 (the cache-layer API of 5.x) and tested with torch 2.15 on
Llama models (tests/python/test_hf.py); Qwen2-family decoders have the same attention structure.

Usage (batch 1, eager attention, CPU tensors)::

    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="eager")
    with TieredCache(model, socket_path="/run/kvtier/kvtierd.sock", max_length=4096,
                     hbm_ratio=0.5, evict_ratio=0.03) as cache:
        out = model.generate(input_ids, cache=cache, max_new_tokens=2048)  # or past_key_values=cache

How it works. T0 lives in the model's own tensors: one ``[1, kv_heads, max_length, head_dim]`` K
and V tensor per layer, attached to the sequence through ``kvtier_sequence_attach_cache``. Before
each forward the cache executes the plans kvtierd sent (offloading rows to the DDR pool,
restoring them, dropping evicted ones) and acknowledges them. Inside ``update()`` for layer l it
writes the new tokens into free slots and stages layer l's T1 rows from the pool
(``kvtier_stage_layer``), then returns every live token (T0 + T1) in ascending absolute position,
so with no eviction attention sees exactly the keys and values of the default cache, in the same
order: the outputs are bit-identical. Forward hooks on the attention modules read the eager
attention probabilities; their mean over query heads and layers (column sums over the query rows
of a prefill) is pushed as the step's per-token scores, and the step is ended.

Positions are the true absolute positions: ``get_seq_length()`` is the logical length (every
token ever cached, evicted ones included), from which transformers derives the RoPE positions of
new tokens; keys are cached after RoPE, so a token keeps its rotation wherever it moves.
``get_mask_sizes()`` reports the physical key count with ``kv_offset = logical - physical``, so
the causal mask among new tokens stays correct after evictions.

Limits. Batch size 1 without padding. Eager attention only: SDPA and flash attention return no
probabilities; a TieredCache for them needs an attention function registered with
``AttentionInterface`` that returns (or recomputes for the scored tokens) ``exp(q·k·scale - LSE)``.
CPU tensors (libkvtier's CPU executor); CUDA would attach device pointers with
``Backend.CUDA``. No beam search, no ``crop`` (assisted decoding). One TieredCache per
``kvtier.Client`` at a time: plans for other sequences of the same client are acknowledged as not
applied.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from . import _kvtier
from ._errors import KvtierError
from ._kvtier import Client, DType, EvictionMode, StagingOrder
from ._slots import T0, T1, T3, SlotMap

__all__ = ["TieredCache", "TieredCacheStats"]

_DTYPES = {torch.float32: DType.F32, torch.float16: DType.F16, torch.bfloat16: DType.BF16}


@dataclass
class TieredCacheStats:
    """Counts of one TieredCache's sequence (engine side)."""

    tokens: int = 0  # logical length
    tokens_t0: int = 0
    tokens_t1: int = 0
    tokens_t3: int = 0
    plans_applied: int = 0
    plans_failed: int = 0
    rows_offloaded: int = 0  # T0 -> T1
    rows_restored: int = 0  # T1 -> T0
    rows_evicted: int = 0  # -> T3
    peak_t0_tokens: int = 0
    peak_kv_bytes: int = 0  # max over steps of T0 bytes (all layers) + one layer's staged T1 rows
    peak_transient_bytes: int = 0  # max bytes of one layer's assembled keys+values (T0 + T1, returned by update())
    bytes_per_token: int = 0  # K + V of one token, all layers


class _Layer(CacheLayerMixin):
    """One model layer's view of the TieredCache (transformers' per-layer object)."""

    is_sliding = False

    def __init__(self, cache: TieredCache, layer_idx: int) -> None:
        super().__init__()
        self._cache = weakref.proxy(cache)
        self.layer_idx = layer_idx
        self.is_initialized = True
        self.batch_size = 1

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        pass

    def update(self, key_states, value_states, *args, **kwargs):
        return self._cache._update(self.layer_idx, key_states, value_states)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self._cache._mask_sizes(query_length)

    def get_seq_length(self) -> int:
        return self._cache._slots.length

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        raise NotImplementedError("a TieredCache serves one sequence: close it and create a new one")

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise NotImplementedError("TieredCache does not support beam search")

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove != 0:
            raise NotImplementedError("TieredCache cannot crop (assisted decoding is not supported)")

    def offload(self) -> None:  # kvtier moves the bytes
        pass

    def prefetch(self) -> None:
        pass


class TieredCache(Cache):
    """A transformers ``Cache`` whose tokens are tiered by kvtierd (see the module docstring).

    Args:
        model: the causal LM (eager attention, CPU, batch 1). Hooks are registered on it until
            :meth:`close`.
        max_length: most tokens (prompt + generated) the sequence will hold; sizes the KV tensors.
        client: a connected ``kvtier.Client`` whose model geometry is registered already; if None,
            the cache connects to ``socket_path`` and registers ``pool_tokens`` rows (default
            ``max_length``), and closes that client in :meth:`close`.
        hbm_ratio, evict_ratio, sink_tokens, window_tokens, interval, mode, hysteresis: the
            sequence's tier parameters (``Client.open_sequence``).
        plan_wait_ms: after a step that ends a decision interval, sync with kvtierd
            (``Client.sync``, at most this long) before the next forward, so the plan decided
            there takes effect at the same step on every run; no wait beyond the daemon's own
            work, plan or no plan (0: apply plans whenever they arrive, like an engine that
            never stalls).
        staging_order: ``POSITION_ORDER`` keeps outputs bit-identical to the default cache.
    """

    def __init__(self, model: torch.nn.Module, *, max_length: int, client: Client | None = None,
                 socket_path: str | None = None, name: str | None = None, pool_tokens: int | None = None,
                 hbm_ratio: float = 0.5, evict_ratio: float = 0.0, sink_tokens: int = 4, window_tokens: int = 128,
                 interval: int = 64, mode: EvictionMode = EvictionMode.CUMULATIVE, hysteresis: float = 0.0,
                 plan_wait_ms: int = 0, staging_order: StagingOrder = StagingOrder.POSITION_ORDER) -> None:
        config = model.config.get_text_config()
        if getattr(config, "_attn_implementation", None) != "eager":
            raise ValueError("TieredCache needs attention probabilities: load the model with "
                             "attn_implementation='eager' (SDPA/flash return none; see kvtier.hf)")
        self.num_layers = config.num_hidden_layers
        self.num_kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.dtype = model.dtype
        if self.dtype not in _DTYPES:
            raise ValueError(f"unsupported KV dtype {self.dtype}")
        super().__init__(layers=[_Layer(self, i) for i in range(self.num_layers)])
        self._params = dict(hbm_ratio=hbm_ratio, evict_ratio=evict_ratio, sink_tokens=sink_tokens,
                            window_tokens=window_tokens, interval=interval, mode=mode, hysteresis=hysteresis)
        self.interval, self.plan_wait_ms, self.staging_order = interval, plan_wait_ms, staging_order
        self._own_client = client is None
        if client is None:
            client = Client(socket_path, name)
            model_name = os.path.basename(str(getattr(config, "_name_or_path", "") or ""))[:63] or None
            client.register_model(self.num_layers, self.num_kv_heads, self.head_dim, _DTYPES[self.dtype],
                                  pool_tokens or max_length, model_name)
        self.client = client
        self.sequence: int | None = None
        self._slots = SlotMap(max_length)
        self._k: list[torch.Tensor] = []
        self._v: list[torch.Tensor] = []
        self._stage_buffer = torch.empty(0, dtype=self.dtype)
        self._step = 0  # next decode step; the prefill pushes as step 0 without ending it
        self._prefilled = False
        self._await_plan = False
        self._forward: dict[str, Any] | None = None
        self.stats = TieredCacheStats(bytes_per_token=2 * self.num_layers * self.num_kv_heads * self.head_dim *
                                      torch.empty(0, dtype=self.dtype).element_size())
        self._hooks = _install_hooks(self, model)
        # Hooks hold the cache weakly; a cache dropped without close() still leaves the model clean.
        self._finalizer = weakref.finalize(self, _remove_hooks, self._hooks)

    # ---- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the sequence (the daemon frees its pool rows), removes the hooks and, if the
        cache opened its own client, disconnects. Idempotent."""
        _remove_hooks(self._hooks)
        if self.sequence is not None and not self.client.closed:
            while (plan := self.client.poll_plan(0)) is not None:
                self.client.ack_plan(plan.epoch, applied=False)
            self.client.close_sequence(self.sequence)
            self.sequence = None
        if self._own_client:
            self.client.close()

    def __enter__(self) -> TieredCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- transformers Cache interface ------------------------------------------------------

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        return self._update(layer_idx, key_states, value_states)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._slots.length

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return -1

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self._mask_sizes(query_length)

    def _mask_sizes(self, query_length: int) -> tuple[int, int]:
        physical = self._slots.length - self._slots.count(T3)
        return physical + query_length, self._slots.length - physical

    @property
    def is_compileable(self) -> bool:
        return False

    @property
    def is_croppable(self) -> bool:
        return False

    # ---- the step --------------------------------------------------------------------------

    def _before_forward(self) -> None:
        """Executes and acknowledges the plans that arrived (after a step that ended a decision
        interval, once kvtierd has decided: plan_wait_ms)."""
        if self.sequence is None:
            return
        if self._await_plan and self.plan_wait_ms > 0 and not self.client.sync(self.plan_wait_ms):
            raise TimeoutError(f"kvtierd did not decide within plan_wait_ms={self.plan_wait_ms}")
        self._await_plan = False
        while (plan := self.client.poll_plan(0)) is not None:
            if plan.sequence != self.sequence:
                self.client.ack_plan(plan.epoch, applied=False)  # not ours: the daemon rolls it back
                continue
            self._apply(plan)

    def _apply(self, plan: _kvtier.Plan) -> None:
        """Executes one plan; if the copies fail, the plan is acknowledged as not applied (the
        daemon keeps the old placement) and the error is raised."""
        hbm = self._slots.hbm_slots(plan)
        try:
            self.client.execute_plan(plan, hbm)
        except KvtierError:
            self._slots.release_reserved(plan, hbm)
            self.client.ack_plan(plan.epoch, applied=False)
            self.stats.plans_failed += 1
            raise
        self._slots.commit(plan, hbm)
        self.client.ack_plan(plan.epoch, applied=True)
        s, f, t = self.stats, plan.from_tiers, plan.to_tiers
        s.plans_applied += 1
        s.rows_offloaded += int(np.count_nonzero((f == T0) & (t == T1)))
        s.rows_restored += int(np.count_nonzero((f == T1) & (t == T0)))
        s.rows_evicted += int(np.count_nonzero(t == T3))

    def _open(self, key_states: torch.Tensor) -> None:
        if key_states.device.type != "cpu":
            raise ValueError("TieredCache attaches CPU tensors (libkvtier's CPU executor)")
        if key_states.shape[0] != 1:
            raise ValueError("TieredCache serves batch size 1")
        self.sequence = self.client.open_sequence(key_states.shape[2], **self._params)
        shape = (1, self.num_kv_heads, self._slots.capacity, self.head_dim)
        self._k = [torch.zeros(shape, dtype=self.dtype) for _ in range(self.num_layers)]
        self._v = [torch.zeros(shape, dtype=self.dtype) for _ in range(self.num_layers)]
        es = self._k[0].element_size()
        self.client.attach_cache(
            self.sequence, k_base=[t.data_ptr() for t in self._k], v_base=[t.data_ptr() for t in self._v],
            num_kv_heads=self.num_kv_heads, head_dim=self.head_dim, dtype=_DTYPES[self.dtype],
            num_slots=self._slots.capacity, block_size=self._slots.capacity, token_stride=self.head_dim * es,
            head_stride=self._slots.capacity * self.head_dim * es,
            block_stride=self.num_kv_heads * self._slots.capacity * self.head_dim * es)

    def _begin(self, key_states: torch.Tensor) -> dict[str, Any]:
        """Layer 0 of a forward: admit the new tokens and fix the order every layer returns."""
        if self.sequence is None:
            self._open(key_states)
        q = key_states.shape[2]
        new_slots = self._slots.append(q)
        t0_pos, t1_pos = self._slots.positions_in(T0), self._slots.positions_in(T1)
        order = np.concatenate([t0_pos, t1_pos])
        perm = np.argsort(order, kind="stable")
        rows, nbytes = self.client.t1_rows(self.sequence) if len(t1_pos) else (0, 0)
        if rows != len(t1_pos):
            raise RuntimeError(f"libkvtier holds {rows} T1 rows, the cache expects {len(t1_pos)}")
        if nbytes > self._stage_buffer.numel() * self._stage_buffer.element_size():
            self._stage_buffer = torch.empty(nbytes // self._stage_buffer.element_size(), dtype=self.dtype)
        t0_bytes = len(t0_pos) * self.stats.bytes_per_token
        s = self.stats
        s.peak_t0_tokens = max(s.peak_t0_tokens, len(t0_pos))
        s.peak_kv_bytes = max(s.peak_kv_bytes, t0_bytes + nbytes)
        s.peak_transient_bytes = max(s.peak_transient_bytes, len(order) * s.bytes_per_token // self.num_layers)
        return {
            "new_slots": torch.from_numpy(new_slots.astype(np.int64)),
            "t0_slots": torch.from_numpy(self._slots.slot_of[t0_pos]),
            "t1_positions": t1_pos,
            "perm": None if len(t1_pos) == 0 else torch.from_numpy(perm),
            "positions": order[perm],
            "score_sum": torch.zeros(len(order), dtype=torch.float32),
            "layers_scored": 0,
            "prefill": not self._prefilled,
        }

    def _update(self, layer: int, key_states: torch.Tensor, value_states: torch.Tensor):
        if layer == 0:
            self._forward = self._begin(key_states)
        f = self._forward
        k_cache, v_cache = self._k[layer], self._v[layer]
        k_cache.index_copy_(2, f["new_slots"], key_states)
        v_cache.index_copy_(2, f["new_slots"], value_states)
        keys = k_cache.index_select(2, f["t0_slots"])
        values = v_cache.index_select(2, f["t0_slots"])
        if f["perm"] is not None:
            staged_k, staged_v = self._stage(layer, f["t1_positions"])
            keys = torch.cat([keys, staged_k], dim=2).index_select(2, f["perm"])
            values = torch.cat([values, staged_v], dim=2).index_select(2, f["perm"])
        return keys, values

    def _stage(self, layer: int, expected: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        staged = self.client.stage_layer(self.sequence, layer, self._stage_buffer, self.staging_order)
        if self.staging_order == StagingOrder.POSITION_ORDER and not np.array_equal(staged.positions, expected):
            raise RuntimeError("staged T1 positions differ from the cache's T1 set")
        es, n = self._stage_buffer.element_size(), staged.rows * self.num_kv_heads * self.head_dim
        shape = (staged.rows, self.num_kv_heads, self.head_dim)
        k = self._stage_buffer[staged.k_offset // es: staged.k_offset // es + n].view(shape)
        v = self._stage_buffer[staged.v_offset // es: staged.v_offset // es + n].view(shape)
        return k.permute(1, 0, 2).unsqueeze(0), v.permute(1, 0, 2).unsqueeze(0)

    def _on_attention(self, weights: torch.Tensor | None) -> None:
        """After each layer's attention: accumulate scores; after the last, push and end the step."""
        f = self._forward
        if f is None:
            return
        if weights is None:
            raise RuntimeError("the attention returned no probabilities: TieredCache needs eager attention")
        # [batch, q_heads, q, kv] -> mean over heads, summed over query rows (one row when decoding).
        f["score_sum"] += weights[0].detach().float().mean(dim=0).sum(dim=0)
        f["layers_scored"] += 1
        if f["layers_scored"] < self.num_layers:
            return
        scores = np.zeros(self._slots.length, dtype=np.float32)
        scores[f["positions"]] = (f["score_sum"] / self.num_layers).numpy()
        self.client.push_scores(self.sequence, self._step, scores)
        if f["prefill"]:
            self._prefilled = True
        else:
            self.client.step_end(self.sequence, self._step)
            self._step += 1
            self._await_plan = self._step % self.interval == 0
        self._forward = None
        self._update_counts()

    def _update_counts(self) -> None:
        s = self.stats
        s.tokens = self._slots.length
        s.tokens_t0, s.tokens_t1, s.tokens_t3 = (self._slots.count(t) for t in (T0, T1, T3))


def _remove_hooks(hooks: list[Any]) -> None:
    for hook in hooks:
        hook.remove()
    hooks.clear()


def _install_hooks(cache: TieredCache, model: torch.nn.Module) -> list[Any]:
    """A pre-hook on the model (plans before the mask is built) and a hook on every attention
    module (probabilities). They act only for forwards that use this cache and hold it weakly."""
    ref = weakref.ref(cache)

    def ours(kwargs: dict[str, Any]) -> TieredCache | None:
        c = ref()
        used = kwargs.get("cache", kwargs.get("past_key_values"))
        return c if c is not None and used is c else None

    def before(module, args, kwargs):
        if (c := ours(kwargs)) is not None:
            c._before_forward()

    def after_attention(module, args, kwargs, output):
        if (c := ours(kwargs)) is not None:
            c._on_attention(output[1] if isinstance(output, tuple) and len(output) > 1 else None)

    hooks = [model.register_forward_pre_hook(before, with_kwargs=True)]
    attention = [m for m in model.modules() if hasattr(m, "layer_idx") and type(m).__name__.endswith("Attention")]
    if len(attention) != cache.num_layers:
        raise ValueError(f"found {len(attention)} attention modules for {cache.num_layers} layers")
    hooks += [m.register_forward_hook(after_attention, with_kwargs=True) for m in attention]
    return hooks
