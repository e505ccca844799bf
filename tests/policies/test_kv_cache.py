"""The sampler's in-place KV cache gives what HF's DynamicCache gives: same logits through prefill, row selection
(prefix sharing and dropping rows) and many decode steps past a capacity doubling."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, DynamicCache

from agentic_rl.policies.hf.kv_cache import MIN_CAPACITY, growing_cache


def test_growing_cache_matches_dynamic_cache(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, model.config.vocab_size, (2, 30), generator=g)
    outs = []
    for cache in (DynamicCache(config=model.config), growing_cache()):
        logits = []
        with torch.no_grad():
            out = model(input_ids=prompt, cache=cache, use_cache=True)
            cache.batch_select_indices(torch.tensor([0, 0, 1]))  # copy row 0 (a shared prefix), keep row 1
            rows = 3
            for step in range(2 * MIN_CAPACITY):
                tok = torch.full((rows, 1), (7 * step) % model.config.vocab_size)
                out = model(input_ids=tok, cache=cache, use_cache=True)
                logits.append(out.logits[:, -1])
                if step == MIN_CAPACITY:
                    cache.batch_select_indices(torch.tensor([0, 2]))  # drop a finished row
                    rows = 2
        assert cache.get_seq_length() == 30 + 2 * MIN_CAPACITY
        outs.append(logits)
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
