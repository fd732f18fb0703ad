"""``KvtierConnector``: vLLM's KV connector API (v1) as kvtier's plumbing. It is not a prefix
cache (no external tokens are ever matched); it carries requests, block ids and block changes
between vLLM's scheduler and its workers, and binds the worker half for the attention backend."""

from __future__ import annotations

from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, KVConnectorRole

from . import state
from .config import KvtierConfig
from .scheduler_side import SchedulerSide
from .worker_side import WorkerSide


class KvtierConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config, role, kv_cache_config=None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        config = KvtierConfig.from_extra(self._kv_transfer_config.kv_connector_extra_config)
        if role == KVConnectorRole.SCHEDULER:
            self.scheduler = SchedulerSide(config, vllm_config)
        else:
            self.worker = WorkerSide(config)
            state.set_worker(self.worker)

    # ---- worker side -------------------------------------------------------------------------

    def register_kv_caches(self, kv_caches) -> None:
        self.worker.register(kv_caches)

    def bind_connector_metadata(self, connector_metadata) -> None:
        super().bind_connector_metadata(connector_metadata)
        self.worker.begin_step(connector_metadata)

    def start_load_kv(self, forward_context, **kwargs: Any) -> None:
        pass  # plans run in bind_connector_metadata, before the forward; staging per layer in attention

    def wait_for_layer_load(self, layer_name: str) -> None:
        pass

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs: Any) -> None:
        pass

    def wait_for_save(self) -> None:
        pass

    def build_connector_worker_meta(self):
        return self.worker.report()

    def shutdown(self) -> None:
        if hasattr(self, "worker"):
            self.worker.shutdown()

    # ---- scheduler side ----------------------------------------------------------------------

    def bind_kv_cache_manager(self, kv_cache_manager) -> None:
        super().bind_kv_cache_manager(kv_cache_manager)
        self.scheduler.bind(kv_cache_manager)

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        pass

    def on_new_request(self, request) -> None:
        self.scheduler.on_new_request(request)

    def build_connector_meta(self, scheduler_output):
        return self.scheduler.build_meta(scheduler_output)

    def update_connector_output(self, connector_output) -> None:
        self.scheduler.update(connector_output.kv_connector_worker_meta)

    def has_pending_push_work(self) -> bool:
        # Keeps the engine stepping until the workers have closed finished requests' sequences.
        return self.scheduler.has_closing()

    def request_finished(self, request, block_ids):
        self.scheduler.request_finished(request)
        return False, None
