"""The server command docs/vllm.md shows, run as a new user runs it: the command is read from the
page itself (so the page and the test cannot part), kvtierd runs on its defaults, and one
reasoning-length request streams over vLLM's OpenAI API. The documented configuration
(``{"hbm_ratio":0.3}`` and nothing else) must tier: kvtierd sends plans for the request and
the plugin applies them (``kvtierctl status``), which it did not while the daemon took its
128-token default window as 128 blocks.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from conftest import BUILD, prompts

REPO = Path(__file__).resolve().parents[2]
URL = "http://127.0.0.1:8000"  # the server's default port: the documented command names none


def shown_server_command(page: str, heading: str) -> list[str]:
    """The vLLM server command of the first shell block after `heading` in the page."""
    text = (REPO / page).read_text()
    block = text.split(heading, 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    (command,) = [c for c in block.replace("\\\n", " ").splitlines() if "api_server" in c]
    return shlex.split(command)


def documented_server() -> tuple[dict[str, str], list[str]]:
    """docs/vllm.md's server command (README.md shows the same one): its leading NAME=value
    environment and its argv, `build/` paths in BUILD."""
    argv = shown_server_command("docs/vllm.md", "## The two commands")
    assert argv == shown_server_command("README.md", "## vLLM"), "README.md and docs/vllm.md show different commands"
    env = {}
    while "=" in argv[0]:
        name, value = argv.pop(0).split("=", 1)
        env[name] = value
    return env, [str(BUILD / a.removeprefix("build/")) if a.startswith("build/") else a for a in argv]


def wait_until_serving(server: subprocess.Popen, log: Path) -> None:
    """Polls /health until the server answers; a server that exits first fails the test. The
    bound only keeps a hung start from hanging the run."""
    for _ in range(1200):
        assert server.poll() is None, f"the documented server exited ({server.returncode}):\n{errors(log)}"
        try:
            with urllib.request.urlopen(f"{URL}/health", timeout=5):
                return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.5)
    raise AssertionError(f"the documented server did not start:\n{errors(log)}")


def errors(log: Path) -> str:
    """The server log's error lines (the root cause sits among them, not at the end)."""
    lines = log.read_text(errors="replace").splitlines()
    return "\n".join([l for l in lines if "Error" in l or "ERROR" in l][-40:] + lines[-20:])


def vllm_client_counters(socket: str) -> dict:
    out = subprocess.run([str(BUILD / "client" / "cli" / "kvtierctl"), "--socket", socket, "status", "--json"],
                         check=True, capture_output=True, text=True).stdout
    (worker,) = [c for c in json.loads(out)["clients"] if c["name"] == "vllm"]  # the plugin's
    return worker["counters"]


def test_the_documented_server_configuration_tiers_a_reasoning_length_request(daemon, model_dir, tmp_path):
    """One 700-token request, greedy, streamed: while it runs, kvtierd sends plans that the
    plugin acknowledges (applies) and none fails. The request decodes long enough for the
    default 128-token window (4 blocks of 32) to leave blocks to move: the first plans come
    around step 200, so the test stops reading once a plan was acknowledged."""
    shown_env, argv = documented_server()
    log = tmp_path / "server.log"
    env = dict(os.environ, **shown_env, KVTIER_SOCKET=daemon.socket)  # the documented way to name kvtierd's socket
    with open(log, "wb") as out:
        server = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_until_serving(server, log)
        body = json.dumps({"model": argv[argv.index("--model") + 1],
                           "prompt": prompts(1)[0], "max_tokens": 700, "temperature": 0.0,
                           "ignore_eos": True, "stream": True}).encode()
        request = urllib.request.Request(f"{URL}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        counters, chunks = {}, 0
        with urllib.request.urlopen(request) as stream:
            for line in stream:
                if not line.startswith(b"data: {"):
                    continue
                chunks += 1
                if chunks % 16 == 0:
                    counters = vllm_client_counters(daemon.socket)
                    if counters["plans_acked"] > 0:
                        break
        if counters.get("plans_acked", 0) == 0:
            counters = vllm_client_counters(daemon.socket)
        assert counters["plans_acked"] > 0 and counters["moves_sent"] > 0, (chunks, counters)
        assert counters["plans_failed"] == 0, counters
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def test_the_documented_benchmark_command_runs_at_toy_sizes(tmp_path):
    """docs/vllm.md's benchmark command, read from the page, at toy sizes (16 tokens a request, 64
    for the long one, 2 requests in a fixed cache): every engine run completes, every ratio prints
    and the JSON is written. Its figures are the page's, from the full-size run."""
    text = (REPO / "docs" / "vllm.md").read_text()
    (command,) = [c for c in text.split("```sh") if "tests/bench/vllm_bench.py" in c.split("```")[0]]
    argv = shlex.split(command.split("```")[0].strip())
    assert argv[1:4] == ["tests/bench/vllm_bench.py", "--build", "build"] and argv[4] == "--json", argv
    out = tmp_path / "vllm-bench.json"
    done = subprocess.run([str(BUILD / "vllm-venv" / "bin" / "python"), str(REPO / argv[1]), "--build", str(BUILD),
                           "--json", str(out), "--tokens", "16", "--long-tokens", "64", "--requests", "2",
                           "--num-blocks", "80"], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    for ratio in ("vllm_tokens_per_s_beta0.3", "vllm_blocks_host0.3", "vllm_running_mean_beta0.3"):
        assert f"ratio {ratio} " in done.stdout, done.stdout[-4000:]
    assert json.loads(out.read_text())["results"]["memory"]["vanilla"]["tokens"]
