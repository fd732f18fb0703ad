#!/usr/bin/env python3
"""One vLLM engine (CPU, fp32, SmolLM2-135M from the packaged model, in-process engine core) run
on a JSON-like job in a process of its own, as in a real deployment: `run_engine` forks it from a
server process that imported vLLM once (multiprocessing's forkserver, vLLM preloaded), which saves
each engine the ~16 s of importing vLLM and torch. `python engine.py JOB` runs one job in this
process and prints the result as JSON.

Job: {"model": dir, "kvtier": null | kv_connector_extra_config, "prompts": [...],
      "max_tokens": n, "tier": [per-prompt kvtier parameters or null], "abort_after": steps or null,
      "num_blocks": the KV cache's size in blocks (default: VLLM_CPU_KVCACHE_SPACE = 1 GiB),
      "max_num_seqs": n, "pause_at": [steps]: after each, call on_pause(step) in the caller and
      wait for it to return (the caller acts meanwhile, e.g. kills or restarts kvtierd), "await_reattach":
      after the last pause, wait until the client has reattached to a restarted kvtierd,
      "logprobs": 2: also return each generated token's log-probability and its margin over the
      runner-up token}
Result: {"tokens": [[ids]...], "seconds": s, "steps": n, "peak_blocks": {request: most blocks vLLM
         held for it}, with "logprobs" also "logprobs" and "margins" ([[per token]...]),
         "blocks_held_max": most blocks in use in vLLM's pool (staging included),
         "first_blocks_released" / "first_units_moved": summed over steps, running requests whose first
         block vLLM's KV cache manager did not hold / whose first unit the worker had out of T0,
         "running_max" / "running_mean": requests running at once (most, mean over steps),
         "preemptions": per request, "block_size": n; with kvtier also "staging_blocks",
         "plans_refused", "plans_applied", "bytes_moved" (plans and staging), "unit_bytes" (one
         block of every layer's K and V), "tiered" (False:
         kvtierd was not reachable), "counters" (the worker client's, as a dict)}
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import tempfile
import time
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Callable

# The engine's environment, set before the server process imports vLLM: engine core in the
# engine's own process, OpenMP on both cores, a 1 GiB KV cache unless the job fixes the blocks.
ENVIRONMENT = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "0-1",
               "VLLM_CPU_KVCACHE_SPACE": "1"}
_server: multiprocessing.context.BaseContext | None = None


def server() -> multiprocessing.context.BaseContext:
    """The forkserver context every engine process is forked from, its server started on first
    use with ENVIRONMENT (this process's own environment stays as it was)."""
    global _server
    if _server is None:
        _server = multiprocessing.get_context("forkserver")
        _server.set_forkserver_preload(["vllm.entrypoints.llm", "vllm.sampling_params"])
        saved = {name: os.environ.get(name) for name in ENVIRONMENT}
        os.environ.update(ENVIRONMENT)
        try:
            forkserver.ensure_running()
        finally:
            for name, value in saved.items():
                if value is None:
                    del os.environ[name]
                else:
                    os.environ[name] = value
    return _server


def run_engine(job: dict, on_pause: Callable[[int], None] | None = None) -> dict:
    """Runs `job` in an engine process of its own; on_pause(step) runs at each of job["pause_at"]
    while the engine waits. An engine that fails raises RuntimeError with the end of its log."""
    ours, theirs = server().Pipe()
    with tempfile.NamedTemporaryFile("w+", suffix=".log") as log:
        engine = server().Process(target=serve_job, args=(job, theirs, log.name))
        engine.start()
        theirs.close()
        result = None
        try:
            while result is None:
                kind, value = ours.recv()
                if kind == "pause":
                    on_pause(value)
                    ours.send("go")
                else:
                    result = value
        except EOFError:
            pass  # the engine ended without a result: its log says why
        engine.join()
        if result is None or engine.exitcode != 0:
            log.seek(0)
            raise RuntimeError(f"engine failed ({engine.exitcode}):\n{log.read()[-6000:]}")
    return result


def serve_job(job: dict, caller: Connection, log: str) -> None:
    """The engine process: its output to `log`, pauses and the result through `caller`."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)

    def pause(step: int) -> None:
        caller.send(("pause", step))
        caller.recv()

    caller.send(("result", execute(job, pause)))
    caller.close()
    sys.stdout.flush()
    os._exit(0)  # skip vLLM's slow interpreter teardown; the result is sent


PROBLEMS = Path(__file__).resolve().parents[1] / "fidelity" / "problems.json"


def prompts(n: int) -> list[str]:
    """n word problems of different lengths (tests/fidelity/problems.json)."""
    return [p["q"] + " Think step by step." for p in json.loads(PROBLEMS.read_text())[:n]]


def worker_plans_applied() -> int | None:
    from kvtier_vllm import state

    return state.worker().plans_applied if state.worker() else None


def first_units_off_t0() -> int:
    """Running kvtier requests whose first block's rows are not in T0 now."""
    from kvtier_vllm import state
    from kvtier_vllm.worker_side import T0

    worker = state.worker()
    return 0 if worker is None else sum(1 for r in worker.requests.values() if r.tier[:1] not in ([], [T0]))


def await_reattach() -> None:
    """Until the worker's client is attached to kvtierd again (libkvtier retries from sync with a
    backoff of at most 1 s, however long that takes on a loaded machine); a reattachment the
    restarted daemon refuses ends the run."""
    from kvtier_vllm import state

    client = state.worker().client
    while client.counters().reattachments == 0:
        if client.counters().reattach_refused:
            raise RuntimeError("the restarted kvtierd refused the client's reattachment")
        client.sync(100)
        time.sleep(0.05)


def execute(job: dict, pause: Callable[[int], None]) -> dict:
    """Runs `job` on a new engine in this process; pause(step) at each of job["pause_at"]."""
    from vllm import LLM, SamplingParams

    kw = {"num_gpu_blocks_override": job["num_blocks"]} if job.get("num_blocks") else {}
    if job.get("kvtier") is not None:
        kw["kv_transfer_config"] = {"kv_connector": "KvtierConnector", "kv_role": "kv_both",
                                    "kv_connector_extra_config": job["kvtier"]}
    llm = LLM(model=job["model"], dtype="float32", max_model_len=job.get("max_model_len", 2048), enforce_eager=True,
              seed=0, block_size=32, enable_prefix_caching=False, max_num_seqs=job.get("max_num_seqs", 8), **kw)
    engine = llm.llm_engine
    core = engine.engine_core.engine_core
    tiers = job.get("tier") or [None] * len(job["prompts"])
    for i, (prompt, tier) in enumerate(zip(job["prompts"], tiers)):
        extra = {"kvtier": tier} if tier else None
        engine.add_request(str(i), prompt, SamplingParams(temperature=0, max_tokens=job["max_tokens"], ignore_eos=True,
                                                          extra_args=extra, logprobs=job.get("logprobs")))
    started = time.monotonic()
    tokens: dict[str, list[int]] = {}
    logprobs: dict[str, list[float]] = {}
    margins: dict[str, list[float]] = {}
    running_max = blocks_max = steps = running_sum = first_released = first_moved = 0
    preemptions: dict[str, int] = {}
    applied_at_pause = None
    pool = core.scheduler.kv_cache_manager.block_pool
    per_request = core.scheduler.kv_cache_manager.coordinator.single_type_managers[0].req_to_blocks
    peak: dict[str, int] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                tokens[out.request_id] = list(out.outputs[0].token_ids)
                if job.get("logprobs"):  # per position: the chosen token's, and its lead over the next best
                    chosen = [step[t].logprob for t, step in zip(tokens[out.request_id], out.outputs[0].logprobs)]
                    logprobs[out.request_id] = chosen
                    margins[out.request_id] = [c - max((p.logprob for t, p in step.items() if t != tok), default=-1e30)
                                               for c, tok, step in zip(chosen, tokens[out.request_id],
                                                                       out.outputs[0].logprobs)]
        steps += 1
        running_max = max(running_max, len(core.scheduler.running))
        running_sum += len(core.scheduler.running)
        for req_id, request in core.scheduler.requests.items():
            preemptions[req_id] = request.num_preemptions
        for req_id, blocks in per_request.items():  # the blocks vLLM's KV cache manager holds for it
            key = req_id.split("-")[0]  # vLLM suffixes the id it was given
            peak[key] = max(peak.get(key, 0), sum(1 for b in blocks if not b.is_null))
            first_released += bool(blocks) and blocks[0].is_null
        first_moved += first_units_off_t0()
        blocks_max = max(blocks_max, pool.num_gpu_blocks - 1 - pool.get_num_free_blocks())
        if job.get("abort_after") and steps == job["abort_after"]:
            engine.abort_request([str(i) for i in range(len(job["prompts"])) if i % 2 == 1])
        if steps in job.get("pause_at", ()):
            pause(steps)
            if steps == max(job["pause_at"]):
                if job.get("await_reattach"):
                    await_reattach()
                applied_at_pause = worker_plans_applied()
    seconds = time.monotonic() - started
    for _ in range(8):  # what a server's engine loop does once the requests are done
        if not core.scheduler.has_requests():
            break
        engine.step()
    result = dict(tokens=[tokens.get(str(i)) for i in range(len(job["prompts"]))], seconds=seconds,
                  steps=steps, running_max=running_max, running_mean=running_sum / max(steps, 1),
                  preemptions=[preemptions.get(str(i), 0) for i in range(len(job["prompts"]))],
                  blocks_held_max=blocks_max, block_size=32, peak_blocks=peak, first_blocks_released=first_released,
                  first_units_moved=first_moved)
    if job.get("logprobs"):
        result.update(logprobs=[logprobs.get(str(i)) for i in range(len(job["prompts"]))],
                      margins=[margins.get(str(i)) for i in range(len(job["prompts"]))])
    connector = core.scheduler.connector
    if connector is not None:
        from kvtier_vllm import state

        worker = state.worker()
        result.update(staging_blocks=connector.scheduler.staging_count, plans_refused=worker.plans_refused,
                      plans_applied=worker.plans_applied, bytes_moved=worker.bytes_moved, unit_bytes=worker.unit_bytes(),
                      tiered=worker.client is not None)
        if applied_at_pause is not None:
            result["plans_applied_after_pause"] = worker.plans_applied - applied_at_pause
        if worker.client is not None:
            c = worker.client.counters()
            result["counters"] = {k: getattr(c, k) for k in dir(c) if not k.startswith("_")}
    if job.get("kvtier") and job["kvtier"].get("socket"):  # what kvtierd still holds for this engine
        import kvtier

        try:
            with kvtier.Client(job["kvtier"]["socket"], "engine-check", kvtier.Role.ADMIN) as admin:
                result["open_sequences"] = sum(len(c.sequences) for c in admin.status().clients if c.name == "vllm")
        except kvtier.KvtierError:
            result["open_sequences"] = None  # no daemon
    return result


if __name__ == "__main__":
    os.environ.update(ENVIRONMENT)
    print(json.dumps(execute(json.loads(sys.argv[1]), lambda step: None)), flush=True)
    os._exit(0)
