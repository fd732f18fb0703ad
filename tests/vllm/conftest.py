"""Fixtures of the vLLM tests: a real kvtierd (tests/python/kvtierd_process.py), the packaged model
as a Hugging Face directory (made by scripts/vllm-env), and `run_engine` (engine.py), which runs one
vLLM engine in a child process on a job and returns its JSON result."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))

from engine import prompts, run_engine  # noqa: E402,F401 (the tests' imports)
from kvtierd_process import Daemon  # noqa: E402,F401 (also the tests' import)
from skip_guard import pytest_runtest_logreport, pytest_sessionfinish  # noqa: E402,F401 (hooks)

BUILD = Path(os.environ.get("KVTIER_BUILD_DIR", HERE.parents[1] / "build"))


@pytest.fixture
def daemon():
    with Daemon() as d:
        yield d


@pytest.fixture(scope="session")
def model_dir() -> str:
    path = BUILD / "smollm2-hf"
    if not (path / "config.json").exists():
        pytest.fail(f"{path} is missing: scripts/vllm-env {BUILD} makes it")
    return str(path)
