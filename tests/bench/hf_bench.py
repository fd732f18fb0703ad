#!/usr/bin/env python3
"""kvtier.hf against what a transformers user would pick instead, in one run on the same prompt
and model (SmolLM2-135M-Instruct from its PyPI package; tests/models/smollm2.py):

  dynamic      transformers' DynamicCache (the baseline of every ratio)
  offloading   DynamicCache(offloading=True): every layer to the CPU and back every step (needs
               CUDA; on a CPU-only machine its bytes moved are computed from that mechanism and its
               speed is not measured, said so in the output)
  tiered β     kvtier.hf.TieredCache at hbm_ratio β (r = 0: bit-identical outputs), through a real
               kvtierd, at the paper's k_s 4, k_w 128, Δ 64
  host β       the same with host_attention=True (CPU only: host rows attended in the pool and
               merged by log-sum-exp, exact up to rounding; kvtier.hf.split)

For each: tokens per second of the whole generate() (ratio to dynamic), KV bytes allocated (the
tensors' storage bytes: DynamicCache's at the end of the chain, TieredCache's peak including one
layer's assembly and staging; on CUDA also the torch.cuda.max_memory_allocated rise), bytes moved
between host and the model's tensors per decode step, and whether the tokens equal dynamic's.
Prints `ratio NAME VALUE` lines and writes --json. Rounds alternate the order of the caches.

  build/python-venv/bin/python tests/bench/hf_bench.py --build build [--new-tokens 1024] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "models"))
sys.path.insert(0, str(ROOT / "tests" / "python"))

GOALS = {f"{what}_{kind}0.3": goal for kind in ("beta", "host")
         for what, goal in (("kv_bytes", 0.40), ("step_time", 1.10), ("moved_vs_offloading", 0.10))}


def run_one(model, prompt, new: int, kind: str, socket: str, beta: float | None, device: str) -> dict:
    import torch
    from transformers import DynamicCache

    from kvtier.hf import TieredCache, cache_bytes

    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated() if cuda else 0
    tiered = None
    if kind in ("tiered", "host"):
        tiered = TieredCache(model, socket_path=socket, max_length=prompt.shape[1] + new, hbm_ratio=beta,
                             evict_ratio=0.0, eos_token_id=[],  # generate() runs past EOS here
                             host_attention=kind == "host")
        cache = tiered
    else:
        cache = DynamicCache(config=model.config, offloading=kind == "offloading")
    started = time.perf_counter()
    with torch.no_grad():
        out = model.generate(prompt, past_key_values=cache, max_new_tokens=new, min_new_tokens=new,
                             do_sample=False, eos_token_id=None, pad_token_id=0)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    steps = new - 1  # decode forwards after the prefill
    row = {"cache": kind if beta is None else f"{kind} {beta}", "seconds": seconds, "tokens_per_s": new / seconds,
           "tokens": out[0].tolist(), "cuda_peak_bytes": torch.cuda.max_memory_allocated() - base if cuda else None}
    if tiered is not None:
        tiered.close()
        s = tiered.stats
        row.update(kv_bytes=s.peak_kv_bytes, kv_bytes_end=s.kv_bytes, moved_per_step=s.bytes_moved / steps,
                   t0_end=s.tokens_t0, host_end=s.tokens_host, growths=s.storage_growths)
    else:
        row.update(kv_bytes=cache_bytes(cache), kv_bytes_end=cache_bytes(cache), moved_per_step=0.0)
    return row


def offloading_moved_per_step(bytes_at_end: int, prompt: int, new: int) -> float:
    """Every decode step moves every layer's K and V to the CPU and back: 2 × the cache's bytes
    at that step, averaged over the steps (the cache grows by one token per step)."""
    per_token = bytes_at_end / (prompt + new - 1)
    return statistics.mean(2 * per_token * (prompt + t) for t in range(1, new))


def plot(path: Path, med: dict, dyn: dict, offload_moved: float, args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(med)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    bars = [("KV bytes allocated (x dynamic)", [med[n]["kv_bytes"] / dyn["kv_bytes"] for n in names]),
            ("tokens/s (x dynamic)", [med[n]["tokens_per_s"] / dyn["tokens_per_s"] for n in names]),
            ("MB moved per decode step", [(offload_moved if n == "offloading" else med[n]["moved_per_step"]) / 1e6
                                          for n in names] + [offload_moved / 1e6])]
    for ax, (title, values) in zip(axes, bars):
        labels = names + (["offloading\n(computed)"] if "offloading" not in med and "moved" in title else [])
        ax.bar(labels, values[: len(labels)], color="#4a7ab5")
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(f"SmolLM2-135M, {args.attn}, prompt + {args.new_tokens} tokens: kvtier.hf vs transformers' caches",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--new-tokens", type=int, default=1024)
    parser.add_argument("--problem", type=int, default=0)
    parser.add_argument("--betas", default="0.3,0.5", help="TieredCache runs ('' for none)")
    parser.add_argument("--host-betas", default="0.3,0.5", help="host_attention runs (CPU only; '' for none)")
    parser.add_argument("--attn", default="sdpa", help="the model's attention implementation (eager, sdpa, ...)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--json")
    parser.add_argument("--plot", help="write a PNG of the ratios (needs matplotlib)")
    args = parser.parse_args()
    os.environ.setdefault("KVTIER_BUILD_DIR", str(Path(args.build).resolve()))
    import torch

    import smollm2
    from kvtierd_process import Daemon

    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tok = smollm2.load(args.attn)
    model = model.to(device)
    prompt = smollm2.prompts(tok)[args.problem].to(device)
    betas = [float(b) for b in args.betas.split(",") if b]
    host_betas = [float(b) for b in args.host_betas.split(",") if b] if device == "cpu" else []
    kinds = ([("dynamic", None)] + ([("offloading", None)] if device == "cuda" else []) +
             [("tiered", b) for b in betas] + [("host", b) for b in host_betas])
    print(f"hf_bench: {smollm2.DESCRIPTION}, {args.attn}, {device}, prompt {prompt.shape[1]} + {args.new_tokens} "
          f"tokens, {args.rounds} round(s)", flush=True)
    results: dict[str, list[dict]] = {}
    with Daemon() as daemon:
        for r in range(args.rounds):
            for kind, beta in (kinds if r % 2 == 0 else kinds[::-1]):
                row = run_one(model, prompt, args.new_tokens, kind, daemon.socket, beta, device)
                results.setdefault(row["cache"], []).append(row)
                print(f"  round {r + 1} {row['cache']:>12}: {row['tokens_per_s']:.1f} tok/s, KV {row['kv_bytes'] / 1e6:.2f} MB,"
                      f" moved {row['moved_per_step'] / 1e3:.1f} kB/step", flush=True)
    med = {name: {k: statistics.median(r[k] for r in rows) for k in ("seconds", "tokens_per_s", "kv_bytes",
                                                                      "moved_per_step")} for name, rows in results.items()}
    dyn = med["dynamic"]
    reference = results["dynamic"][0]["tokens"]
    if "offloading" in med:
        offload_moved, how = med["offloading"]["moved_per_step"], "measured"
    else:
        offload_moved = offloading_moved_per_step(int(dyn["kv_bytes"]), prompt.shape[1], args.new_tokens)
        how = "computed from its mechanism (needs CUDA to run)"
    print("| cache | tokens/s | vs dynamic | KV bytes allocated | vs dynamic | moved per step | identical |")
    print("|---|---|---|---|---|---|---|")
    ratios = {}
    for name, m in med.items():
        same = all(r["tokens"] == reference for r in results[name])
        moved = offload_moved if name == "offloading" else m["moved_per_step"]
        print(f"| {name} | {m['tokens_per_s']:.1f} | {m['tokens_per_s'] / dyn['tokens_per_s']:.3f} | "
              f"{m['kv_bytes'] / 1e6:.2f} MB | {m['kv_bytes'] / dyn['kv_bytes']:.3f} | {moved / 1e3:.1f} kB | {same} |")
        if name.startswith(("tiered", "host")):
            kind, b = name.split()
            tag = ("beta" if kind == "tiered" else "host") + b
            ratios[f"kv_bytes_{tag}"] = m["kv_bytes"] / dyn["kv_bytes"]
            ratios[f"step_time_{tag}"] = m["seconds"] / dyn["seconds"]
            ratios[f"moved_vs_offloading_{tag}"] = m["moved_per_step"] / offload_moved
    print(f"offloading cache: {offload_moved / 1e6:.2f} MB moved per step, {how}")
    length = prompt.shape[1] + args.new_tokens - 1
    protected = prompt.shape[1] + 4 + 128  # prompt + k_s + k_w: always T0
    for name, rows in results.items():
        if name.startswith(("tiered", "host")):
            beta = float(name.split()[1])
            floor = (protected + beta * (length - protected)) / length
            print(f"{name}: T0 at the end {rows[0]['t0_end']} of {length} tokens ({rows[0]['t0_end'] / length:.3f}); "
                  f"the policy's floor (protected + beta x the rest) {floor:.3f}, plus up to 64 tokens (one interval) "
                  f"decoded since the last decision; {rows[0]['growths']} storage growths")
    for name, value in ratios.items():
        goal = GOALS.get(name)
        print(f"ratio hf_{name} {value:.3f}" + (f" (goal <= {goal})" if goal else ""))
    if args.plot:
        plot(Path(args.plot), med, dyn, offload_moved, args)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "device": device, "medians": med, "ratios": ratios,
                                               "offloading_moved": how, "rows": results}, indent=1))


if __name__ == "__main__":
    main()
