"""A KV cache that appends in place: the sampler's cache, faster than HF's DynamicCache for long multi-turn episodes.

HF's DynamicCache appends each new token with `torch.cat`, copying every layer's whole cache on every decode step:
O(L) work per token, a large share of a multi-turn rollout's time on CPU (docs/design-notes.md#the-samplers-kv-cache).
Here each layer keeps its keys and values in a buffer with spare capacity along the sequence (doubled when full),
writes new tokens into the next slots, and hands attention a view of the filled part. Same values, same attention;
only the copying is gone.

A shared prefix (the system prompt every episode of a batch starts with) can be kept once instead of once per row:
`share_prefix` turns a one-row cache's content into keys and values that every later row reads, and
`reading_shared_prefix` hands them to the sampler's attention (`attention.py`), which attends to them once for all
rows. The layer then reports prefix + row length, so masks and positions are as if each row held the prefix.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers.cache_utils import Cache, DynamicLayer

from .attention import SHARED_PREFIX

MIN_CAPACITY = 64


class GrowingLayer(DynamicLayer):
    """One layer's keys and values in a buffer [batch, heads, capacity, head_dim]; `keys`/`values` view the filled
    part."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.length = 0
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None
        self.prefix: tuple[torch.Tensor, torch.Tensor] | None = None  # (keys, values), batch 1, read by every row

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
        if not self.is_initialized:
            return 0
        return self.length + (self.prefix[0].shape[-2] if self.prefix is not None else 0)

    def share_prefix(self) -> None:
        """Make this one-row layer's tokens the prefix every row reads; the rows start empty after it."""
        if not self.is_initialized or not self.length:
            return
        if self.prefix is not None or self.keys.shape[0] != 1:
            raise ValueError("share_prefix takes a one-row cache without a prefix")
        self.prefix = (self.keys.clone(), self.values.clone())
        self._k = self._v = None
        self.length = 0
        self.keys, self.values = self.prefix[0][..., :0, :], self.prefix[1][..., :0, :]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep (or repeat: a shared prefix copied to several rows) the rows in `indices`."""
        if self.is_initialized and self.length and self._k is not None and self._v is not None:
            self._k, self._v = self._k[indices], self._v[indices]
            self._expose()

    def replace(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Hold these keys and values (rows, heads, slots, dim) as its own, with spare capacity to grow into."""
        self._k = self._v = None
        self.length = 0
        self._grow(keys, values, max(MIN_CAPACITY, 2 * keys.shape[-2]))
        assert self._k is not None and self._v is not None
        self._k[..., :keys.shape[-2], :] = keys
        self._v[..., :values.shape[-2], :] = values
        self.length = keys.shape[-2]
        self._expose()

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("the sampler never crops its cache")

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("the sampler shares prefixes with batch_select_indices")


def growing_cache() -> Cache:
    """An empty cache of GrowingLayer, one per model layer as the model first writes to it."""
    return Cache(layer_class_to_replicate=GrowingLayer)


def cache_reading_prefix(cache: Cache) -> Cache:
    """An empty cache whose layers read `cache`'s shared prefix (if any): rows prefilled in it can join `cache`
    (`join_rows`)."""
    layers = []
    for old in cache.layers:
        layer = GrowingLayer()
        if old.is_initialized:
            layer.lazy_initialization(old.keys, old.values)
            if old.prefix is not None:
                layer.prefix = old.prefix
                layer.keys, layer.values = old.prefix[0][..., :0, :], old.prefix[1][..., :0, :]
        layers.append(layer)
    return Cache(layers=layers)


def shorten_prefix(cache: Cache, length: int) -> None:
    """Share only the first `length` tokens of the prefix: every row gets its own copy of the rest, in front of its
    own tokens (so that rows whose prompts share less of it can join). The attention mask stays as it is."""
    for layer in cache.layers:
        if layer.prefix is None or layer.prefix[0].shape[-2] <= length:
            continue
        rows = layer.keys.shape[0]
        moved = [torch.cat([p[..., length:, :].expand(rows, -1, -1, -1), own], dim=2)
                 for p, own in zip(layer.prefix, (layer.keys, layer.values))]
        layer.prefix = (layer.prefix[0][..., :length, :], layer.prefix[1][..., :length, :]) if length else None
        layer.replace(*moved)


def take_rows(cache: Cache, attn: torch.Tensor, rows: list[int], empty: int, prefix: int
              ) -> tuple[Cache, torch.Tensor]:
    """A new cache reading `cache`'s shared prefix (`prefix` slots), holding copies of its `rows` (each row's tokens
    right-aligned), then `empty` rows without tokens; and its attention mask."""
    new = cache_reading_prefix(cache)
    own = attn[rows, prefix:]
    length = int(own.sum(dim=1).max()) if rows else 0
    index = torch.sort(own, dim=1, stable=True).indices[:, own.shape[1] - length:]
    picked = torch.tensor(rows, dtype=torch.long, device=attn.device)
    if rows:
        for layer, copy in zip(cache.layers, new.layers):
            parts = []
            for kv in ("keys", "values"):
                t = getattr(layer, kv)[picked]
                t = t.gather(2, index[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[-1]))
                parts.append(torch.cat([t, t.new_zeros(empty, *t.shape[1:])]))
            copy.replace(*parts)
    packed = torch.cat([own.gather(1, index), own.new_zeros(empty, length)])
    return new, torch.cat([attn.new_ones(len(rows) + empty, prefix), packed], dim=1)


def join_rows(cache: Cache, attn: torch.Tensor, keep: list[int], new: Cache | None, new_attn: torch.Tensor | None,
              prefix: int) -> torch.Tensor:
    """Make `cache` hold its rows `keep`, then every row of `new` if given (both read the same shared prefix of
    `prefix` slots, if any); returns the joined attention mask (rows, prefix + slots).

    Each row's own tokens are moved right-aligned, in order, and the slots no row uses any more (the holes before
    rows that joined late, rows that left) are dropped: the cache is as long as its longest row."""
    own = [attn[keep, prefix:]] + ([] if new_attn is None else [new_attn[:, prefix:]])
    width = max(o.shape[1] for o in own)
    valid = torch.cat([torch.nn.functional.pad(o, (width - o.shape[1], 0)) for o in own])
    length = int(valid.sum(dim=1).max())
    # per row: the slots it does not use first, then its tokens in order; the last `length` of them are kept
    index = torch.sort(valid, dim=1, stable=True).indices[:, width - length:]
    rows = torch.tensor(keep, dtype=torch.long, device=attn.device)
    for k, layer in enumerate(cache.layers):
        parts = []
        for kv in ("keys", "values"):
            both = [getattr(layer, kv)[rows]] + ([] if new is None else [getattr(new.layers[k], kv)])
            padded = torch.cat([torch.nn.functional.pad(t, (0, 0, width - t.shape[-2], 0)) for t in both])
            parts.append(padded.gather(2, index[:, None, :, None].expand(-1, padded.shape[1], -1, padded.shape[-1])))
        layer.replace(*parts)
    packed = valid.gather(1, index)
    return torch.cat([attn.new_ones(packed.shape[0], prefix), packed], dim=1)


def decoder_attention(model: torch.nn.Module) -> list[torch.nn.Module] | None:
    """The attention module of each decoder layer, in cache-layer order, or None where the model is laid out
    otherwise (then no prefix is shared)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    attention = [getattr(layer, "self_attn", None) for layer in layers or []]
    if not attention or any(a is None or getattr(a, "layer_idx", None) != i for i, a in enumerate(attention)):
        return None
    return attention


@contextmanager
def reading_shared_prefix(model: torch.nn.Module, cache: Cache | None) -> Iterator[None]:
    """Within the block, each attention module of `model` sees its cache layer's shared prefix (if any)."""
    attention = decoder_attention(model) if cache is not None else None
    layers = list(getattr(cache, "layers", []))
    if not attention or not any(getattr(layer, "prefix", None) is not None for layer in layers):
        yield
        return
    for module, layer in zip(attention, layers):
        setattr(module, SHARED_PREFIX, layer.prefix)
    try:
        yield
    finally:
        for module in attention:
            setattr(module, SHARED_PREFIX, None)
