"""Prefill without the last layer's work at positions nobody reads (llama.cpp's "skip unused outputs").

When the sampler prefills several tokens (a prompt, a tool observation) it needs only two things from the model:
the keys and values of every new token, for the KV cache, and the logits after each row's last token. The last
decoder layer's attention output and MLP at the other positions feed neither: keys and values come from each
layer's *input*, and `logits_to_keep=1` reads the last position alone. So under `last_position_only` the last
layer's MLP runs on the last position only (its residual add broadcasts the output) and, with the sampler's
attention (`attention.py`), its queries are the last position alone; the other positions' final hidden states are
left wrong and are never read. The cache is the same bit for bit and the logits agree to float rounding
(tests/policies/test_last_position.py); the time saved is the last layer's MLP and attention at every other position
(docs/design-notes.md#last-position-prefill).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from .attention import LAST_QUERY_ONLY

# Decoder layers that end in `hidden = residual + mlp(post_attention_layernorm(hidden))`, where a (batch, 1, hidden)
# MLP output broadcasts over the positions. Other architectures run unchanged.
PRUNABLE = ("qwen2", "qwen3", "llama", "mistral")


def _last_position(_module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return (args[0][:, -1:, :], *args[1:])


@contextmanager
def last_position_only(model: torch.nn.Module) -> Iterator[None]:
    """Within the block, `model`'s last layer computes only the last position's output. Use only with
    `logits_to_keep=1` and without `output_hidden_states`: the other positions' outputs of that layer are wrong."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if getattr(model.config, "model_type", None) not in PRUNABLE or not layers or not hasattr(layers[-1], "mlp"):
        yield
        return
    handle = layers[-1].mlp.register_forward_pre_hook(_last_position)
    attention = getattr(layers[-1], "self_attn", None)
    if attention is not None:
        setattr(attention, LAST_QUERY_ONLY, True)
    try:
        yield
    finally:
        handle.remove()
        if attention is not None:
            setattr(attention, LAST_QUERY_ONLY, False)
