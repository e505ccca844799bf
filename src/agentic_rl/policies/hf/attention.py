"""Grouped-query attention over a KV cache without copying the cache (`sdpa_packed_gqa`).

Transformers' `sdpa` attention, given an explicit mask and several query tokens on CPU, expands every key/value
head to its query heads (`repeat_kv`) before calling scaled_dot_product_attention: each prefill of a tool
observation copies the whole KV cache (n_rep × its size, every layer), a large share of the prefill's time over a
long context. Here the query heads that share a key/value head are packed into one head with n_rep × q query rows
instead — the mask repeated to match — which is the same attention without the copy. Transformers already does this
for a single query token (`pack_gqa`, decoding); this extends it to q > 1. The trainers' forward (train/logprobs.py:
a shared prefix in the cache, each row's suffix masked) takes the same path, and its backward saves the copy too
(docs/design-notes.md#packed-gqa-attention).

With a shared prefix (`kv_cache.py`: the system prompt's keys and values kept once, not once per row), each row's
attention is split in two and merged by log-sum-exp, as cascade attention does: every row's queries attend to the
prefix in one call of batch 1 (the prefix is read once, not once per row), and to the row's own keys under its
mask in another. On the CPU both calls are PyTorch's flash-attention kernel, which returns the log-sum-exp the merge
needs; elsewhere the prefix is copied in front of each row's keys and attention runs as without it.

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
# Set on an attention module by `kv_cache.reading_shared_prefix`: (keys, values) of batch 1 that precede every row's
# own keys, which the cache hands attention without them.
SHARED_PREFIX = "_agentic_rl_shared_prefix"


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
    prefix = getattr(module, SHARED_PREFIX, None)
    if prefix is not None:
        extras = kwargs.get("dropout") or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None
        mask_ok = attention_mask.shape[1] == 1 if attention_mask is not None else q_len == 1
        if query.device.type == "cpu" and mask_ok and not extras:
            return _with_shared_prefix(query, key, value, attention_mask, prefix, groups, kwargs.get("scaling"))
        key = torch.cat([prefix[0].expand(batch, -1, -1, -1), key], dim=2)
        value = torch.cat([prefix[1].expand(batch, -1, -1, -1), value], dim=2)
    if (groups == 1 or q_len == 1 or attention_mask is None or attention_mask.shape[1] != 1
            or kwargs.get("dropout") or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    # Heads h = k·groups + r all read key/value head k: stack their queries as groups·q rows of head k.
    packed = query.reshape(batch, heads // groups, groups * q_len, dim)
    mask = attention_mask.expand(-1, groups, -1, -1).reshape(attention_mask.shape[0], 1, groups * q_len, -1)
    out = torch.nn.functional.scaled_dot_product_attention(packed, key, value, attn_mask=mask,
                                                           scale=kwargs.get("scaling"))
    return out.reshape(batch, heads, q_len, value.shape[-1]).transpose(1, 2).contiguous(), None


def _with_shared_prefix(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                        prefix: tuple[torch.Tensor, torch.Tensor], groups: int, scale: float | None
                        ) -> tuple[torch.Tensor, None]:
    """Attention over [prefix, the row's own keys] as two flash-attention calls merged by their log-sum-exps.

    query (batch, heads, q, dim); key/value (batch, kv_heads, own length, dim); mask (batch, 1, q, prefix + own
    length), boolean or additive, or None (one query that sees every key); prefix keys/values (1, kv_heads, P, dim).
    Every query sees the whole prefix: it precedes every row's tokens (rows are copied from it after the prefill)."""
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    # Under bf16 autocast the projections disagree (rotary embeddings give fp32 queries and keys, values stay bf16);
    # scaled_dot_product_attention is cast by autocast, this kernel is not: cast as autocast would.
    dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else query.dtype
    query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)
    prefix = (prefix[0].to(dtype), prefix[1].to(dtype))
    batch, heads, q_len, dim = query.shape
    kv_heads, plen = heads // groups, prefix[0].shape[-2]
    rows = groups * q_len  # the query heads sharing a key/value head, packed as rows of that head
    packed = query.reshape(batch, kv_heads, rows, dim)
    # 1. The prefix, read once: all rows' queries as one sequence of batch 1, no mask.
    everyone = packed.transpose(0, 1).reshape(1, kv_heads, batch * rows, dim)
    out_p, lse_p = flash(everyone, prefix[0], prefix[1], scale=scale)
    out_p = out_p.reshape(kv_heads, batch, rows, -1).transpose(0, 1)
    lse_p = lse_p.reshape(kv_heads, batch, rows).transpose(0, 1)
    # 2. Each row's own keys under its mask (the kernel takes an additive mask of the query's dtype).
    own = None
    if mask is not None:
        own = mask[..., plen:]
        if own.dtype == torch.bool:
            own = torch.zeros(own.shape, dtype=query.dtype, device=query.device).masked_fill_(~own, float("-inf"))
        own = own.to(query.dtype).expand(-1, groups, -1, -1).reshape(batch, 1, rows, -1)
    out_r, lse_r = flash(packed, key, value, attn_mask=own, scale=scale)
    # 3. Merge: softmax over the union = the two partial results weighted by their shares of the normaliser. A valid
    # query always sees itself among its own keys; only a hole's query can see none of them, and the kernel then
    # gives it output 0 (not NaN) — a wrong but finite value nobody reads (a hole's key is masked for every query).
    top = torch.maximum(lse_p, lse_r)
    w_p, w_r = (lse_p - top).exp()[..., None], (lse_r - top).exp()[..., None]
    out = (out_p.float() * w_p + out_r.float() * w_r) / (w_p + w_r)
    return out.to(query.dtype).reshape(batch, heads, q_len, value.shape[-1]).transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, packed_gqa_sdpa)
AttentionMaskInterface.register(NAME, sdpa_mask)
