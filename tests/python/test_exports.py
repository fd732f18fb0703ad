"""Every function libkvtier exports is reachable from Python, or listed here as C-only with the
reason. Reads the export table of the built libkvtier.so (nm -D) and the extension's sources."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

C_ONLY = {
    "kvtier_sequence_open": "the short form of kvtier_sequence_open_with, which Client.open_sequence calls",
    "kvtier_score_sums_push": "for engines that sum scores on the device (kernels/cuda ScoreAccumulator, C++); "
    "Python pushes each step's scores and libkvtier sums them",
    "kvtier_sequence_completes_interval": "pairs with kvtier_score_sums_push (device-side score sums)",
}


def exported_functions() -> set[str]:
    library = Path(os.environ.get("KVTIER_BUILD_DIR", REPO / "build")) / "client" / "libkvtier.so"
    table = subprocess.run(["nm", "-D", "--defined-only", str(library)], check=True, capture_output=True, text=True)
    return {line.split()[-1] for line in table.stdout.splitlines() if line.split()[-2:-1] == ["T"]}


def test_every_exported_function_is_reachable_from_python_or_listed_as_c_only():
    exported = exported_functions()
    assert "kvtier_client_connect" in exported and "kvtier_daemon_events_get" in exported
    sources = "\n".join(p.read_text() for p in (REPO / "client" / "python" / "src").glob("*.cpp"))
    called = set(re.findall(r"\bkvtier_\w+(?=\()", sources))
    unreachable = sorted(f for f in exported if f not in called and f not in C_ONLY)
    assert not unreachable, f"exported but neither called by the Python extension nor listed as C-only: {unreachable}"
    stale = sorted(f for f in C_ONLY if f not in exported or f in called)
    assert not stale, f"listed as C-only but not exported, or called from Python after all: {stale}"
