"""kvtier for vLLM: a request's KV blocks of low importance move to host memory (kvtierd's pool)
and come back per layer when attention reads them, so the request holds fewer of vLLM's KV
blocks with the same outputs. Enabled per engine by
``kv_transfer_config={"kv_connector": "KvtierConnector", "kv_role": "kv_both", ...}``;
installed as a ``vllm.general_plugins`` entry point, so every vLLM process registers it."""

from __future__ import annotations

import os

CONNECTOR = "KvtierConnector"
# Host attention runs on the calling thread: vLLM's OpenMP threads hold every core (a libkvtier
# worker would compete with them as they spin between parallel regions).
os.environ.setdefault("KVTIER_KERNEL_THREADS", "1")


def register() -> None:
    """The entry point: the connector by name, and CPU_ATTN's kvtier-aware implementation (which
    is vLLM's own wherever no kvtier connector runs)."""
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    if CONNECTOR not in KVConnectorFactory._registry:
        KVConnectorFactory.register_connector(CONNECTOR, "kvtier_vllm.connector", CONNECTOR)
    register_backend(AttentionBackendEnum.CPU_ATTN, "kvtier_vllm.attention.KvtierCPUAttentionBackend")
