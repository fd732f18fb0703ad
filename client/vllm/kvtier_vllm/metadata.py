"""What the two halves of the connector tell each other each engine step (pickled between
vLLM's scheduler and worker processes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata, KVConnectorWorkerMetadata


@dataclass
class ScheduledRequest:
    req_id: str
    new_blocks: list[int]  # block ids appended to the request's table this step
    num_computed_tokens: int  # before this step
    num_scheduled_tokens: int
    prompt_tokens: int = -1  # >= 0: the request is new (or resumed): open its kvtier sequence
    tier: dict[str, Any] = field(default_factory=dict)  # per-request tier parameters


@dataclass
class StepMetadata(KVConnectorMetadata):
    """Scheduler -> workers."""
    staging_blocks: list[int]  # reserved block ids whose slots in every layer stage host rows
    scheduled: list[ScheduledRequest]
    closed: list[str]  # finished, aborted or preempted: close their sequences


@dataclass
class BlockChange:
    req_id: str
    unit: int  # block index in the request's table
    block: int  # the block that now holds it, or -1: none (its rows moved to host memory or were evicted)


@dataclass
class WorkerReport(KVConnectorWorkerMetadata):
    """Workers -> scheduler: blocks the executed plans freed or reused."""
    changes: list[BlockChange] = field(default_factory=list)

    def aggregate(self, other: KVConnectorWorkerMetadata) -> KVConnectorWorkerMetadata:
        # Tensor-parallel workers execute the same plans; one rank's report stands for all.
        return self if self.changes else other
