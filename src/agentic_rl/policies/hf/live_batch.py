"""A batch that requests join while it decodes: the gateway's continuous batching over the sampler's KV cache.

The scheduler (`serve/engine.py`) calls `admit` between decode steps and `step` to sample one token for every
running request. The first requests of a batch are prefilled as the sampler prefills a batch (the prompt prefix
they share kept once, `kv_cache.py`). Later requests are prefilled apart, reading that same prefix — shortened first
if their prompts share less of it (`kv_cache.shorten_prefix`) — and their rows join the cache, each row's tokens
right-aligned and the slots no row uses dropped (`kv_cache.join_rows`), so the next step samples them with the rest.
A finished request leaves at once; its row is dropped when a quarter of the rows are finished, when others join, or
when the batch goes idle (the cache then holds the parked rows only).

A request of a session (an agent's rollout) keeps its row after its turn ("parked"): the session's next request,
whose prompt extends the ids sampled so far (the gateway's records guarantee it), continues in that row and
prefills only its new tokens (the tool's reply), as the in-process sampler does between turns. A parked row is
dropped when the session is released, when it is not resumed within PARK_STEPS decode steps, when the session's
next request does not extend it, or when more than `max_parked` rows are parked (the longest-parked goes: its
session's next request is prefilled whole, as a new one). Parked rows sit in the cache every step reads, so the cap
bounds both the memory and the time a step takes however many rollouts are open.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from ...envs.base import stable_hash
from ...train.logprobs import common_prefix_len
from .kv_cache import join_rows, shorten_prefix, take_rows
from .sampler import HFPolicy, HFSession, SampledTurn, TurnRequest, _EpisodeTokens

PARK_STEPS = 256  # decode steps a parked row waits for its session's next request
MAX_PARKED = 16  # rows parked at once


class LiveBatch(HFSession):
    """Requests by key (an int the caller chooses), sampled one token per `step` until each ends its turn."""

    def __init__(self, policy: HFPolicy, seed: int, on_token: Callable[[int, int], None] | None = None,
                 max_parked: int = MAX_PARKED):
        """on_token(key, token_id) is called as tokens are sampled; max_parked: most session rows kept at once."""
        super().__init__(policy, [], [], seed)
        self.max_parked = max_parked
        self.requests = {}
        self.on_token = on_token
        self.prefix_ids: list[int] = []  # the prompt tokens every row reads from the shared prefix
        self.logits: dict[int, torch.Tensor] = {}  # running requests: the logits their next token is drawn from
        self.out: dict[int, list[int]] = {}  # running requests: the tokens sampled so far
        self.parked: dict[str, tuple[int, int]] = {}  # session → (its row's key, the step it was parked at)
        self.steps = 0

    @property
    def running(self) -> int:
        return len(self.logits)

    @torch.no_grad()
    def problem(self, request: TurnRequest) -> str | None:
        """Why the batch cannot take this request, or None (the scheduler fails such a request alone)."""
        if not request.prompt:
            return "the request has an empty prompt"
        if len(request.prompt) >= self.max_context:
            return f"the prompt is {len(request.prompt)} tokens; the context is {self.max_context}"
        if request.seed is not None and not -(2**63) <= request.seed < 2**63:
            return "the seed must be a 64-bit integer"
        if not (math.isfinite(request.temperature) and request.temperature >= 0):
            return f"the temperature must be a finite number ≥ 0, got {request.temperature}"
        if not (math.isfinite(request.top_p) and 0 < request.top_p <= 1):
            return f"top_p must be in (0, 1], got {request.top_p}"
        if request.max_new_tokens < 1:
            return f"max_new_tokens must be ≥ 1, got {request.max_new_tokens}"
        return None

    def admit(self, requests: Sequence[tuple[int, TurnRequest]]) -> None:
        """Prefill these requests and add them to the batch; the next `step` samples their first token."""
        requests = list(requests)
        for key, r in requests:
            if key in self.requests:
                raise ValueError(f"request key {key} is already in the batch")
            if (why := self.problem(r)) is not None:
                raise ValueError(why)
        if not requests:
            return
        for key, r in requests:
            self.requests[key] = r
            self.out[key] = []
            if r.seed is not None:
                self.gens[key] = torch.Generator(device=self.dev).manual_seed(stable_hash("sample", r.seed) % 2**63)
        keys, prompts, resumed = [], [], []
        for k, r in requests:
            if self._resumes(k, r):
                resumed.append(k)
            else:
                keys.append(k)
                prompts.append(list(r.prompt))
        if self.cache is None:
            self._start(keys, prompts)
        else:
            self._join(keys, prompts, resumed)

    def release(self, session: str) -> None:
        """Drop the session's parked row (its rollout has ended)."""
        key, _ = self.parked.pop(session, (None, 0))
        if key is not None:
            del self.tokens[key]

    def cancel(self, key: int) -> None:
        """Stop a running request (its client has gone): its row leaves with the finished ones, nothing is parked."""
        for state in (self.requests, self.out, self.logits, self.gens, self._stopped, self.tokens):
            state.pop(key, None)  # type: ignore[attr-defined]
        if not self.tokens:
            self.cache, self.rows = None, []

    def _resumes(self, key: int, r: TurnRequest) -> bool:
        """Continue the session's parked row under `key` if the prompt extends its ids; else drop the row."""
        if r.session is None or r.session not in self.parked:
            return False
        old, _ = self.parked.pop(r.session)
        ep = self.tokens.pop(old)
        if len(r.prompt) <= len(ep.ids) or r.prompt[:len(ep.ids)] != ep.ids:
            return False  # its row is dropped with the finished ones
        n = len(r.prompt)
        self.tokens[key] = _EpisodeTokens(list(r.prompt), [0] * n, [0.0] * n, [], cached=ep.cached)
        self.rows[self.rows.index(old)] = key
        return True

    def _start(self, keys: list[int], prompts: list[list[int]]) -> None:
        """The batch's first requests: shared prefix, then each prompt, as the sampler prefills a batch."""
        self.cache, self.rows = None, []
        shared = self._prefill_ids(keys, prompts)
        self.prefix_ids = prompts[0][:shared]
        self.logits.update(self._forward({e: self.tokens[e].ids[self.tokens[e].cached:] for e in keys}))

    def _join(self, keys: list[int], prompts: list[list[int]], resumed: list[int]) -> None:
        """Prefill apart — reading the shared prefix — the new prompts (`keys`) and the new tokens of the sessions
        that continue in their rows (`resumed`, copied out of the cache), then join all their rows to the cache."""
        if prompts:
            p = min(common_prefix_len([self.prefix_ids, *prompts]), min(len(ids) for ids in prompts) - 1)
            if p < len(self.prefix_ids):  # they share less of it: the rest moves into every row
                assert self.cache is not None
                shorten_prefix(self.cache, p)
                self.prefix_ids = self.prefix_ids[:p]
        p = len(self.prefix_ids)
        live_cache, live_attn, live_rows = self.cache, self.attn, self.rows
        assert live_cache is not None
        leader_of: dict[tuple[int, ...], int] = {}
        for e, ids in zip(keys, prompts):
            self.tokens[e] = _EpisodeTokens(list(ids), [0] * len(ids), [0.0] * len(ids), [], cached=p)
            leader_of.setdefault(tuple(ids), e)
        leaders = list(leader_of.values())
        self.cache, self.attn = take_rows(live_cache, live_attn, [live_rows.index(e) for e in resumed], len(leaders), p)
        self.rows = resumed + leaders
        logits = self._forward({e: self.tokens[e].ids[self.tokens[e].cached:] for e in self.rows})
        source = {e: leader_of[tuple(self.tokens[e].ids)] for e in keys}
        for e in keys:
            self.tokens[e].cached = len(self.tokens[e].ids)
        self._keep_rows(resumed + keys, source=source)  # the G samples of one prompt copy its row
        joining = set(resumed)
        keep = [r for r, e in enumerate(live_rows) if e in self.tokens and e not in joining]  # finished rows leave
        self.attn = join_rows(live_cache, live_attn, keep, self.cache, self.attn, p)
        self.cache, self.rows = live_cache, [live_rows[r] for r in keep] + resumed + keys
        for e in resumed + keys:
            self.logits[e] = logits[source.get(e, e)]

    @torch.no_grad()
    def step(self) -> list[tuple[int, SampledTurn]]:
        """Sample one token for every running request; the requests whose turn ended, with their turns."""
        active = [e for e in self.rows if e in self.logits]
        tok, logp = self._draw(active, torch.stack([self.logits[e] for e in active]))
        feeds: dict[int, list[int]] = {}
        done: list[tuple[int, SampledTurn]] = []
        for k, e in enumerate(active):
            ended = self._append(e, tok[k], logp[k], self.out[e])
            if ended is None:
                feeds[e] = [tok[k]]
            else:
                done.append((e, self._finish(e, ended)))
        self.steps += 1
        for session, (_, since) in list(self.parked.items()):
            if self.steps - since > PARK_STEPS:
                self.release(session)
        if (len(self.rows) - len(self.tokens)) * 4 >= len(self.rows) or (not feeds and len(self.rows) > len(self.tokens)):
            self._keep_rows([e for e in self.rows if e in self.tokens])  # and when the batch goes idle: only kept rows
        self.logits = self._forward(feeds) if feeds else {}
        if not self.tokens:  # drained: the next admission starts a new cache
            self.cache, self.rows = None, []
        return done

    def _finish(self, e: int, finish: str) -> SampledTurn:
        ep, r, ids = self.tokens[e], self.requests.pop(e), self.out.pop(e)
        self.gens.pop(e, None)
        if r.session is not None:
            self.release(r.session)  # a session has one row at a time
            self.parked[r.session] = (e, self.steps)
            while len(self.parked) > self.max_parked:
                self.release(next(iter(self.parked)))  # the longest-parked (a resumed session parks anew, last)
        else:
            del self.tokens[e]
        return SampledTurn(ids, ep.logprobs[len(r.prompt):], self._turn_text(e, ids), finish,  # type: ignore[arg-type]
                           self._stopped.pop(e, None), len(r.prompt))
