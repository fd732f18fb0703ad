"""The scheduler half: opens and closes requests' kvtier sequences (through the workers), reserves
the staging blocks, and returns to vLLM's block pool every block whose rows a plan moved to host
memory, so that other requests can use it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .config import ConfigError, KvtierConfig, tier_params
from .metadata import ScheduledRequest, StepMetadata, WorkerReport

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_utils import KVCacheBlock
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.core.single_type_kv_cache_manager import SingleTypeKVCacheManager
    from vllm.v1.request import Request

log = logging.getLogger("kvtier_vllm")

STAGING_SHARE = 8  # the default staging reserve takes at most 1/STAGING_SHARE of the KV cache


class SchedulerSide:
    def __init__(self, config: KvtierConfig, vllm_config: VllmConfig) -> None:
        self.config = config
        self.block_size = vllm_config.cache_config.block_size
        self.num_layers = vllm_config.model_config.get_num_layers(vllm_config.parallel_config)
        max_units = -(-vllm_config.model_config.max_model_len // self.block_size)
        max_seqs = vllm_config.scheduler_config.max_num_seqs
        # Staging holds every host-resident block of one step's batch for one layer at a time; a
        # reserved block gives one slot per layer. Host attention reads host rows in place: none.
        self.staging_count = 0 if config.host_attention else \
            config.staging_blocks or -(-max_units * max_seqs // self.num_layers)
        # The single-type manager of vLLM's (one) full-attention KV cache group, and the block pool.
        self.manager: SingleTypeKVCacheManager | None = None
        self.pool: BlockPool | None = None
        self.staging: list[KVCacheBlock] = []
        self._new: list[ScheduledRequest] = []
        self._closed: list[str] = []
        self._tier: dict[str, dict[str, Any]] = {}
        self.held: dict[str, int] = {}  # blocks each running request holds now
        self.peak_held: dict[str, int] = {}  # ... at most, over its life (kept after it finished)

    # ---- vLLM's KV cache manager ---------------------------------------------------------------

    def bind(self, kv_cache_manager: KVCacheManager) -> None:
        managers = kv_cache_manager.coordinator.single_type_managers
        if len(managers) != 1:
            raise ConfigError(f"kvtier: one KV cache group expected, the model has {len(managers)}")
        self.manager, self.pool = managers[0], kv_cache_manager.block_pool
        pool = self.pool
        if pool.enable_caching:
            raise ConfigError("kvtier: prefix caching must be off (enable_prefix_caching=False): a block shared "
                              "by several requests cannot move to one request's host rows")
        free = pool.get_num_free_blocks()
        if self.staging_count and free <= self.staging_count:
            if self.config.staging_blocks:
                raise ConfigError(f"kvtier: {self.staging_count} staging blocks do not fit the KV cache of {free}")
            # The default (max_num_seqs full-length requests) outgrows a small cache: an eighth of
            # it. A plan after which the host rows would not fit is refused (the placement stays).
            self.staging_count = max(1, free // STAGING_SHARE)
        self.staging = pool.get_new_blocks(self.staging_count)
        log.info("kvtier: %d blocks of %d tokens reserved for staging host rows", self.staging_count,
                 self.block_size)

    # ---- requests ------------------------------------------------------------------------------

    def on_new_request(self, request: Request) -> None:
        extra = (request.sampling_params.extra_args or {}) if request.sampling_params else {}
        try:
            self._tier[request.request_id] = {**self.config.tier, **tier_params(extra.get("kvtier"))}
        except ConfigError as e:  # kvtier never fails a request: this one runs untiered
            log.error("request %s runs without kvtier: %s", request.request_id, e)

    def request_finished(self, request: Request) -> None:
        self._closed.append(request.request_id)
        self._tier.pop(request.request_id, None)
        self.held.pop(request.request_id, None)

    def has_closing(self) -> bool:
        return bool(self._closed)

    def build_meta(self, out: SchedulerOutput) -> StepMetadata:
        scheduled = []
        for r in out.scheduled_new_reqs:
            tiered = r.req_id in self._tier  # else untiered: the worker opens no sequence
            scheduled.append(ScheduledRequest(r.req_id, list(r.block_ids[0]), r.num_computed_tokens,
                                              out.num_scheduled_tokens[r.req_id],
                                              len(r.prompt_token_ids or ()) if tiered else -1,
                                              self._tier.get(r.req_id, {})))
        cached = out.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            blocks = cached.new_block_ids[i]
            resumed = req_id in cached.resumed_req_ids
            entry = ScheduledRequest(req_id, list(blocks[0]) if blocks else [], cached.num_computed_tokens[i],
                                     out.num_scheduled_tokens[req_id])
            if resumed and req_id in self._tier:  # recomputed from scratch: a new sequence over its new blocks
                entry.prompt_tokens = cached.num_computed_tokens[i] + out.num_scheduled_tokens[req_id]
                entry.tier = self._tier.get(req_id, {})
            scheduled.append(entry)
        closed = self._closed + sorted(out.preempted_req_ids or ())
        self._closed = []
        for s in scheduled:
            self._count(s.req_id)
        return StepMetadata([b.block_id for b in self.staging], scheduled, closed)

    def update(self, report: WorkerReport | None) -> None:
        """Applies the workers' block changes: a block no unit holds any more goes back to the pool."""
        if report is None or not report.changes:
            return
        manager, pool = self.manager, self.pool
        assert manager is not None and pool is not None, "changes come from plans, after bind()"
        removed: dict[int, KVCacheBlock] = {}
        placed: set[int] = set()
        for c in report.changes:
            blocks = manager.req_to_blocks.get(c.req_id)
            if blocks is None or c.unit >= len(blocks):
                continue  # finished meanwhile: vLLM freed its blocks
            old = blocks[c.unit]
            if not old.is_null:
                removed[old.block_id] = old
            if c.block >= 0:
                block = pool.blocks[c.block]
                blocks[c.unit] = block
                placed.add(c.block)
            else:
                blocks[c.unit] = pool.null_block
        freed = [b for i, b in removed.items() if i not in placed]
        if freed:
            pool.free_blocks(freed)
        for req_id in {c.req_id for c in report.changes}:
            self._count(req_id)

    def _count(self, req_id: str) -> None:
        blocks: list[KVCacheBlock] = self.manager.req_to_blocks.get(req_id, []) if self.manager else []
        n = sum(1 for b in blocks if not b.is_null)
        self.held[req_id] = n
        self.peak_held[req_id] = max(self.peak_held.get(req_id, 0), n)
