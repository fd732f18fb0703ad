"""kvtier in vLLM (CPU backend, fp32, SmolLM2-135M): real vLLM engines with the kvtier plugin
against a real kvtierd, compared with vanilla vLLM on the same prompts.

Every comparison is between greedy token ids (and, for host attention, log-probabilities); speed
lives in tests/bench/vllm_bench.py. Plans take effect at the same steps on every run because the engines sync with
kvtierd after each step (sync_ms), and staged tokens at r = 0 are identical whatever the timing,
since no key or value is lost and vLLM's own kernel reads them.
"""

from __future__ import annotations

import math
import re

import pytest
from conftest import Daemon, prompts, run_engine

import kvtier
from kvtier_vllm.config import ConfigError, KvtierConfig

TIERING = dict(sink_tokens=4, window_tokens=64, interval=16, sync_ms=60_000)


def job(model_dir, daemon=None, n=4, max_tokens=320, **extra):
    kv = None if daemon is None else {"socket": daemon.socket, **TIERING}
    return dict(model=model_dir, kvtier=kv, prompts=prompts(n), max_tokens=max_tokens, **extra)


@pytest.fixture(scope="module")
def vanilla(model_dir):
    """Vanilla vLLM on job()'s prompts, with log-probabilities (greedy tokens do not depend on
    them): the baseline of every comparison below, run once."""
    return run_engine(job(model_dir, logprobs=2))


def test_outputs_are_identical_to_vanilla_vllm_at_r0_for_every_beta(model_dir, daemon, vanilla):
    """One kvtier engine per β, a batch of 4 requests of different lengths: tokens match vanilla
    vLLM's, and below β = 1 every request held fewer of vLLM's blocks than vanilla's."""
    for beta in (0.3, 0.5, 1.0):
        got = run_engine(job(model_dir, daemon, tier=[{"hbm_ratio": beta, "evict_ratio": 0.0}] * 4))
        assert got["tiered"] and got["plans_refused"] == 0
        assert got["tokens"] == vanilla["tokens"], f"beta {beta}"
        if beta < 1.0:
            assert all(got["peak_blocks"][k] < vanilla["peak_blocks"][k] for k in vanilla["peak_blocks"]), \
                (beta, got["peak_blocks"], vanilla["peak_blocks"])


# Host attention sums in another order than vLLM's kernel: a greedy choice may flip only where the
# two best tokens are closer than the rounding can move them.
NEAR_TIE = 1e-3


def test_host_attention_follows_vanilla_up_to_rounding_without_staging_blocks(model_dir, daemon, vanilla):
    """host_attention at r = 0, β 0.3, a batch of 4: every generated token's log-probability is
    within NEAR_TIE of vanilla's, tokens only differ after a near-tie of vanilla's, no block is
    reserved for staging, and every request held fewer blocks than vanilla's."""
    base = vanilla
    got = run_engine(dict(job(model_dir, daemon, tier=[{"hbm_ratio": 0.3, "evict_ratio": 0.0}] * 4, logprobs=2),
                          kvtier={"socket": daemon.socket, **TIERING, "host_attention": True}))
    assert got["tiered"] and got["plans_refused"] == 0 and got["plans_applied"] > 0
    assert got["staging_blocks"] == 0
    for want, have, lp_want, lp_have, margin in zip(base["tokens"], got["tokens"], base["logprobs"], got["logprobs"],
                                                    base["margins"]):
        same = next((i for i, (a, b) in enumerate(zip(want, have)) if a != b), len(want))
        assert same == len(want) or margin[same] < NEAR_TIE, (same, margin[same])
        assert max(abs(a - b) for a, b in zip(lp_want[:same], lp_have[:same])) < NEAR_TIE
    assert all(got["peak_blocks"][k] < base["peak_blocks"][k] for k in base["peak_blocks"])


def test_evicting_changes_the_outputs_and_frees_more(model_dir, daemon, vanilla):
    """r > 0 destroys keys: the tokens diverge from vanilla's (the comparison above could fail)."""
    got = run_engine(job(model_dir, daemon, tier=[{"hbm_ratio": 0.3, "evict_ratio": 0.3}] * 4))
    assert got["tiered"]
    assert got["tokens"] != vanilla["tokens"]
    assert all(got["peak_blocks"][k] < vanilla["peak_blocks"][k] for k in vanilla["peak_blocks"])


def test_finished_and_aborted_requests_leave_no_sequence(model_dir, daemon):
    got = run_engine(job(model_dir, daemon, tier=[{"hbm_ratio": 0.3}] * 4, abort_after=120))
    assert got["tokens"][1] is None and got["tokens"][3] is None  # aborted
    assert got["tokens"][0] is not None and got["tokens"][2] is not None
    assert got["open_sequences"] == 0


def test_without_kvtierd_vllm_serves_every_request_untiered(model_dir, vanilla, tmp_path):
    """An unreachable daemon pauses tiering; no request fails, and a bad per-request parameter
    runs that request untiered."""
    bad = [None, {"hbm_ratio": 7}, None, {"no_such_parameter": 1}]
    got = run_engine(dict(job(model_dir), kvtier={"socket": str(tmp_path / "none.sock"), **TIERING}, tier=bad))
    assert not got["tiered"]
    assert got["tokens"] == vanilla["tokens"]


def test_a_bad_per_request_parameter_runs_that_request_untiered(model_dir, daemon, vanilla):
    got = run_engine(job(model_dir, daemon, tier=[{"hbm_ratio": 0.3}, {"hbm_ratio": 7}, {"hbm_ratio": 0.3},
                                                  {"no_such_parameter": 1}]))
    assert got["tokens"] == vanilla["tokens"]
    assert got["peak_blocks"]["1"] == vanilla["peak_blocks"]["1"]  # untiered
    assert got["peak_blocks"]["0"] < vanilla["peak_blocks"]["0"]


@pytest.mark.parametrize("extra, message", [
    ({"hbm_ratio": 1.5}, "hbm_ratio must lie in [0, 1]"),
    ({"windw_tokens": 64}, "unknown kv_connector_extra_config key(s) ['windw_tokens']"),
    ({"staging_blocks": -1}, "staging_blocks must be a non-negative integer"),
    ({"interval": "often"}, "interval must be an integer, got 'often'"),
    ({"host_attention": "yes"}, "host_attention must be true or false, got 'yes'"),
    ({"host_attention": True, "staging_blocks": 4}, "staging_blocks has no use with host_attention"),
])
def test_a_wrong_extra_config_is_a_clear_error(extra, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        KvtierConfig.from_extra(extra)


def test_a_wrong_extra_config_stops_vllm_at_start_up(model_dir):
    with pytest.raises(RuntimeError, match="unknown kv_connector_extra_config key"):
        run_engine(dict(job(model_dir), kvtier={"windw_tokens": 64}, max_tokens=4))


def test_the_plugin_is_an_entry_point_vllm_loads():
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="vllm.general_plugins") if e.name == "kvtier"]
    assert ep.value == "kvtier_vllm:register"
    assert kvtier.Tier.T1  # the kvtier package is importable next to vLLM


def test_a_long_generation_holds_at_most_0_40_of_vanillas_blocks(model_dir, daemon):
    """1,536 generated tokens at β 0.3: the most blocks vLLM's KV cache manager held for the
    request is at most 0.40 of vanilla's, staged (the engine's staging blocks reported apart) and
    with host attention (no staging blocks)."""
    long = dict(n=1, max_tokens=1536)
    base = run_engine(job(model_dir, **long))
    tier = [{"hbm_ratio": 0.3, "evict_ratio": 0.0}]
    got = run_engine(job(model_dir, daemon, tier=tier, **long))
    host = run_engine(dict(job(model_dir, daemon, tier=tier, **long),
                           kvtier={"socket": daemon.socket, **TIERING, "host_attention": True}))
    assert got["tokens"] == base["tokens"]
    for run in (got, host):
        assert run["plans_refused"] == 0
        assert run["peak_blocks"]["0"] <= 0.40 * base["peak_blocks"]["0"], (run["peak_blocks"], base["peak_blocks"])
    assert host["staging_blocks"] == 0


def test_a_fixed_kv_cache_runs_more_long_requests_at_once(model_dir, daemon):
    """The same 80-block KV cache: with kvtier freeing offloaded blocks, vLLM runs more of six
    640-token requests at once than without, and every request still completes."""
    fixed = dict(n=6, max_tokens=640, num_blocks=80)
    base = run_engine(job(model_dir, **fixed))
    got = run_engine(dict(job(model_dir, daemon, tier=[{"hbm_ratio": 0.3, "evict_ratio": 0.0}] * 6, **fixed),
                          kvtier={"socket": daemon.socket, **TIERING, "staging_blocks": 3}))
    assert all(t is not None and len(t) == 640 for t in got["tokens"] + base["tokens"])
    assert got["plans_refused"] == 0
    assert got["running_mean"] > base["running_mean"], (got["running_mean"], base["running_mean"])


def test_a_request_keeps_its_first_block_while_other_requests_reuse_freed_ones(model_dir):
    """The worker knows a batch row's request by the first block of its table, so that block is
    never given back while the request runs, even when its rows leave T0: here the daemon's own
    defaults (no sink, StreamingLLM, no per-request parameters) move every request's first unit to
    host memory, three requests share a 16-block cache two at a time (freed blocks are reused by
    the others), and the tokens are still vanilla's."""
    small = dict(n=3, max_tokens=320, num_blocks=16, max_model_len=384, max_num_seqs=2)
    base = run_engine(job(model_dir, **small))
    defaults = ["sink_tokens=0", "policy=streaming_llm", "window_tokens=64", "interval=16", "hbm_ratio=0.3"]
    with Daemon([arg for d in defaults for arg in ("--set", f"tiering.{d}")]) as daemon:
        got = run_engine(dict(job(model_dir, **small), kvtier={"socket": daemon.socket, "sync_ms": 60_000,
                                                                      "staging_blocks": 3}))
    assert got["tiered"] and got["plans_applied"] > 0
    assert got["first_units_moved"] > 0  # the case this test is about happened
    assert got["first_blocks_released"] == 0
    assert got["tokens"] == base["tokens"]


@pytest.mark.parametrize("host", [False, True], ids=["staged", "host_attention"])
def test_vllm_serves_on_through_a_kvtierd_crash_and_tiers_again_after_its_restart(model_dir, daemon, vanilla, host):
    """kvtierd is killed at step 100 and restarted at step 150: every request completes (staged:
    with vanilla's tokens at r = 0; host attention reads its host rows in its own mapping of the
    pool meanwhile), the worker's client reattaches, and plans apply again after the restart."""
    def on_pause(step: int) -> None:
        if step == 100:
            daemon.kill()
        else:
            daemon.restart()

    got = run_engine(dict(job(model_dir, daemon, tier=[{"hbm_ratio": 0.3, "evict_ratio": 0.0}] * 4),
                          kvtier={"socket": daemon.socket, **TIERING, "host_attention": host},
                          pause_at=[100, 150], await_reattach=True), on_pause)
    if host:  # the same computation up to rounding: every request completes
        assert all(t is not None and len(t) == len(v) for t, v in zip(got["tokens"], vanilla["tokens"]))
    else:
        assert got["tokens"] == vanilla["tokens"]
    assert got["counters"]["daemon_losses"] == 1 and got["counters"]["reattachments"] == 1
    assert got["plans_applied_after_pause"] > 0
