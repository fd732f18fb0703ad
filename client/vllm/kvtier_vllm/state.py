"""The worker half of the connector in this process, for the attention backend to find."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .worker_side import WorkerSide

_worker: WorkerSide | None = None


def set_worker(worker: WorkerSide) -> None:
    global _worker
    _worker = worker


def worker() -> WorkerSide | None:
    return _worker
