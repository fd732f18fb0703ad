"""kvtier's part of vLLM's ``kv_transfer_config``: ``kv_connector_extra_config`` keys, checked once
at start-up (a wrong key or value is a clear error before any request runs).

Tier parameters are in tokens as everywhere in kvtier; in vLLM the unit kvtier tiers is one KV
block (``block_size`` tokens, one row per layer and KV head), which the worker tells kvtierd
(``tokens_per_position``): kvtierd rounds sink and window, given or its own defaults, up to whole
blocks. Per request, ``SamplingParams(extra_args={"kvtier": {...}})`` overrides the tier
parameters (same names) for that request.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

TIER_KEYS = {"hbm_ratio": float, "evict_ratio": float, "sink_tokens": int, "window_tokens": int, "interval": int,
             "seed": int}


class ConfigError(ValueError):
    """A kv_connector_extra_config or per-request kvtier parameter kvtier cannot use."""


@dataclass
class KvtierConfig:
    socket: str | None = None  # kvtierd's socket (None: $KVTIER_SOCKET, else /run/kvtier/kvtierd.sock)
    staging_blocks: int = 0  # blocks reserved for staging host rows (0: enough for max_num_seqs full chains)
    sync_ms: int = 0  # > 0: wait for kvtierd after each step (deterministic plan timing; tests)
    # True: kvtier's requests decode with libkvtier's attention where the keys live (Client.attend:
    # vLLM's blocks and the host rows, one softmax, the scores from it); nothing staged, no staging
    # blocks. Not bit-identical to vLLM's kernel (another summation order); False: staged, exact.
    host_attention: bool = False
    # Defaults for every request. None here or per request: the daemon's defaults; any: the others
    # are libkvtier's (kvtier_sequence_options_init), not the daemon's.
    tier: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_extra(cls, extra: dict[str, Any]) -> KvtierConfig:
        own = {f.name for f in fields(cls)} - {"tier"}
        unknown = set(extra) - own - set(TIER_KEYS)
        if unknown:
            raise ConfigError(f"kvtier: unknown kv_connector_extra_config key(s) {sorted(unknown)}; "
                              f"known: {sorted(own | set(TIER_KEYS))}")
        host = extra.get("host_attention", False)
        if not isinstance(host, bool):
            raise ConfigError(f"kvtier: host_attention must be true or false, got {host!r}")
        config = cls(socket=extra.get("socket"), staging_blocks=_int(extra, "staging_blocks", 0),
                     sync_ms=_int(extra, "sync_ms", 0), host_attention=host,
                     tier=tier_params({k: v for k, v in extra.items() if k in TIER_KEYS}))
        if host and config.staging_blocks:
            raise ConfigError("kvtier: staging_blocks has no use with host_attention (nothing is staged)")
        return config


def _int(d: dict[str, Any], key: str, default: int) -> int:
    value = d.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"kvtier: {key} must be a non-negative integer, got {value!r}")
    return value


def tier_params(raw: Any) -> dict[str, Any]:
    """Checked tier parameters (the kvtier.Client.open_sequence keywords they map to)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"kvtier: tier parameters must be a dict, got {type(raw).__name__}")
    out = {}
    for key, value in raw.items():
        kind = TIER_KEYS.get(key)
        if kind is None:
            raise ConfigError(f"kvtier: unknown tier parameter {key!r}; known: {sorted(TIER_KEYS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
            raise ConfigError(f"kvtier: {key} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
        out[key] = kind(value)
    for key in ("hbm_ratio", "evict_ratio"):
        if key in out and not 0.0 <= out[key] <= 1.0:
            raise ConfigError(f"kvtier: {key} must lie in [0, 1], got {out[key]}")
    return out

