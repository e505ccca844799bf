"""Grouped-query attention over a KV cache without copying the cache (`sdpa_packed_gqa`).

Transformers' `sdpa` attention, given an explicit mask and several query tokens on CPU, expands every key/value
head to its query heads (`repeat_kv`) before calling scaled_dot_product_attention: each prefill of a tool
observation copies the whole KV cache (n_rep × its size, every layer), a large share of the prefill's time over a
long context. Here the query heads that share a key/value head are packed into one head with n_rep × q query rows
instead — the mask repeated to match — which is the same attention without the copy. Transformers already does this
for a single query token (`pack_gqa`, decoding); this extends it to q > 1. The trainers' forward (train/logprobs.py:
a shared prefix in the cache, each row's suffix masked) takes the same path, and its backward saves the copy too
(docs/design-notes.md#packed-gqa-attention).

Everything else (no mask, one query token, no grouped heads, dropout, position bias, softcapping, head-specific
masks) goes to transformers' own `sdpa_attention_forward` unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "sdpa_packed_gqa"


# Set on an attention module by `last_position.py` while only its last query position's output will be read.
LAST_QUERY_ONLY = "_agentic_rl_last_query_only"


def packed_gqa_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Same signature and result as `sdpa_attention_forward`: returns (batch, q, heads, head_dim), None."""
    q_len = query.shape[2]
    if q_len > 1 and getattr(module, LAST_QUERY_ONLY, False):
        # Attend from the last position alone (it sees every key: the causal mask's last row, or the given one's);
        # the other positions' outputs stay zero and are never read.
        mask = attention_mask[:, :, -1:] if attention_mask is not None else None
        last, _ = packed_gqa_sdpa(module, query[:, :, -1:], key, value, mask, **kwargs)
        out = last.new_zeros(last.shape[0], q_len, *last.shape[2:])
        out[:, -1:] = last
        return out, None
    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, q_len, dim = query.shape
    if (groups == 1 or q_len == 1 or attention_mask is None or attention_mask.shape[1] != 1
            or kwargs.get("dropout") or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    # Heads h = k·groups + r all read key/value head k: stack their queries as groups·q rows of head k.
    packed = query.reshape(batch, heads // groups, groups * q_len, dim)
    mask = attention_mask.expand(-1, groups, -1, -1).reshape(attention_mask.shape[0], 1, groups * q_len, -1)
    out = torch.nn.functional.scaled_dot_product_attention(packed, key, value, attn_mask=mask,
                                                           scale=kwargs.get("scaling"))
    return out.reshape(batch, heads, q_len, value.shape[-1]).transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, packed_gqa_sdpa)
AttentionMaskInterface.register(NAME, sdpa_mask)
