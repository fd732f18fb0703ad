"""pytest fixtures: a real kvtierd per test in its own runtime directory and shm prefix
(kvtierd_process.Daemon), so tests never share a daemon and may run in any order."""

from __future__ import annotations

from typing import Iterator

import pytest

from kvtierd_process import Daemon
from skip_guard import pytest_runtest_logreport, pytest_sessionfinish  # noqa: F401 (hooks)


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    d = Daemon()
    try:
        yield d
    finally:
        d.stop()
