"""``KvtierConnector``: vLLM's KV connector API (v1) as kvtier's plumbing. It is not a prefix
cache (no external tokens are ever matched); it carries requests, block ids and block changes
between vLLM's scheduler and its workers, and binds the worker half for the attention backend."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorWorkerMetadata,
)

from . import state
from .config import KvtierConfig
from .metadata import StepMetadata, WorkerReport
from .scheduler_side import SchedulerSide
from .worker_side import WorkerSide

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks, KVCacheManager
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request


class KvtierConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        config = KvtierConfig.from_extra(self._kv_transfer_config.kv_connector_extra_config)
        if role == KVConnectorRole.SCHEDULER:
            self.scheduler = SchedulerSide(config, vllm_config)
        else:
            self.worker = WorkerSide(config)
            state.set_worker(self.worker)

    # ---- worker side -------------------------------------------------------------------------

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        self.worker.register(kv_caches)

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        super().bind_connector_metadata(connector_metadata)
        assert isinstance(connector_metadata, StepMetadata)  # build_connector_meta's
        self.worker.begin_step(connector_metadata)

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        pass  # plans run in bind_connector_metadata, before the forward; staging per layer in attention

    def wait_for_layer_load(self, layer_name: str) -> None:
        pass

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: AttentionMetadata,
                      **kwargs: Any) -> None:
        pass

    def wait_for_save(self) -> None:
        pass

    def build_connector_worker_meta(self) -> KVConnectorWorkerMetadata | None:
        return self.worker.report()

    def shutdown(self) -> None:
        if hasattr(self, "worker"):
            self.worker.shutdown()

    # ---- scheduler side ----------------------------------------------------------------------

    def bind_kv_cache_manager(self, kv_cache_manager: KVCacheManager) -> None:
        super().bind_kv_cache_manager(kv_cache_manager)
        self.scheduler.bind(kv_cache_manager)

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        return 0, False

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        pass

    def on_new_request(self, request: Request) -> None:
        self.scheduler.on_new_request(request)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        return self.scheduler.build_meta(scheduler_output)

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        report = connector_output.kv_connector_worker_meta
        assert report is None or isinstance(report, WorkerReport)  # build_connector_worker_meta's
        self.scheduler.update(report)

    def has_pending_push_work(self) -> bool:
        # Keeps the engine stepping until the workers have closed finished requests' sequences.
        return self.scheduler.has_closing()

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        self.scheduler.request_finished(request)
        return False, None
