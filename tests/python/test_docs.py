"""Every command README.md and docs/ show is run by a test. The shell blocks are read out of the
documents; the cheap ones run here as shown (paths into this build and a private runtime directory
substituted), every other one is mapped to the test or CI stage that runs it, and a command shown
but in neither list fails, so a documented example cannot silently stop working."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import kvtier

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("KVTIER_BUILD_DIR", REPO / "build")).resolve()
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# Commands run elsewhere, by their first words: who runs them as shown.
RUN_ELSEWHERE = {
    "scripts/test": ".ci/run runs the README's test command on a clean clone",
    "scripts/fuzz --seconds": ".ci/run (every target, 20 s each)",
    "scripts/sanitize": ".ci/run",
    "cmake -S . -B build": "scripts/test configures and builds the same tree (RelWithDebInfo)",
    "ctest --test-dir build -R": "scripts/test runs the whole ctest suite, these tests included",
    "scripts/vllm-env build": "tests/python/run and tests/vllm/run make the test command's environment with it",
    "VLLM_CPU_KVCACHE_SPACE=1 build/vllm-venv/bin/python -m vllm.entrypoints.openai.api_server":
        "tests/vllm/test_documented.py reads it from docs/vllm.md and runs it",
    "build/vllm-venv/bin/python tests/bench/vllm_bench.py":
        "tests/vllm/test_documented.py runs it as shown at toy sizes",
    "build/python-venv/bin/python tests/bench/hf_bench.py":
        "test_hf_bench below, at toy sizes in the test command's environment (the same pinned torch, "
        "transformers and model; no matplotlib, so no --plot)",
}
# Run here: test_running_it, test_metrics, test_demo, test_soak_torture, test_soak_tests.
RUN_HERE = ["build/daemon/kvtierd", "build/client/cli/kvtierctl", "curl -s http://127.0.0.1:9464/metrics",
            "scripts/demo", "scripts/soak-torture", "scripts/soak-tests"]
# Shown but run by no test yet, with why: long benchmarks and grids whose figures the documents
# quote, and installs into an environment of the user's own.
NOT_RUN_YET = {
    "build/python-venv/bin/pip install": "the fidelity grid's extra packages",
    "build/python-venv/bin/python tests/fidelity/run_grid.py": "the fidelity grid (hours)",
    "scripts/python-env build --models": "the benchmark environment (the test command uses scripts/vllm-env)",
    "python3 -m venv .venv": "an install into the user's own environment",
    "pip install": "an install into the user's own environment",
}


def shown_commands() -> list[tuple[str, str]]:
    """(document, command) for every command in the documents' ```sh blocks: continuation lines
    joined, comments dropped."""
    out = []
    for doc in DOCUMENTS:
        for block in re.findall(r"```sh\n(.*?)```", doc.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                command = re.sub(r"\s+#.*$", "", line).strip()
                if command and not command.startswith("#"):
                    out.append((doc.name, " ".join(command.split())))
    return out


def test_every_shown_command_is_run_by_a_test_or_listed():
    unmapped = [
        (doc, command) for doc, command in shown_commands()
        if not any(command.startswith(p) for p in [*RUN_ELSEWHERE, *RUN_HERE, *NOT_RUN_YET])
    ]
    assert not unmapped, f"commands the documents show that no test runs: {unmapped}"
    shown = [command for _, command in shown_commands()]
    stale = [p for p in [*RUN_ELSEWHERE, *RUN_HERE, *NOT_RUN_YET] if not any(c.startswith(p) for c in shown)]
    assert not stale, f"listed but no longer shown in the documents: {stale}"


def block_after(document: str, heading: str) -> list[str]:
    """The commands of the first ```sh block after `heading` in `document`."""
    text = (REPO / document).read_text()
    block = re.search(r"```sh\n(.*?)```", text[text.index(heading):], re.S)
    assert block, f"{document}: no shell block after {heading!r}"
    return [c for c in (re.sub(r"\s+#.*$", "", line).strip() for line in block.group(1).splitlines()) if c]


def as_run_here(command: str, run_dir: Path) -> str:
    """The command with this build's directory and a private runtime directory."""
    return command.replace("build/", f"{BUILD}/").replace("/tmp/kvtier", str(run_dir))


@pytest.fixture
def run_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="kvtier-docs-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def start_daemon(command: str, run_dir: Path) -> subprocess.Popen[bytes]:
    """The documented kvtierd command (with a private shm prefix), once it answers."""
    argv = as_run_here(command, run_dir).split() + ["--set", f"daemon.shm_prefix=docs{os.getpid()}"]
    with open(run_dir / "kvtierd.log", "wb") as log:  # the child keeps its own descriptor
        daemon = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
    socket = run_dir / "kvtierd.sock"
    while not socket.exists():
        assert daemon.poll() is None, (run_dir / "kvtierd.log").read_text()
        time.sleep(0.05)
    return daemon


def stop(daemon: subprocess.Popen[bytes]) -> None:
    daemon.terminate()
    assert daemon.wait(timeout=60) == 0


def test_running_it(run_dir: Path):
    # README "Running it": kvtierd on the shipped configuration, then each kvtierctl command as
    # shown, with three engine clients connected so that client 3's sequence 1 exists.
    commands = block_after("README.md", "## Running it")
    assert commands[0].startswith("cmake -S . -B build")  # run by scripts/test
    daemon = start_daemon(commands[1], run_dir)
    clients = [kvtier.Client(str(run_dir / "kvtierd.sock"), f"engine{i}") for i in range(3)]
    try:
        for client in clients:
            client.register_model(2, 2, 4, kvtier.DType.F32, 64)
        assert clients[2].versions().client_id == 3
        sequence = clients[2].open_sequence(4, interval=1)
        assert sequence == 1
        clients[2].push_scores(sequence, 0, np.ones(8, dtype=np.float32))
        clients[2].step_end(sequence, 0)
        assert clients[2].sync(60_000)
        for command in commands[2:]:
            done = subprocess.run(as_run_here(command, run_dir).split(), input="q\n", capture_output=True, text=True,
                                  timeout=120)
            assert done.returncode == 0, f"{command}: {done.stderr}"
            assert done.stdout.strip(), f"{command}: printed nothing"
    finally:
        for client in clients:
            client.close()
        stop(daemon)


def test_metrics(run_dir: Path):
    # README "Seeing what the daemon does": kvtierd serving Prometheus metrics, and the curl pipeline as shown.
    serve, scrape = block_after("README.md", "## Seeing what the daemon does")
    daemon = start_daemon(serve, run_dir)
    try:
        address = serve.split("metrics.listen=")[1].split()[0]
        urllib.request.urlopen(f"http://{address}/metrics", timeout=60).read()  # the listener is up
        done = subprocess.run(["bash", "-o", "pipefail", "-c", scrape], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "kvtier_tokens" in done.stdout
    finally:
        stop(daemon)


def test_demo():
    # README's main-job command on this build, its real-model part (scripts/hf-demo) included, in
    # this environment (the pinned torch, transformers and model scripts/python-env would install;
    # KVTIER_DEMO_PYTHON is the demo's own switch for that).
    env = dict(os.environ, KVTIER_BUILD_DIR=str(BUILD), KVTIER_BUILD_TYPE="RelWithDebInfo",
               KVTIER_DEMO_PYTHON=sys.executable, KVTIER_DEMO_PLOT=str(BUILD / "docs-demo-occupancy.svg"))
    done = subprocess.run([str(REPO / "scripts" / "demo")], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "no client lost a token it did not mean to" in done.stdout
    assert "SmolLM2-135M through transformers and kvtier.hf" in done.stdout


def test_soak_torture():
    # README "When kvtierd dies or restarts" shows the 1,000-kill soak; CI's ctest runs the same test with 50 kills, and
    # this runs the script itself with 5.
    done = subprocess.run([str(REPO / "scripts" / "soak-torture"), "5"], env=dict(os.environ, KVTIER_BUILD_DIR=str(BUILD)),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "PASSED" in done.stdout


def test_soak_tests():
    # README "Tests that do not depend on timing" shows ten runs of the whole suite under stress-ng;
    # this runs the script with --stress once over the layout tests (scripts/test runs them all).
    done = subprocess.run([str(REPO / "scripts" / "soak-tests"), "1", "--stress", "--build", str(BUILD), "--", "-L",
                           "layout"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "soak-tests: 1 runs, 0 failed" in done.stdout and "under stress-ng" in done.stdout


def test_hf_bench(tmp_path: Path):
    # docs/hf-bench.md's benchmark at toy sizes: every cache runs, the ratios print, the JSON parses.
    out = tmp_path / "hf-bench.json"
    done = subprocess.run([sys.executable, str(REPO / "tests" / "bench" / "hf_bench.py"), "--build", str(BUILD),
                           "--new-tokens", "16", "--rounds", "1", "--betas", "0.3", "--host-betas", "0.3",
                           "--threads", "2", "--json", str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "ratio hf_kv_bytes_beta0.3" in done.stdout and "ratio hf_kv_bytes_host0.3" in done.stdout
    assert json.loads(out.read_text())
