"""kvtier.hf.TieredCache with small randomly initialised Llama/Qwen2 models (built from a config,
no download) against a real kvtierd: with no eviction every HBM ratio and attention
implementation reproduces the default cache bit for bit; with eviction the tokens diverge; the
bytes the cache allocates fall with the HBM ratio."""

from __future__ import annotations

import pytest

import torch
import transformers

import numpy as np

import kvtier
from kvtier.hf import TieredCache, cache_bytes, release_model

# The spelling, generate(past_key_values=...), is deprecated in favour of cache= in 5.x.
pytestmark = pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")

PROMPT, NEW = 16, 120
# Client.sync(60_000) in these tests is a bound on a stuck daemon, never a timing check.
# Small protected set, interval and storage blocks, so tokens move many times within NEW steps.
TIERING = dict(sink_tokens=2, window_tokens=8, interval=8, block_tokens=16,
               plan_wait_ms=60_000)  # a bound on the sync, not a wait


def make_model(attn: str = "eager", family: str = "llama", layers: int = 2):
    # A 2-layer model is far too small for intra-op threads: on a busy 2-core machine they make
    # generation ~10x slower.
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config_class, model_class = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
                                 "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}[family]
    config = config_class(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                          attn_implementation=attn)
    m = model_class(config).eval()
    m.generation_config.eos_token_id = None
    m.generation_config.pad_token_id = 0
    return m


@pytest.fixture(scope="module")
def model():
    m = make_model()
    yield m
    release_model(m)


@pytest.fixture(scope="module")
def prompt():
    return torch.randint(0, 128, (1, PROMPT), generator=torch.Generator().manual_seed(1))


def generate(model, prompt, cache=None, new=NEW, **kwargs):
    if cache is not None:
        kwargs["past_key_values"] = cache
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=new, do_sample=False, return_dict_in_generate=True,
                             output_logits=True, **kwargs)
    return out.sequences, torch.stack(out.logits)


@pytest.fixture(scope="module")
def reference(model, prompt):
    return generate(model, prompt)


@pytest.mark.parametrize("beta", [0.3, 0.5, 1.0])
def test_no_eviction_reproduces_the_default_cache_exactly(daemon, model, prompt, reference, beta):
    with TieredCache(model, socket_path=daemon.socket, max_length=PROMPT + NEW, hbm_ratio=beta, evict_ratio=0.0,
                     **TIERING) as cache:
        tokens, logits = generate(model, prompt, cache)
        stats = cache.stats
    assert torch.equal(tokens, reference[0])
    assert torch.equal(logits, reference[1])  # bit-identical, not merely the same argmax
    assert stats.tokens == PROMPT + NEW - 1 and stats.tokens_t3 == 0
    if beta < 1.0:
        # The equality is not vacuous: tokens really left T0 and were staged back from the pool.
        assert stats.plans_applied > 0 and stats.rows_offloaded > 0 and stats.tokens_host > 0
        assert stats.tokens_t0 < stats.tokens
    else:
        assert stats.tokens_host == 0


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_any_attention_implementation_is_exact_and_scored(daemon, attn):
    m = make_model(attn)
    prompt = torch.randint(1, 128, (1, PROMPT), generator=torch.Generator().manual_seed(3))  # no pad id
    reference = generate(m, prompt)
    with TieredCache(m, socket_path=daemon.socket, max_length=PROMPT + NEW, hbm_ratio=0.3, **TIERING) as cache:
        assert m.config._attn_implementation == "kvtier_" + attn
        tokens, logits = generate(m, prompt, cache)
        assert cache.stats.rows_offloaded > 0 and cache.stats.rows_restored >= 0
        assert cache.client.sync(60_000)
    assert m.config._attn_implementation == attn  # given back
    assert torch.equal(tokens, reference[0]) and torch.equal(logits, reference[1])
    release_model(m)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_host_attention_gives_the_default_caches_logits_up_to_rounding(daemon, attn):
    """host_attention: libkvtier attends each decode step's T0 storage and the pool's host rows
    where they are, in one softmax (kvtier.hf.split). Exact up to float32 rounding, so the logits of
    every step are compared with DynamicCache's over the same tokens (teacher forcing: a token
    that rounding flips does not end the comparison); no layer is assembled, no host row copied."""
    m = make_model(attn)
    prompt = torch.randint(1, 128, (1, PROMPT), generator=torch.Generator().manual_seed(3))
    stats = {}
    for host in (True, False):
        with TieredCache(m, socket_path=daemon.socket, max_length=PROMPT + NEW, hbm_ratio=0.3, host_attention=host,
                         **TIERING) as cache:
            tokens, logits = generate(m, prompt, cache)
            stats[host] = cache.stats
            if host:
                with torch.no_grad():
                    want = m(tokens[:, :-1]).logits[0, PROMPT - 1:]
                torch.testing.assert_close(logits[:, 0], want, rtol=0, atol=1e-4)
    host, staged = stats[True], stats[False]
    assert host.rows_offloaded > 0 and host.tokens_host > 0  # host rows were attended in the pool
    assert host.peak_transient_bytes == 0 < staged.peak_transient_bytes
    # Staging moves every host row of every layer each step; host attention a query, an output and
    # the scores per layer (4 bytes per row against 256 of K and V).
    assert host.bytes_moved < staged.bytes_moved / 2
    release_model(m)


def test_host_attention_needs_the_cpu():
    m = make_model().to("meta")
    with pytest.raises(ValueError, match="host_attention needs the model on the CPU"):
        TieredCache(m, socket_path="/nonexistent", max_length=8, host_attention=True)


def test_recomputed_probabilities_are_eager_attentions():
    """What SDPA and flash attention do not return, the kvtier function recomputes: for GQA query
    heads, a causal block of queries and masked keys, the probabilities eager attention computes."""
    from transformers.models.llama.modeling_llama import eager_attention_forward

    from kvtier.hf.attention import _probabilities

    g = torch.Generator().manual_seed(5)
    b, hq, hkv, q, keys, d = 2, 4, 2, 3, 11, 8
    query, key, value = (torch.randn(b, h, n, d, generator=g) for h, n in ((hq, q), (hkv, keys), (hkv, keys)))
    keep = torch.ones(b, q, keys, dtype=torch.bool).tril(keys - q)
    keep[1, :, 2] = False  # an evicted key of row 1
    mask = torch.zeros(b, 1, q, keys).masked_fill(~keep[:, None], torch.finfo(torch.float32).min)
    module = torch.nn.Module()
    module.num_key_value_groups, module.training = hq // hkv, False
    _, weights = eager_attention_forward(module, query, key, value, mask, scaling=d ** -0.5)
    ours = _probabilities(query, key, keep, d ** -0.5)
    assert torch.allclose(ours, weights, atol=1e-6)
    assert torch.all(ours[1, :, :, 2] == 0)
    # One query per row with every key live (a decode step without padding or eviction): no mask
    # is built, and the probabilities are the masked path's bit for bit.
    one = query[:, :, -1:]
    assert torch.equal(_probabilities(one, key, None, d ** -0.5),
                       _probabilities(one, key, torch.ones(b, 1, keys, dtype=torch.bool), d ** -0.5))


def test_eviction_makes_the_tokens_diverge(daemon, model, prompt, reference):
    with TieredCache(model, socket_path=daemon.socket, max_length=PROMPT + NEW, hbm_ratio=0.5, evict_ratio=0.5,
                     **TIERING) as cache:
        tokens, _ = generate(model, prompt, cache)
        assert cache.stats.rows_evicted > 0
        assert cache.get_seq_length() == PROMPT + NEW - 1  # logical length, evicted included
        assert cache.get_mask_sizes(1) == (PROMPT + NEW, 0)  # DynamicCache's: dead keys are masked instead
    differs = (tokens[0] != reference[0][0]).nonzero()
    assert len(differs) > 0
    assert differs[0].item() >= PROMPT  # the prompt is echoed unchanged


def test_allocated_bytes_fall_with_the_hbm_ratio(daemon, prompt):
    # 8 layers: staging holds one layer's host rows, which in a 2-layer model is half of them.
    model, new, held = make_model(layers=8), 200, {}
    for beta in (0.3, 1.0):
        with TieredCache(model, socket_path=daemon.socket, max_length=PROMPT + new, hbm_ratio=beta,
                         **TIERING) as cache:
            generate(model, prompt, cache, new=new)
            held[beta] = (cache_bytes(cache), cache.stats)
    dynamic = transformers.DynamicCache(config=model.config)
    generate(model, prompt, dynamic, new=new)
    full = cache_bytes(dynamic)
    (low, s_low), (high, s_high) = held[0.3], held[1.0]
    # Storage, not slot counts: what the tensors of each cache hold at the end of the generation.
    assert low < high and low < 0.6 * full
    assert s_low.tokens_t0 < s_high.tokens_t0 and s_low.storage_growths > 1
    # β = 1 keeps every token in T0: its storage is the chain rounded up to a block (16 slots).
    assert high <= full * (1 + 16 / (PROMPT + new - 1)) + 1
    assert s_low.peak_kv_bytes >= low + s_low.peak_transient_bytes - 1
    assert s_low.bytes_moved > 0
    release_model(model)


@pytest.mark.parametrize("policy", [kvtier.Policy.VASE, kvtier.Policy.R_KV, kvtier.Policy.H2O])
def test_every_policy_runs_with_its_features(daemon, model, prompt, policy):
    with daemon.connect("admin", kvtier.Role.ADMIN) as admin:
        with TieredCache(model, socket_path=daemon.socket, name="policy", max_length=PROMPT + NEW, hbm_ratio=0.5,
                         evict_ratio=0.2, policy=policy, seed=3, key_digest_dim=8, **TIERING) as cache:
            generate(model, prompt, cache)
            assert cache.client.sync(60_000)
            assert cache.stats.rows_evicted > 0
            (client,) = [c for c in admin.status().clients if c.name == "policy"]
            assert client.errors == 0 and client.scores_dropped == 0


def test_daemon_sees_the_sequence_and_close_releases_it(daemon, model, prompt):
    with daemon.connect("admin", kvtier.Role.ADMIN) as admin:
        cache = TieredCache(model, socket_path=daemon.socket, name="hf-test", max_length=PROMPT + NEW,
                            hbm_ratio=0.3, evict_ratio=0.1, **TIERING)
        generate(model, prompt, cache)
        assert cache.client.sync(60_000)  # the daemon has consumed every step this cache published
        client = next(c for c in admin.status().clients if c.name == "hf-test")
        (seq,) = client.sequences
        assert seq.tokens + seq.tokens_t3 == PROMPT + NEW - 1 and seq.prompt_length == PROMPT  # tokens: live ones
        assert seq.tokens_t3 == cache.stats.tokens_t3 > 0
        assert 0 < seq.destroyed_fraction <= 0.1 + 1e-9
        assert client.score_records > 0 and client.scores_dropped == 0
        cache.close()
        assert cache.client.sync(60_000)
        client = next(c for c in admin.status().clients if c.name == "hf-test")
        assert not client.sequences and client.pool_slots_used == 0
    assert not model._forward_pre_hooks and not model._forward_hooks  # hooks removed


def test_a_cache_per_request_reuses_one_client_and_leaves_nothing(daemon, model, prompt, reference):
    with daemon.connect("admin", kvtier.Role.ADMIN) as admin:
        for _ in range(4):
            with TieredCache(model, socket_path=daemon.socket, name="per-request", max_length=PROMPT + NEW,
                             hbm_ratio=0.3, **TIERING) as cache:
                tokens, _ = generate(model, prompt, cache)
            assert torch.equal(tokens, reference[0])
        assert cache.client.sync(60_000)
        (client,) = [c for c in admin.status().clients if c.name == "per-request"]  # one, not four
        assert not client.sequences and client.pool_slots_used == 0
        release_model(model)
        assert cache.client.closed


def test_two_caches_at_once_get_their_own_plans(daemon, model, prompt, reference):
    other = torch.randint(1, 128, (1, PROMPT), generator=torch.Generator().manual_seed(9))
    other_reference = generate(model, other)
    a = TieredCache(model, socket_path=daemon.socket, max_length=PROMPT + NEW, hbm_ratio=0.3, **TIERING)
    b = TieredCache(model, socket_path=daemon.socket, max_length=PROMPT + NEW, hbm_ratio=0.3, **TIERING)
    assert a.client is b.client
    # 41 tokens: a's last step ends a decision interval, so a's plan arrives while b decodes; b
    # runs it (the daemon keeps one plan outstanding per client: left waiting, it would hold
    # back b's plans).
    generate(model, prompt, a, new=41)
    applied = a.stats.plans_applied
    tokens_b, _ = generate(model, other, b)
    assert b.stats.plans_failed == 0 and b.stats.plans_applied > 0
    assert a.stats.plans_applied == applied + 1 and a.stats.plans_failed == 0
    b.close()
    a.close()
    assert torch.equal(tokens_b, other_reference[0])


def test_caller_client_stays_open(daemon, model, prompt, reference):
    with daemon.connect("shared") as client:
        cfg = model.config
        client.register_model(cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads,
                              kvtier.DType.F32, 4 * (PROMPT + NEW))
        with TieredCache(model, client=client, max_length=PROMPT + NEW, hbm_ratio=0.3, **TIERING) as cache:
            tokens, _ = generate(model, prompt, cache)
        assert torch.equal(tokens, reference[0])
        seq = client.open_sequence(4)
        client.push_scores(seq, 0, torch.ones(4))  # a torch tensor through DLPack
        client.push_scores(seq, 0, np.ones(4, dtype=np.float32)[::1])
        client.close_sequence(seq)
        assert not client.closed


def test_unknown_parameters_are_refused(model):
    with pytest.raises(TypeError, match="hbm_ration"):
        TieredCache(model, socket_path="/nonexistent", max_length=8, hbm_ration=0.3)


def test_qwen2_family_no_eviction_reproduces_the_default_cache(daemon):
    qwen = make_model(family="qwen2")
    prompt = torch.randint(1, 128, (1, PROMPT), generator=torch.Generator().manual_seed(2))
    reference = generate(qwen, prompt)
    with TieredCache(qwen, socket_path=daemon.socket, max_length=PROMPT + NEW, hbm_ratio=0.3, **TIERING) as cache:
        tokens, logits = generate(qwen, prompt, cache)
        assert cache.stats.rows_offloaded > 0
    assert torch.equal(tokens, reference[0]) and torch.equal(logits, reference[1])
    release_model(qwen)
