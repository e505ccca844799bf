"""Induction-head initialisation: the tiny model starts able to copy from its context.

Why. Every `tool_use` task is solved by copying: the entity from the question into the search query, the digits into
the calculator expression, the number from the observation into the answer. Held-out tasks use unseen entities and
numbers, so nothing else generalises. Transformers copy with *induction heads* (Olsson et al. 2022): a head that
writes "the previous token: X" into each position, and a head in the next layer that, at a token X, attends to the
position just after an earlier X and copies what stands there. A ~4M-parameter model trained for minutes on CPU does
not find this circuit by itself, and without it SFT on `tool_use` does not learn to copy
(docs/design-notes.md#induction-head-initialisation).

What. Like mimetic initialisation (Trockman & Kolter 2023), we set the *initial values* of a few weights so that
the circuit is there at step 0; training then learns what to copy and when. The model stays a plain Qwen2: no new
module, no project code at load time. Concretely:
  - layer 0, two heads: previous-token heads (offsets 1 and 2). Their query and key are position-only (biases), phased
    so that RoPE's score peaks at the wanted offset; their value reads the token and their output writes it into a
    random subspace (U1, U2) of the residual stream.
  - layer 1, head 0: a two-token induction head. Its query is [current token, previous token]; its key is [the token
    before, the token two before]; both in the lowest-frequency RoPE dimensions, where a 100-token distance rotates
    by under 0.1 rad (with rope_theta = 1e6, Qwen2's own default), so the match does not depend on distance. Matching
    two tokens rather than one keeps "after the previous space" or "after the previous digit 3" from being ambiguous.
    Its value and output copy the attended token into the residual stream, which the tied unembedding reads out.
  - layer 1, head `group` (the second key/value head): a *recent-context copy head*. Induction copies the rest of a
    span once its first token is out, but nothing above finds where a span starts: the entity after "Who founded",
    the first digit of "870 - 833", the condition in a weather report. This head attends, by position alone, to a
    window of about the last 60 tokens (query and key biases in mid-frequency RoPE pairs, so the score falls off
    like a Gaussian of the distance) and copies what it sees, scaled up (RECENT_COPY) so that even spread thin the
    copy stands out. Every value to be copied then starts with a higher logit than the rest of the vocabulary, and
    its query/key weights, zero at first, get a gradient from the first step to learn *which* recent token to copy.
  - the other heads and the MLPs of layers 0–1 start with zero output, so nothing drowns the circuit's signals;
    they learn from the first step like any other weight.
  - token embeddings start at std 0.2 instead of 0.02, so the circuit's signals stand above the optimizer's first
    updates; at 0.02 the induction pattern fades within the first steps.
`tests/models/test_induction_init.py` checks the attention patterns at step 0 and that copying is learned far sooner.
"""

from __future__ import annotations

import math

import torch
from transformers import Qwen2ForCausalLM

EMBED_STD = 0.2
PREV_AMP = 10.0  # previous-token q/k bias per RoPE pair: sets how sharply the head picks its offset
PREV_WRITE = 0.4  # scale of what the previous-token heads write into the residual stream
MATCH = 3.0  # scale of the induction head's query/key projections
CURRENT_WEIGHT = 2.0  # the current token enters the query unnormalised; this balances it against the written ones
COPY = 1.0  # scale of the induction head's output
RECENT_THETA = (0.005, 0.025)  # RoPE frequencies (rad/token) of the recent-context head's position-only score
RECENT_SCORE = 1.5  # per pair: score(Δ) = RECENT_SCORE · Σ cos(θ_i Δ); ≈ 75 % of the weight within 40 tokens
RECENT_COPY = 10.0  # scale of the recent-context head's output (spread over ~60 tokens, it must still stand out)


def _orthonormal_rows(rows: int, cols: int, g: torch.Generator) -> torch.Tensor:
    return torch.linalg.qr(torch.randn(cols, rows, generator=g))[0].T  # (rows, cols), rows ≤ cols


def _positional_head(attn: torch.nn.Module, head: int, kv: int, hd: int, q_bias: torch.Tensor, k_bias: torch.Tensor,
                     read: torch.Tensor, write: torch.Tensor) -> None:
    """Query head `head` (key/value head `kv`) attends by position alone (zero q/k weights, the given biases); its
    value reads `read` (hd, H) of the residual stream and its output writes through `write` (H, hd)."""
    qs, ks = slice(head * hd, (head + 1) * hd), slice(kv * hd, (kv + 1) * hd)
    attn.q_proj.weight[qs] = 0.0
    attn.q_proj.bias[qs] = q_bias
    attn.k_proj.weight[ks] = 0.0
    attn.k_proj.bias[ks] = k_bias
    attn.v_proj.weight[ks] = read
    attn.v_proj.bias[ks] = 0.0
    attn.o_proj.weight[:, qs] = write


def check_supported(model: Qwen2ForCausalLM) -> None:
    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    if cfg.num_hidden_layers < 2 or cfg.num_key_value_heads < 2 or head_dim < 8:
        raise ValueError("induction init needs ≥ 2 layers, ≥ 2 key/value heads and head_dim ≥ 8; got "
                         f"{cfg.num_hidden_layers} layers, {cfg.num_key_value_heads} kv heads, head_dim {head_dim}")


@torch.no_grad()
def install_induction_heads(model: Qwen2ForCausalLM, seed: int = 0) -> None:
    """Overwrite the initial weights of layers 0–1 (and the embeddings) so the model copies in context at step 0."""
    check_supported(model)
    cfg = model.config
    H, n_heads = cfg.hidden_size, cfg.num_attention_heads
    hd = H // n_heads
    half = hd // 2  # RoPE pairs dimension i with i + half, rotating by theta_i per position
    group = n_heads // cfg.num_key_value_heads  # query heads per key/value head
    base = cfg.rope_parameters["rope_theta"]
    theta = [base ** (-2 * i / hd) for i in range(half)]
    g = torch.Generator().manual_seed(seed)

    model.model.embed_tokens.weight.normal_(0.0, EMBED_STD, generator=g)
    read = _orthonormal_rows(hd, H, g)  # what a previous-token head reads of a token: hd random directions

    # Layer 0: query head 0 (kv head 0) looks 1 back, query head `group` (kv head 1) looks 2 back. The high-frequency
    # pairs tell neighbouring positions apart; for pair i, q = amp·(cos a, sin a) and k = amp·(cos(a + off·θ_i), …)
    # make q·R(Δ)k largest at Δ = −off.
    attn0 = model.model.layers[0].self_attn
    writes = []
    for offset, head in ((1, 0), (2, group)):
        kv = head // group
        q_bias, k_bias = torch.zeros(hd), torch.zeros(hd)
        for i in range(max(1, half // 2)):
            a = float(torch.rand(1, generator=g)) * 2 * math.pi
            q_bias[i], q_bias[i + half] = PREV_AMP * math.cos(a), PREV_AMP * math.sin(a)
            b = a + offset * theta[i]
            k_bias[i], k_bias[i + half] = PREV_AMP * math.cos(b), PREV_AMP * math.sin(b)
        write = _orthonormal_rows(hd, H, g).T  # (H, hd): where this head's output lands
        writes.append(write)
        _positional_head(attn0, head, kv, hd, q_bias, k_bias, read, write * PREV_WRITE)
    prev1, prev2 = writes

    # Silence everything else in layers 0–1 at the start.
    for layer, keep in ((0, {0, group}), (1, {0, group})):
        block = model.model.layers[layer]
        for h in set(range(n_heads)) - keep:
            block.self_attn.o_proj.weight[:, h * hd:(h + 1) * hd] = 0.0
        block.mlp.down_proj.weight.zero_()

    # Layer 1, head 0: score = [cur, prev1](query) · [prev1, prev2](key), each block in the low-frequency pairs.
    low = list(range(half // 2, half))
    n_block = max(1, len(low) // 2)
    dims_a = low[:n_block] + [i + half for i in low[:n_block]]
    dims_b = low[n_block:2 * n_block] + [i + half for i in low[n_block:2 * n_block]]
    proj_a, proj_b = _orthonormal_rows(2 * n_block, hd, g), _orthonormal_rows(2 * n_block, hd, g)
    w_q, w_k = torch.zeros(hd, H), torch.zeros(hd, H)
    w_q[dims_a] = MATCH * CURRENT_WEIGHT * (proj_a @ read)  # the current token, seen as layer 0 reads tokens
    w_k[dims_a] = MATCH * (proj_a @ prev1.T)  # the token before the key
    w_q[dims_b] = MATCH * (proj_b @ prev1.T)  # the token before the query
    w_k[dims_b] = MATCH * (proj_b @ prev2.T)  # the token two before the key
    copy = _orthonormal_rows(hd, H, g)
    attn1 = model.model.layers[1].self_attn
    attn1.q_proj.weight[:hd] = w_q
    attn1.q_proj.bias[:hd] = 0.0
    attn1.k_proj.weight[:hd] = w_k
    attn1.k_proj.bias[:hd] = 0.0
    attn1.v_proj.weight[:hd] = copy
    attn1.v_proj.bias[:hd] = 0.0
    attn1.o_proj.weight[:, :hd] = copy.T * COPY

    # Layer 1, head `group` (key/value head 1): the recent-context copy head. Equal query and key biases of size c
    # in pair i give score c²/√hd · cos(θ_i Δ), largest at distance Δ = 0 and falling off with it; the pairs with
    # θ_i in RECENT_THETA make that a window of some tens of tokens (and their sum does not come back up within a
    # few thousand). Its query/key weights start at zero, so at first it attends by position alone.
    pairs = [i for i in range(half) if RECENT_THETA[0] <= theta[i] <= RECENT_THETA[1]]
    if not pairs:
        raise ValueError(f"no RoPE frequency of this model lies in {RECENT_THETA} (rope_theta {base}, head_dim {hd})")
    c = math.sqrt(RECENT_SCORE * math.sqrt(hd))
    recent_bias = torch.zeros(hd)
    for i in pairs:
        a = float(torch.rand(1, generator=g)) * 2 * math.pi
        recent_bias[i], recent_bias[i + half] = c * math.cos(a), c * math.sin(a)
    recent_copy = _orthonormal_rows(hd, H, g)
    _positional_head(attn1, group, 1, hd, recent_bias, recent_bias, recent_copy, recent_copy.T * RECENT_COPY)
