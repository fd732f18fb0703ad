"""kvtier.hf.TieredCache with a batch of prompts of different lengths (left padding): one kvtier
sequence per row, outputs identical to DynamicCache's (with host attention: equal up to rounding),
rows that end early close their sequence."""

from __future__ import annotations

import pytest

import torch
import transformers

import kvtier
from kvtier.hf import TieredCache, release_model

from test_hf import TIERING, make_model

pytestmark = pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")

LENGTHS, NEW, PAD = (16, 9, 13, 5), 100, 0


def batch(lengths=LENGTHS):
    g = torch.Generator().manual_seed(7)
    width = max(lengths)
    ids = torch.full((len(lengths), width), PAD)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, width - n:] = torch.randint(1, 128, (n,), generator=g)
        mask[b, width - n:] = 1
    return ids, mask


def generate(model, cache=None, eos=None):
    ids, mask = batch()
    kwargs = {} if cache is None else {"past_key_values": cache}
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, eos_token_id=eos,
                             pad_token_id=PAD, return_dict_in_generate=True, output_logits=True, **kwargs)
    return out.sequences, torch.stack(out.logits)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_a_batch_of_four_reproduces_the_default_cache(daemon, attn):
    model = make_model(attn)
    reference = generate(model)
    with daemon.connect("admin", kvtier.Role.ADMIN) as admin:
        with TieredCache(model, socket_path=daemon.socket, name="batch", max_length=max(LENGTHS) + NEW,
                         pool_tokens=4 * (max(LENGTHS) + NEW), hbm_ratio=0.3, **TIERING) as cache:
            tokens, logits = generate(model, cache)
            assert cache.client.sync(60_000)
            (client,) = [c for c in admin.status().clients if c.name == "batch"]
            seqs = sorted(client.sequences, key=lambda s: s.sequence_id)
            assert [s.prompt_length for s in seqs] == list(LENGTHS)  # padding is not part of a sequence
            assert [s.tokens + s.tokens_t3 for s in seqs] == [n + NEW - 1 for n in LENGTHS]
            assert cache.stats.rows_offloaded > 0 and cache.stats.tokens_host > 0
    assert torch.equal(tokens, reference[0])
    assert torch.equal(logits, reference[1])
    release_model(model)


def test_host_attention_serves_a_batch_of_four(daemon):
    """With host_attention every row attends its own T0 slots and host rows: each step's logits are
    the default cache's over the same tokens up to float32 rounding (a forward over the whole
    generated batch, left padding masked and positions counted from each row's first token)."""
    model = make_model("sdpa")
    width = max(LENGTHS)
    with TieredCache(model, socket_path=daemon.socket, max_length=width + NEW, pool_tokens=4 * (width + NEW),
                     hbm_ratio=0.3, host_attention=True, **TIERING) as cache:
        tokens, logits = generate(model, cache)
        stats = cache.stats
    assert stats.rows_offloaded > 0 and stats.tokens_host > 0 and stats.peak_transient_bytes == 0
    _, mask = batch()
    mask = torch.cat([mask, torch.ones(len(LENGTHS), NEW - 1, dtype=torch.long)], dim=1)
    with torch.no_grad():
        want = model(tokens[:, :-1], attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
    torch.testing.assert_close(logits.transpose(0, 1), want[:, width - 1:], rtol=0, atol=1e-4)
    release_model(model)


def test_rows_that_end_early_close_their_sequences(daemon):
    model = make_model()
    free_run, _ = generate(model)
    width = max(LENGTHS)
    eos = int(free_run[0, width + 10])  # row 0 ends after 11 tokens (other rows may end on it too)
    reference, _ = generate(model, eos=eos)
    ended = [b for b in range(len(LENGTHS)) if (reference[b, width:] == eos).any()]
    assert 0 in ended and len(ended) < len(LENGTHS)  # some rows run to the end
    with daemon.connect("admin", kvtier.Role.ADMIN) as admin:
        with TieredCache(model, socket_path=daemon.socket, name="ends", max_length=width + NEW,
                         pool_tokens=4 * (width + NEW), hbm_ratio=0.3, eos_token_id=eos, **TIERING) as cache:
            tokens, _ = generate(model, cache, eos=eos)
            assert cache.client.sync(60_000)
            (client,) = [c for c in admin.status().clients if c.name == "ends"]
            # Rows whose EOS was fed back to the model closed; a row whose EOS was the last token
            # generated was never fed back, so it closes with the cache.
            assert len(ended) - 1 <= cache.stats.sequences_closed <= len(ended)
            assert len(client.sequences) == len(LENGTHS) - cache.stats.sequences_closed
    assert torch.equal(tokens, reference)
    release_model(model)


def test_a_masked_token_inside_a_prompt_stays_masked(daemon):
    """generate() masks every pad id of a prompt (here one inside it, as a chat template's end
    token can be); the cache keeps such a token as a position transformers' mask hides."""
    model = make_model("sdpa")
    prompt = torch.randint(1, 128, (1, 16), generator=torch.Generator().manual_seed(11))
    prompt[0, 6] = PAD
    with torch.no_grad():
        reference = model.generate(prompt, max_new_tokens=NEW, do_sample=False, pad_token_id=PAD)
        with TieredCache(model, socket_path=daemon.socket, max_length=16 + NEW, hbm_ratio=0.3, **TIERING) as cache:
            tokens = model.generate(prompt, past_key_values=cache, max_new_tokens=NEW, do_sample=False,
                                    pad_token_id=PAD)
            assert cache.rows[0].pad == 0 and list(cache.rows[0].hidden) == [6]
            assert cache.stats.rows_offloaded > 0
    assert torch.equal(tokens, reference)
    release_model(model)
