"""A KV cache that appends in place: the sampler's cache, faster than HF's DynamicCache for long multi-turn episodes.

HF's DynamicCache appends each new token with `torch.cat`, copying every layer's whole cache on every decode step:
O(L) work per token, a large share of a multi-turn rollout's time on CPU (docs/design-notes.md#the-samplers-kv-cache).
Here each layer keeps its keys and values in a buffer with spare capacity along the sequence (doubled when full),
writes new tokens into the next slots, and hands attention a view of the filled part. Same values, same attention;
only the copying is gone.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

MIN_CAPACITY = 64


class GrowingLayer(DynamicLayer):
    """One layer's keys and values in a buffer [batch, heads, capacity, head_dim]; `keys`/`values` view the filled
    part."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.length = 0
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        need = self.length + key_states.shape[-2]
        if self._k is None or self._v is None or need > self._k.shape[-2]:
            self._grow(key_states, value_states, max(MIN_CAPACITY, 2 * need))
        assert self._k is not None and self._v is not None
        self._k[..., self.length:need, :] = key_states
        self._v[..., self.length:need, :] = value_states
        self.length = need
        self._expose()
        return self.keys, self.values

    def _grow(self, key_states: torch.Tensor, value_states: torch.Tensor, capacity: int) -> None:
        batch, heads, _, dim = key_states.shape
        k = key_states.new_empty(batch, heads, capacity, dim)
        v = value_states.new_empty(batch, heads, capacity, value_states.shape[-1])
        if self.length and self._k is not None and self._v is not None:
            k[..., :self.length, :] = self._k[..., :self.length, :]
            v[..., :self.length, :] = self._v[..., :self.length, :]
        self._k, self._v = k, v

    def _expose(self) -> None:
        assert self._k is not None and self._v is not None
        self.keys, self.values = self._k[..., :self.length, :], self._v[..., :self.length, :]

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep (or repeat: a shared prefix copied to several rows) the rows in `indices`."""
        if self.is_initialized and self.length and self._k is not None and self._v is not None:
            self._k, self._v = self._k[indices], self._v[indices]
            self._expose()

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("the sampler never crops its cache")

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("the sampler shares prefixes with batch_select_indices")


def growing_cache() -> Cache:
    """An empty cache of GrowingLayer, one per model layer as the model first writes to it."""
    return Cache(layer_class_to_replicate=GrowingLayer)
