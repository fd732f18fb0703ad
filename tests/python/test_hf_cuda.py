"""kvtier.hf.TieredCache with the model on a GPU: libkvtier's CUDA executor moves the rows, the
engine's stream is bound, host rows are staged layer by layer. Skips without a CUDA device."""

from __future__ import annotations

import pytest

import torch
import transformers

from kvtier.hf import TieredCache, cache_bytes, release_model

from test_hf import NEW, PROMPT, TIERING, generate, make_model

pytestmark = [
    pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning"),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine (torch.cuda)"),
]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_cuda_model_reproduces_the_default_cache_and_holds_less(daemon, attn):
    model = make_model(attn).cuda()
    prompt = torch.randint(0, 128, (1, PROMPT), generator=torch.Generator().manual_seed(1)).cuda()
    reference = generate(model, prompt)
    dynamic = transformers.DynamicCache(config=model.config)
    generate(model, prompt, dynamic)
    before = torch.cuda.memory_allocated()
    with TieredCache(model, socket_path=daemon.socket, max_length=PROMPT + NEW, hbm_ratio=0.3, **TIERING) as cache:
        tokens, logits = generate(model, prompt, cache)
        assert cache.store.k[0].is_cuda and cache.stats.rows_offloaded > 0 and cache.stats.tokens_host > 0
        held = torch.cuda.memory_allocated() - before  # what the cache still holds on the device
        assert held >= cache_bytes(cache) - 1 and cache_bytes(cache) < cache_bytes(dynamic)
    assert torch.equal(tokens, reference[0]) and torch.equal(logits, reference[1])
    release_model(model)
