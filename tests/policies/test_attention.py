"""`sdpa_packed_gqa` computes what transformers' `sdpa` computes — values and gradients — on the masked multi-token
forwards it takes over (observation prefills, training with a shared prefix), and the checkpoint keeps plain sdpa."""

from __future__ import annotations

import json

import torch
from transformers import AutoModelForCausalLM, DynamicCache

from agentic_rl.policies import HFPolicy
from agentic_rl.policies.hf.attention import NAME


def _forward(model, ids, attn, pos):
    """A prefix through the cache, then a masked multi-token chunk with holes on the left of one row."""
    cache = DynamicCache(config=model.config)
    model(input_ids=ids[:, :20], attention_mask=attn[:, :20], position_ids=pos[:, :20], cache=cache, use_cache=True)
    return model(input_ids=ids[:, 20:], attention_mask=attn, position_ids=pos[:, 20:], cache=cache,
                 use_cache=True).logits


def test_packed_gqa_matches_sdpa_values_and_gradients(tiny_dir):
    g = torch.Generator().manual_seed(0)
    logits, grads = {}, {}
    for impl in ("sdpa", NAME):
        model = AutoModelForCausalLM.from_pretrained(tiny_dir, attn_implementation="sdpa")
        assert model.config.num_attention_heads > model.config.num_key_value_heads  # grouped heads: the packed path
        model.set_attn_implementation(impl)
        g.manual_seed(0)
        ids = torch.randint(0, model.config.vocab_size, (3, 32), generator=g)
        attn = torch.ones(3, 32, dtype=torch.long)
        attn[1, 20:25] = 0  # a row with holes in the chunk: the mask differs by row
        pos = torch.arange(32).expand(3, -1).clone()
        out = _forward(model, ids, attn, pos)
        out[attn[:, 20:].bool()].logsumexp(-1).sum().backward()
        logits[impl] = out.detach()[attn[:, 20:].bool()]
        grads[impl] = model.model.layers[0].self_attn.q_proj.weight.grad.clone()
    torch.testing.assert_close(logits[NAME], logits["sdpa"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grads[NAME], grads["sdpa"], rtol=1e-4, atol=1e-5)


def test_policy_uses_packed_attention_and_saves_plain_config(tiny_dir, tmp_path):
    policy = HFPolicy(tiny_dir)
    assert policy.model.config._attn_implementation == NAME
    policy.model.save_pretrained(tmp_path)
    assert NAME not in json.dumps(json.loads((tmp_path / "config.json").read_text()))


def test_a_shared_prefix_read_once_gives_the_logits_of_a_copied_one(tiny_dir):
    """The sampler's cache keeps the shared prompt once (`share_prefix`) and attention reads it once for every row;
    the logits equal those of a cache where each row holds its own copy — through a prefill of distinct suffixes
    (with holes whose queries see no key of their own), a chunk where one row adds nothing, and a decode step."""
    from agentic_rl.policies.hf.kv_cache import growing_cache, reading_shared_prefix

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    model.set_attn_implementation(NAME)
    g = torch.Generator().manual_seed(1)
    prefix = torch.randint(0, model.config.vocab_size, (1, 12), generator=g)
    rest = torch.randint(0, model.config.vocab_size, (3, 10), generator=g)
    out = {}
    for shared in (False, True):
        cache = growing_cache()
        attn = torch.ones(1, 12, dtype=torch.long)
        with torch.no_grad():
            model(input_ids=prefix, attention_mask=attn, position_ids=torch.arange(12)[None], cache=cache,
                  use_cache=True)
            if shared:
                for layer in cache.layers:
                    layer.share_prefix()
            cache.batch_select_indices(torch.zeros(3, dtype=torch.long))
            attn = attn.expand(3, -1).clone()
            logits = []
            # Row 2 starts with three holes: right after the prefix, those queries have no key of their own.
            chunks = [(rest[:, :6], torch.tensor([[1] * 6, [1] * 6, [0] * 3 + [1] * 3])),
                      (rest[:, 6:9], torch.tensor([[1] * 3, [0] * 3, [0, 1, 1]])),
                      (rest[:, 9:], torch.ones(3, 1, dtype=torch.long))]
            for ids, valid in chunks:
                attn = torch.cat([attn, valid], dim=1)
                seen = attn[:, :-ids.shape[1]].sum(1, keepdim=True)
                pos = (seen + valid.cumsum(1) - 1).clamp(min=0) * valid
                with reading_shared_prefix(model, cache):
                    o = model(input_ids=ids, attention_mask=attn, position_ids=pos, cache=cache, use_cache=True)
                logits.append(o.logits[valid.bool()])
            out[shared] = torch.cat(logits)
        assert cache.get_seq_length() == 12 + 10
    assert torch.isfinite(out[True]).all()
    torch.testing.assert_close(out[True], out[False], rtol=1e-5, atol=1e-5)
