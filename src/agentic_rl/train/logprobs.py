"""Per-token logprobs of whole sequences under a causal LM, computing a shared prefix once.

Every episode of one env opens with the same system prompt (the tool schemas): often most of its tokens. Training
SFT or GRPO on full sequences would spend most of its compute re-encoding that prefix for every row. Here the
longest common prefix of the micro-batch is run once (batch 1), its KV cache is expanded to all rows, and only the
rows' own suffixes are run on top; a `SharedPrefix` goes one step further and runs a whole batch's prefix once for
all of its micro-batches. Gradients flow through the prefix as usual, so the result is the same as a
plain forward over each sequence — `tests/train/test_logprobs.py` checks values and gradients against one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache


def common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    first, n = seqs[0], min(len(s) for s in seqs)
    for i in range(n):
        t = first[i]
        if any(s[i] != t for s in seqs):
            return i
    return n


def micro_batches(seqs: Sequence[Sequence[int]], max_rows: int, max_tokens: int | None = None,
                  max_pad: float | None = None) -> list[list[int]]:
    """Row indices of `seqs` grouped into micro-batches for `sequence_logprobs`, shortest rows first.

    A micro-batch is padded to its longest row, and episodes differ a lot in length (a one-turn answer vs a four-turn
    recovery), so in arrival order much of a micro-batch is padding — computed, backpropagated and thrown away
    (docs/design-notes.md#micro-batches-and-the-shared-prefix). Sorted by length, neighbours pad little. Each
    micro-batch holds at most `max_rows` rows and, with `max_tokens`, at most that many padded positions beyond the
    prefix every row shares (which `sequence_logprobs` runs once per micro-batch): many short rows go together, long
    rows in smaller groups (verl's dynamic batch size does the same). A row longer than the budget gets a micro-batch of
    its own. With `max_pad`, a micro-batch also closes before padding would exceed that share of its positions
    beyond the shared prefix: a task's G samples (a one-turn answer beside a four-turn recovery) are too few to sort
    into neighbours, so most of their positions could be padding. The sort is stable, so the grouping is a
    function of the lengths alone (resumed runs see the same).
    """
    if max_rows < 1 or (max_tokens is not None and max_tokens < 1):
        raise ValueError(f"micro-batch limits must be ≥ 1, got max_rows={max_rows}, max_tokens={max_tokens}")
    if not seqs:
        return []
    shared = common_prefix_len(seqs)
    out: list[list[int]] = []
    cur: list[int] = []
    real = 0  # positions of the rows in `cur` beyond the shared prefix
    for i in sorted(range(len(seqs)), key=lambda i: len(seqs[i])):
        rows, longest = len(cur) + 1, len(seqs[i]) - shared  # sorted: row i is the longest so far
        padded = rows * longest
        if cur and (rows > max_rows or (max_tokens is not None and padded > max_tokens)
                    or (max_pad is not None and padded - real - longest > max_pad * padded)):
            out.append(cur)
            cur, real = [], 0
        cur.append(i)
        real += longest
    return out + [cur]


class SharedPrefix:
    """The prefix every row of a whole batch shares, run once for all of the batch's micro-batches.

    Per micro-batch, `sequence_logprobs` runs the micro-batch's common prefix (the system prompt) again: a sizeable
    share of a step when the prompt is long, and more micro-batches, which would pad less, cost one more run each. Given
    a SharedPrefix, `sequence_logprobs` attends to its keys and values instead. Their gradients collect on detached
    copies across the micro-batches' backward passes, and `backward()`, called once after the last of them, sends the
    sum through the prefix's own graph — the same gradient as running the prefix in every micro-batch
    (tests/train/test_logprobs.py checks it).
    """

    def __init__(self, model: Any, seqs: Sequence[Sequence[int]], min_shared: int = 16):
        # Keep at least one token per row outside the prefix so every row has a suffix to run.
        length = min(common_prefix_len(seqs), min(len(s) for s in seqs) - 1) if len(seqs) > 1 else 0
        self.length = length if length >= min_shared else 0
        self.ids = list(seqs[0][: self.length]) if seqs else []
        self._roots: list[torch.Tensor] = []
        self._leaves: list[torch.Tensor] = []
        if self.length:
            dev = next(model.parameters()).device
            cache = DynamicCache(config=model.config)
            hidden = model.get_decoder()(input_ids=torch.tensor([self.ids], device=dev), cache=cache,
                                         use_cache=True).last_hidden_state  # (1, P, H)
            self._roots = [hidden] + [t for layer in cache.layers for t in (layer.keys, layer.values)]
            self._leaves = [t.detach().requires_grad_(t.requires_grad) for t in self._roots]

    def expanded(self, model: Any, rows: int) -> tuple[torch.Tensor, DynamicCache]:
        """The prefix's hidden states (rows, P, H) and a fresh cache holding its keys/values for `rows` rows."""
        cache = DynamicCache(config=model.config)
        for i in range(len(self._leaves) // 2):
            k, v = self._leaves[1 + 2 * i], self._leaves[2 + 2 * i]
            cache.update(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1), i)
        return self._leaves[0].expand(rows, -1, -1), cache

    def backward(self) -> None:
        """Send the gradients the micro-batches left on the prefix through its forward pass (once)."""
        pairs = [(r, leaf.grad) for r, leaf in zip(self._roots, self._leaves) if leaf.grad is not None]
        if pairs:
            torch.autograd.backward([r for r, _ in pairs], [g for _, g in pairs])
        self._roots, self._leaves = [], []


def sequence_logprobs(model: Any, seqs: Sequence[Sequence[int]], temperature: float = 1.0,
                      with_entropy: bool = False, masks: Sequence[Sequence[int]] | None = None,
                      min_shared: int = 16, prefix: SharedPrefix | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logp[b, t] = log p(seqs[b][t] | seqs[b][:t]) under logits / temperature; 0 at t = 0 and on padding.

    With `masks`, only positions where masks[b][t] == 1 are computed (the rest are 0): the vocabulary projection
    is most of the cost for a small model, and a trainer needs it only on the policy's tokens.
    With `prefix` (a SharedPrefix of a batch these rows belong to), its prefix is not run again; call its
    `backward()` after the last micro-batch's.
    Returns (logp, entropy) with shape (B, T_max); entropy (of the full next-token distribution) only when asked.
    """
    B, T = len(seqs), max(len(s) for s in seqs)
    if prefix is not None and prefix.length:
        P = prefix.length
        if any(list(s[:P]) != prefix.ids for s in seqs):
            raise ValueError("sequence_logprobs: these rows do not start with the SharedPrefix given; build it "
                             "from the whole batch these micro-batch rows come from")
    else:
        # Keep at least one token per row outside the prefix so every row has a suffix to run.
        P = min(common_prefix_len(seqs), min(len(s) for s in seqs) - 1)
        if B == 1 or min_shared > P:
            P = 0
    dev = next(model.parameters()).device
    ids = torch.zeros(B, T, dtype=torch.long, device=dev)
    want = torch.zeros(B, T, dtype=torch.bool, device=dev)
    valid = torch.zeros(B, T, dtype=torch.long, device=dev)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.as_tensor(list(s), device=dev)
        valid[b, : len(s)] = 1
        want[b, 1: len(s)] = True if masks is None else torch.as_tensor(list(masks[b][1:]), device=dev).bool()

    base, head = model.get_decoder(), model.get_output_embeddings()
    if P > 0:
        if prefix is not None and prefix.length:
            prefix_h, cache = prefix.expanded(model, B)
        else:
            cache = DynamicCache(config=model.config)
            prefix_h = base(input_ids=ids[:1, :P], cache=cache, use_cache=True).last_hidden_state  # (1, P, H)
            cache.batch_repeat_interleave(B)
            prefix_h = prefix_h.expand(B, -1, -1)
        pos = torch.arange(P, T, device=dev).expand(B, T - P)
        attn = torch.cat([torch.ones(B, P, dtype=torch.long, device=dev), valid[:, P:]], dim=1)
        suffix_h = base(input_ids=ids[:, P:], attention_mask=attn, position_ids=pos, cache=cache,
                        use_cache=True).last_hidden_state  # (B, T-P, H)
        hidden = torch.cat([prefix_h, suffix_h], dim=1)  # (B, T, H)
    else:
        hidden = base(input_ids=ids, attention_mask=valid).last_hidden_state  # (B, T, H)

    # The hidden state at t-1 predicts token t: project only the wanted positions onto the vocabulary.
    # It runs in fp32 even under bf16 autocast (device.py): logprobs and the loss are read off these logits.
    b_idx, t_idx = want.nonzero(as_tuple=True)
    with torch.autocast(dev.type, enabled=False):
        h = hidden[b_idx, t_idx - 1].to(head.weight.dtype)
        logits = head(h).float() / (temperature if temperature > 0 else 1.0)  # (N, V)
    logz = torch.logsumexp(logits, dim=-1)  # (N,)
    tok_logp = logits.gather(-1, ids[b_idx, t_idx].unsqueeze(-1)).squeeze(-1) - logz  # (N,)
    logp = torch.zeros(B, T, device=dev, dtype=tok_logp.dtype).index_put((b_idx, t_idx), tok_logp)
    entropy = None
    if with_entropy:
        p = F.softmax(logits, dim=-1)
        ent = logz - (p * logits).sum(-1)  # H = log Z − E_p[logit]
        entropy = torch.zeros(B, T, device=dev, dtype=ent.dtype).index_put((b_idx, t_idx), ent)
    return logp, entropy
