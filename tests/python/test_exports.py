"""Every function libkvtier exports is reachable from Python, or listed here as C-only with the
reason. Reads the export table of the built libkvtier.so (nm -D), the extension's sources and
kvtier.hpp, the C++ layer the extension is built on: a function is reachable when the extension
calls it, or calls the kvtier.hpp method that does."""

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


def hpp_uses() -> dict[str, set[str]]:
    """The C functions behind each use of kvtier.hpp: a Client method called as `.name(`, and an
    owning pointer type named as itself (its deleter's _free)."""
    uses: dict[str, set[str]] = {}
    deleters: dict[str, set[str]] = {}
    current = None
    for line in (REPO / "client" / "include" / "kvtier" / "kvtier.hpp").read_text().splitlines():
        code = line.split("//")[0]
        if (d := re.match(r"struct (\w+Deleter)\b", code)):
            current = d.group(1)
        elif (alias := re.match(r"using (\w+) = std::unique_ptr<\w+, (\w+)>", code)):
            uses[rf"\b{alias.group(1)}\b"] = deleters.get(alias.group(2), set())
            current = None
        elif (m := re.match(r"  (?:[\w:<>*&]+ )+(?!operator)(\w+)\(", code)):
            current = rf"\.{m.group(1)}\("
        if current is not None:
            found = set(re.findall(r"\bkvtier_\w+(?=\()", code))
            (deleters if current.endswith("Deleter") else uses).setdefault(current, set()).update(found)
    return uses


def test_every_exported_function_is_reachable_from_python_or_listed_as_c_only():
    exported = exported_functions()
    assert "kvtier_client_connect" in exported and "kvtier_daemon_events_get" in exported
    sources = "\n".join(p.read_text() for p in (REPO / "client" / "python" / "src").glob("*.[ch]pp"))
    called = set(re.findall(r"\bkvtier_\w+(?=\()", sources))
    for use, functions in hpp_uses().items():
        if re.search(use, sources):
            called |= functions
    unreachable = sorted(f for f in exported if f not in called and f not in C_ONLY)
    assert not unreachable, f"exported but neither called by the Python extension nor listed as C-only: {unreachable}"
    stale = sorted(f for f in C_ONLY if f not in exported)
    assert not stale, f"listed as C-only but not exported: {stale}"
