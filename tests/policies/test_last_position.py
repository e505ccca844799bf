"""Skipping the last layer's work at the positions nobody reads leaves the KV cache the same and the logits sampled
from the same to float rounding, through a prompt prefill, multi-token observation prefills (with masked holes, as
the sampler feeds them) and decoding."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from agentic_rl.policies.hf.attention import LAST_QUERY_ONLY
from agentic_rl.policies.hf.attention import NAME as PACKED_GQA
from agentic_rl.policies.hf.kv_cache import growing_cache
from agentic_rl.policies.hf.last_position import last_position_only


def _model(tiny_dir):
    """The tiny model with a random last layer: the untrained preset starts some attention heads and MLPs at zero
    output, which would make skipping them trivially harmless."""
    model = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    model.set_attn_implementation(PACKED_GQA)  # the sampler's attention, which reads the last-query flag
    g, last = torch.Generator().manual_seed(1), model.model.layers[-1]
    with torch.no_grad():
        for linear in (last.self_attn.q_proj, last.self_attn.k_proj, last.self_attn.o_proj, last.mlp.down_proj):
            linear.weight.normal_(0, 0.05, generator=g)
    return model


def _run(model, pruned: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    cache, logits = growing_cache(), []
    with torch.no_grad():
        attn, seen = torch.zeros(3, 0, dtype=torch.long), 0
        for width in (40, 1, 1, 21, 1, 7):  # prompt, decode, observation, decode, observation
            ids = torch.randint(0, model.config.vocab_size, (3, width), generator=g)
            valid = torch.ones(3, width, dtype=torch.long)
            valid[0, : width // 2] = 0  # row 0 feeds fewer tokens: holes on the left, as in the sampler
            attn = torch.cat([attn, valid], dim=1)
            pos = torch.arange(seen, seen + width).expand(3, width)
            seen += width
            kwargs = dict(input_ids=ids, attention_mask=attn, position_ids=pos, cache=cache, use_cache=True,
                          logits_to_keep=1)
            if pruned:
                with last_position_only(model):
                    out = model(**kwargs)
            else:
                out = model(**kwargs)
            logits.append(out.logits[:, -1])
    return logits, [layer.keys for layer in cache.layers] + [layer.values for layer in cache.layers]


def test_pruned_prefill_gives_the_same_logits_and_cache(tiny_dir):
    model = _model(tiny_dir)
    (full_logits, full_kv), (pruned_logits, pruned_kv) = _run(model, False), _run(model, True)
    for a, b in zip(full_logits, pruned_logits):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for a, b in zip(full_kv, pruned_kv):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_the_hook_is_gone_after_the_block(tiny_dir):
    model = _model(tiny_dir)
    ids = torch.arange(12).unsqueeze(0)
    with last_position_only(model):
        pass
    with torch.no_grad():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states[-1]
        with last_position_only(model):
            pruned = model(input_ids=ids, output_hidden_states=True).hidden_states[-1]
    assert not model.model.layers[-1].mlp._forward_pre_hooks
    assert not getattr(model.model.layers[-1].self_attn, LAST_QUERY_ONLY)
    # Inside the block the non-final positions skip the last layer's work (so they differ); the last one is the same.
    assert not torch.allclose(hidden[:, :-1], pruned[:, :-1])
    torch.testing.assert_close(hidden[:, -1], pruned[:, -1], rtol=1e-6, atol=1e-6)
