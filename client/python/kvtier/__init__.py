"""kvtier: Python binding of libkvtier, the client library of the kvtier daemon.

kvtier moves low-importance KV-cache tokens of a running LLM between the engine's own cache (T0),
the daemon's host DDR pool (T1, exact), its int8 pool (T2, lossy, off unless a sequence asks for
it and the model registered ``int8_pool_tokens``) and nowhere (T3, evicted). An engine connects,
registers its KV geometry, opens one sequence per request and, every decode step, executes the
plans the daemon sends, stages each layer's T1 and T2 rows (T2 dequantized) before that layer's
attention (stage_layer, or stage_prefetch / stage_wait to overlap the next layer's staging with
this one's compute) and pushes per-token attention scores. A sequence can be handed to another
engine process (export_sequence / adopt_sequence)::

    import kvtier
    with kvtier.Client("/run/kvtier/kvtierd.sock", name="my-engine") as client:
        client.register_model(num_layers=30, num_kv_heads=3, head_dim=64,
                              dtype=kvtier.DType.F32, pool_tokens=4096)
        seq = client.open_sequence(prompt_length=42, hbm_ratio=0.5, evict_ratio=0.0)
        client.attach_cache(seq, k_base=[...], v_base=[...], ...)
        ...

:mod:`kvtier.hf` (needs torch and transformers) provides :class:`kvtier.hf.TieredCache`, a
transformers ``Cache`` that does all of this inside ``model.generate``.

Every failed call raises a :class:`KvtierError` subclass with ``.status``, ``.status_name`` and
``.message``. See ``docs/python.md`` in the source tree.
"""

from __future__ import annotations

from ._errors import (
    BadStateError,
    InternalError,
    InvalidArgumentError,
    KvtierError,
    KvtierOSError,
    KvtierTimeoutError,
    LimitExceededError,
    NotFoundError,
    PermissionDeniedError,
    ProtocolError,
    UnavailableError,
    VersionMismatchError,
)
from ._kvtier import (
    NO_SLOT,
    Adopted,
    Backend,
    Backpressure,
    BufferKind,
    Client,
    ClientInfo,
    Counters,
    DaemonEvents,
    DaemonStatus,
    DType,
    Event,
    EventKind,
    EvictionMode,
    Feature,
    Handoff,
    Move,
    Placement,
    Plan,
    Policy,
    Role,
    SequenceInfo,
    StagedLayer,
    StagingOrder,
    Status,
    Tier,
    Versions,
    block_scores,
    default_socket_path,
    status_string,
)
from ._rows import copy_rows

__version__ = "0.1.0"


def connect(socket_path: str | None = None, name: str | None = None, role: Role = Role.ENGINE) -> Client:
    """Connects to kvtierd (same as ``Client(socket_path, name, role)``)."""
    return Client(socket_path, name, role)


__all__ = [
    "NO_SLOT",
    "Adopted",
    "Backend",
    "Backpressure",
    "BadStateError",
    "BufferKind",
    "Client",
    "ClientInfo",
    "Counters",
    "DType",
    "DaemonEvents",
    "DaemonStatus",
    "Event",
    "EventKind",
    "EvictionMode",
    "Feature",
    "Handoff",
    "InternalError",
    "InvalidArgumentError",
    "KvtierError",
    "KvtierOSError",
    "KvtierTimeoutError",
    "LimitExceededError",
    "Move",
    "NotFoundError",
    "PermissionDeniedError",
    "Placement",
    "Plan",
    "Policy",
    "ProtocolError",
    "Role",
    "SequenceInfo",
    "StagedLayer",
    "StagingOrder",
    "Status",
    "Tier",
    "UnavailableError",
    "Versions",
    "VersionMismatchError",
    "__version__",
    "block_scores",
    "connect",
    "copy_rows",
    "default_socket_path",
    "status_string",
]
