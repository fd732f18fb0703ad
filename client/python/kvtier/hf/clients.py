"""One kvtier client (connection, registered geometry, pool) per model, shared by its caches.

A TieredCache made and closed per request must leave nothing behind: its sequences close with
it, and the client and its pool stay for the next cache of the same model instead of one pool per
cache. Plans arrive on the client's one ring for every sequence; :class:`PlanRouter` hands each
cache the plans of its own sequences and acknowledges as not applied those of sequences no cache
holds any more (the daemon rolls them back).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._kvtier import Client, Plan
from .store import DTYPES

if TYPE_CHECKING:
    from transformers.modeling_utils import PreTrainedModel


class PlanRouter:
    """A client plus the handler of each open sequence's plans (one thread at a time, like the
    client). Plans run as soon as any cache of the client drains the ring, whichever cache's
    forward is next: the daemon keeps one plan outstanding per client, so a plan left waiting for
    an idle cache would hold back every other cache's plans."""

    def __init__(self, client: Client, owned: bool) -> None:
        self.client = client
        self.owned = owned  # closed by close(), else the caller's
        self._handlers: dict[int, Callable[[Plan], None]] = {}

    def open(self, prompt_length: int, handler: Callable[[Plan], None], **params: Any) -> int:
        """Opens a sequence whose plans `handler` executes and acknowledges."""
        sequence = self.client.open_sequence(prompt_length, **params)
        self._handlers[sequence] = handler
        return sequence

    def close_sequence(self, sequence: int) -> None:
        self._handlers.pop(sequence, None)
        self.client.close_sequence(sequence)

    def drain(self) -> None:
        """Runs every plan that has arrived (between forwards: no cache's tensors are in use)."""
        while (plan := self.client.poll_plan(0)) is not None:
            handler = self._handlers.get(plan.sequence)
            if handler is None:
                self.client.ack_plan(plan.epoch, applied=False)  # a sequence closed meanwhile
            else:
                handler(plan)

    def close(self) -> None:
        if self.owned and not self.client.closed:
            self.client.close()


_shared: weakref.WeakKeyDictionary[PreTrainedModel, dict[str | None, PlanRouter]] = weakref.WeakKeyDictionary()


def geometry(model: PreTrainedModel) -> tuple[int, int, int]:
    config = model.config.get_text_config()
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return config.num_hidden_layers, kv_heads, head_dim


def shared_router(model: PreTrainedModel, socket_path: str | None, name: str | None, pool_tokens: int,
                  int8_pool_tokens: int = 0) -> PlanRouter:
    """The model's client for `socket_path`: connected and registered on first use (with
    `pool_tokens` DDR rows and `int8_pool_tokens` int8 rows), closed with the model or by
    :func:`release_model`."""
    per_model = _shared.setdefault(model, {})
    router = per_model.get(socket_path)
    if router is None or router.client.closed:
        if model.dtype not in DTYPES:
            raise ValueError(f"unsupported KV dtype {model.dtype}")
        client = Client(socket_path, name)
        layers, kv_heads, head_dim = geometry(model)
        config = model.config.get_text_config()
        model_name = os.path.basename(str(getattr(config, "_name_or_path", "") or ""))[:63] or None
        client.register_model(layers, kv_heads, head_dim, DTYPES[model.dtype], pool_tokens, model_name,
                              int8_pool_tokens=int8_pool_tokens)
        router = per_model[socket_path] = PlanRouter(client, owned=True)
        weakref.finalize(model, router.close)
    return router


def release_model(model: PreTrainedModel) -> None:
    """Disconnects the clients the model's caches shared (the daemon frees their pools)."""
    for router in _shared.pop(model, {}).values():
        router.close()
