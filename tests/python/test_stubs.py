"""The committed type stubs (client/python/kvtier/_kvtier.pyi) match the built extension."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

STUB = Path(__file__).resolve().parents[2] / "client" / "python" / "kvtier" / "_kvtier.pyi"


def test_committed_stub_matches_nanobind_stubgen(tmp_path):
    out = tmp_path / "_kvtier.pyi"
    subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "kvtier._kvtier", "-o", str(out)], check=True)
    assert out.read_text() == STUB.read_text(), (
        f"regenerate the stub: python -m nanobind.stubgen -m kvtier._kvtier -o {STUB}")
