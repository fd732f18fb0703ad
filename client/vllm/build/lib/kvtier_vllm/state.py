"""The worker half of the connector in this process, for the attention backend to find."""

from __future__ import annotations

_worker = None


def set_worker(worker) -> None:
    global _worker
    _worker = worker


def worker():
    return _worker
