"""kvtier.hf.TieredCache with a small randomly initialised Llama model (built from a config, no
download) against a real kvtierd: with no eviction every HBM ratio reproduces the default cache
bit for bit; with eviction the greedy tokens diverge."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import numpy as np  # noqa: E402

import kvtier  # noqa: E402
from kvtier.hf import TieredCache  # noqa: E402

# The spelling, generate(past_key_values=...), is deprecated in favour of cache= in 5.x.
pytestmark = pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")

PROMPT, NEW = 16, 120
# Small protected set and interval, so tokens move many times within NEW steps.
TIERING = dict(sink_tokens=2, window_tokens=8, interval=8, plan_wait_ms=60_000)  # a bound on the sync, not a wait


@pytest.fixture(scope="module")
def model():
    # A 2-layer model is far too small for intra-op threads: on a busy 2-core machine they make
    # generation ~10x slower.
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, attn_implementation="eager")
    m = transformers.LlamaForCausalLM(config).eval()
    m.generation_config.eos_token_id = None
    m.generation_config.pad_token_id = 0
    return m


@pytest.fixture(scope="module")
def prompt():
    return torch.randint(0, 128, (1, PROMPT), generator=torch.Generator().manual_seed(1))


def generate(model, prompt, cache=None):
    kwargs = {} if cache is None else {"past_key_values": cache}
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=NEW, do_sample=False, return_dict_in_generate=True,
                             output_logits=True, **kwargs)
    return out.sequences[0], torch.stack(out.logits)


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
        assert stats.plans_applied > 0 and stats.rows_offloaded > 0 and stats.tokens_t1 > 0
        assert stats.peak_t0_tokens < stats.tokens
    else:
        assert stats.tokens_t1 == 0


def test_eviction_makes_the_tokens_diverge(daemon, model, prompt, reference):
    with TieredCache(model, socket_path=daemon.socket, max_length=PROMPT + NEW, hbm_ratio=0.5, evict_ratio=0.5,
                     **TIERING) as cache:
        tokens, _ = generate(model, prompt, cache)
        assert cache.stats.rows_evicted > 0
    differs = (tokens != reference[0]).nonzero()
    assert len(differs) > 0
    assert differs[0].item() >= PROMPT  # the prompt is echoed unchanged


def test_positions_stay_absolute_after_eviction(daemon, model, prompt):
    with TieredCache(model, socket_path=daemon.socket, max_length=PROMPT + NEW, hbm_ratio=0.5, evict_ratio=0.5,
                     **TIERING) as cache:
        generate(model, prompt, cache)
        s = cache.stats
        assert cache.get_seq_length() == s.tokens == PROMPT + NEW - 1  # logical length, evicted included
        physical = s.tokens_t0 + s.tokens_t1
        assert physical < s.tokens
        # One new query token: the physical keys plus itself, offset so that its causal position
        # is the absolute one.
        assert cache.get_mask_sizes(1, 0) == (physical + 1, s.tokens - physical)


def test_daemon_sees_the_sequence_and_close_releases_it(daemon, model, prompt):
    with daemon.connect("admin", kvtier.Role.ADMIN) as admin:
        cache = TieredCache(model, socket_path=daemon.socket, name="hf-test", max_length=PROMPT + NEW,
                            hbm_ratio=0.3, evict_ratio=0.1, **TIERING)
        generate(model, prompt, cache)
        assert cache.client.sync()  # the daemon has consumed every step this cache published
        client = next(c for c in admin.status().clients if c.name == "hf-test")
        (seq,) = client.sequences
        assert seq.tokens + seq.tokens_t3 == PROMPT + NEW - 1 and seq.prompt_length == PROMPT  # tokens: live ones
        assert seq.tokens_t3 == cache.stats.tokens_t3 > 0
        assert 0 < seq.destroyed_fraction <= 0.1 + 1e-9
        assert client.score_records > 0 and client.scores_dropped == 0
        cache.close()
        # Its sequence is gone; the client itself may still be listed, as closing once the daemon
        # read the disconnect: its pool stays its own until this process exits.
        assert all(not c.sequences for c in admin.status().clients if c.name == "hf-test")
    assert not model._forward_pre_hooks  # hooks removed


def test_shared_client_and_torch_arrays(daemon, model, prompt, reference):
    with daemon.connect("shared") as client:
        cfg = model.config
        client.register_model(cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads,
                              kvtier.DType.F32, 4 * (PROMPT + NEW))
        for _ in range(2):  # two sequences, one after the other, on one connection
            with TieredCache(model, client=client, max_length=PROMPT + NEW, hbm_ratio=0.3, **TIERING) as cache:
                tokens, _ = generate(model, prompt, cache)
            assert torch.equal(tokens, reference[0])
        seq = client.open_sequence(4)
        client.push_scores(seq, 0, torch.ones(4))  # a torch tensor through DLPack
        client.push_scores(seq, 0, np.ones(4, dtype=np.float32)[::1])
        client.close_sequence(seq)
        assert not client.closed  # the caches did not close the shared client


def test_sdpa_model_is_refused(model):
    sdpa = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        attn_implementation="sdpa"))
    with pytest.raises(ValueError, match="eager"):
        TieredCache(sdpa, socket_path="/nonexistent", max_length=8)


def test_qwen2_family_no_eviction_reproduces_the_default_cache(daemon):
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, attn_implementation="eager")
    qwen = transformers.Qwen2ForCausalLM(config).eval()
    qwen.generation_config.eos_token_id = None
    qwen.generation_config.pad_token_id = 0
    prompt = torch.randint(0, 128, (1, PROMPT), generator=torch.Generator().manual_seed(2))
    reference = generate(qwen, prompt)
    with TieredCache(qwen, socket_path=daemon.socket, max_length=PROMPT + NEW, hbm_ratio=0.3, **TIERING) as cache:
        tokens, logits = generate(qwen, prompt, cache)
        assert cache.stats.rows_offloaded > 0
    assert torch.equal(tokens, reference[0]) and torch.equal(logits, reference[1])
