"""A Hugging Face causal LM as a policy: batched multi-turn sampling with one KV cache that carries across turns.

How the batch works. Every episode is a row of one KV cache (`kv_cache.py`, which appends in place). All rows
advance together, one cache slot per forward; a row with nothing to add that step gets a masked slot (a "hole",
attention mask 0) and positions are given explicitly, so each row sees exactly its own tokens at positions 0, 1, 2,
… — the same as a plain forward over its sequence. The G samples of a task share one prompt prefill (rows are
copied after it). Tool observations are prefilled in one batched forward, not re-encoded with the whole context (and
without the last layer's work at positions no logit is read from: `last_position.py`), and finished episodes' rows
are dropped from the cache so later steps cost less.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.cache_utils import Cache

from ...device import Precision, autocast, resolve_device, sampling_dtype
from ...envs.base import Env, Message, Task, stable_hash
from ...models import resolve_model
from ...numerics import warm_up_vml
from ...runtime.render import Renderer
from ...train.logprobs import common_prefix_len
from ..base import Policy, SamplingConfig, Session, TokenRecord, Turn
from .attention import NAME as PACKED_GQA
from .kv_cache import decoder_attention, growing_cache, reading_shared_prefix
from .last_position import last_position_only

# A temperature at or below this samples greedily (vLLM's floor too): logits / 1e-40 overflow float32 into NaN.
GREEDY_BELOW = 1e-5

warm_up_vml()  # before any model runs: oneMKL's racy first call would make fresh processes differ (numerics.py)


def inverse_cdf_sample(logp: torch.Tensor, gen: torch.Generator | None = None,
                       u: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row of log-probabilities (rows, vocab), drawn by inverting each row's cumulative distribution.

    The same distribution as `torch.multinomial(logp.exp(), 1)` with one uniform draw per row instead of one
    exponential per vocabulary entry (docs/design-notes.md#the-token-draw). `u`: each row's uniform in [0, 1), or
    None to draw them from `gen`. `right=True` never picks a zero-probability token (its cumulative value equals its
    predecessor's); the clamp covers u·total rounding up to the last entry."""
    cdf = logp.exp().cumsum(dim=-1)
    if u is None:
        u = torch.rand(logp.shape[0], 1, generator=gen, device=logp.device, dtype=cdf.dtype)
    target = u.reshape(-1, 1).to(cdf.dtype) * cdf[:, -1:]
    return torch.searchsorted(cdf, target, right=True).clamp_(max=logp.shape[-1] - 1).squeeze(1)


def nucleus(logp: torch.Tensor, top_p: float) -> torch.Tensor:
    """Log-probabilities (vocab,) restricted to the smallest set of most likely tokens whose mass reaches `top_p`
    (the rest -inf); the kept ones are not renormalised (the draw normalises by the total)."""
    order = logp.argsort(descending=True)
    probs = logp[order].exp()
    keep = probs.cumsum(0) - probs < top_p  # a token is kept while the mass before it is under top_p
    keep[0] = True  # the most likely always (a top_p that rounds to 0 in the logits' dtype would keep none)
    out = torch.full_like(logp, float("-inf"))
    out[order[keep]] = logp[order[keep]]
    return out


@dataclass
class TurnRequest:
    """One assistant turn to sample from given prompt ids with its own settings (the gateway's requests).

    seed: the row's own random stream (None: the batch's); stop: strings that end the turn where they appear (the
    text stops before them; the ids keep the token that completed one); session: the conversation it belongs to (a
    rollout id): its cache row is kept after the turn, and the session's next request, if its prompt extends this
    one's ids, is prefilled from there (`LiveBatch`)."""

    prompt: list[int]
    temperature: float = 1.0
    max_new_tokens: int = 96
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    session: str | None = None


@dataclass
class SampledTurn:
    """A sampled turn: its ids (with the closing EOS when the model ended it), each one's logprob under the row's
    temperature (before top_p, as vLLM's default reports them), its text, and why it ended."""

    ids: list[int]
    logprobs: list[float]
    text: str
    finish: Literal["stop", "length"]
    stop: str | None = None  # the stop string that ended it, if one did
    prompt_tokens: int = 0
    extra: dict[str, object] = field(default_factory=dict)


class TokenContinuityError(RuntimeError):
    """Re-rendering a conversation did not reproduce the tokens already in the policy's context."""


class HFPolicy(Policy):
    """Any local causal-LM directory with a chat template (the tiny preset is one)."""

    def __init__(self, path: str | Path, sampling: SamplingConfig | None = None, model=None, tokenizer=None,
                 device: str | torch.device = "cpu", dtype: torch.dtype | None = None, precision: Precision = "fp32"):
        """path: a local model directory, a preset (`smollm2-135m`), a .gguf file or a Hub id (`models.sources`).

        device: where a loaded model goes (`auto`, `cpu`, `cuda`); dtype: its weights (None: bf16 on a GPU, fp32 on
        the CPU, for a policy that only samples; trainers pass fp32); precision: the sampler's forwards' autocast."""
        path = Path(path) if model is not None else resolve_model(str(path))
        self.path = path
        self.name = str(path)
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(path)
        if model is None:
            dev = device if isinstance(device, torch.device) else resolve_device(device)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or sampling_dtype(dev)).to(dev)
        self.model = model
        self.device = next(model.parameters()).device
        self.precision = precision
        if self.model.config._attn_implementation == "sdpa":  # the same attention, minus a KV-cache copy per prefill
            self.model.set_attn_implementation(PACKED_GQA)
        self.renderer = Renderer(self.tokenizer)
        self.sampling = sampling or SamplingConfig()

    def start(self, env: Env, tasks: Sequence[Task], samples: Sequence[int], seed: int) -> Session:
        return HFSession(self, list(tasks), list(samples), seed)

@dataclass
class _EpisodeTokens:
    """One running episode's tokens as the policy saw and sampled them, and how many are in the KV cache."""

    ids: list[int]
    mask: list[int]
    logprobs: list[float]
    assistant_ids: list[list[int]]
    cached: int = 0  # how many of `ids` are in the KV cache


class HFSession(Session):
    """One batch of episodes sampled together: a KV-cache row per running episode, carried across turns."""

    def __init__(self, policy: HFPolicy, tasks: list[Task], samples: list[int], seed: int):
        self.p, self.cfg = policy, policy.sampling
        self.max_context = self.cfg.max_context or int(getattr(policy.model.config, "max_position_embeddings", 2048))
        self.model, self.renderer = policy.model, policy.renderer
        self.eos = policy.renderer.eos_id
        self.pad = policy.tokenizer.pad_token_id if policy.tokenizer.pad_token_id is not None else self.eos
        self.dev = policy.device
        self.gen = torch.Generator(device=self.dev).manual_seed(stable_hash("sample", seed) % 2**63)
        self.tokens: dict[int, _EpisodeTokens] = {}  # by episode, while it runs
        self.rows: list[int] = []  # cache row r holds episode rows[r]
        self.cache: Cache | None = None
        self.attn = torch.zeros(0, 0, dtype=torch.long, device=self.dev)  # (rows, slots): 1 where a slot holds a token
        self.requests: dict[int, TurnRequest] | None = None  # per-row settings (`LiveBatch`); None: the policy's
        self.default = TurnRequest([], self.cfg.temperature, self.cfg.max_new_tokens)
        # each episode's own random stream: the same draws whatever batch it is sampled in (rows of a live batch
        # without a seed of their own draw from the batch's, `gen`)
        self.gens: dict[int, torch.Generator] = {
            e: torch.Generator(device=self.dev).manual_seed(stable_hash("sample", seed, task.id, sample) % 2**63)
            for e, (task, sample) in enumerate(zip(tasks, samples))}
        self.on_token: Callable[[int, int], None] | None = None
        self._stopped: dict[int, str] = {}  # episodes whose turn a stop string ended, and which one

    # -- the cache ----------------------------------------------------------------------------------------------

    @torch.no_grad()
    def _forward(self, feeds: dict[int, list[int]]) -> dict[int, torch.Tensor]:
        """Append each episode's `feeds` to its row (right-aligned, holes on the left) in one forward.

        Holes keep position 0 and attention mask 0: no later query of any row attends to them.

        Returns the logits after each episode's last fed token."""
        width = max((len(v) for v in feeds.values()), default=0)
        if width == 0:
            return {}
        n = len(self.rows)
        ids = torch.full((n, width), self.pad, dtype=torch.long)
        valid = torch.zeros(n, width, dtype=torch.long)
        pos = torch.zeros(n, width, dtype=torch.long)  # built on the CPU, moved in one copy each
        for r, e in enumerate(self.rows):
            toks = feeds.get(e, [])
            if toks:
                ep = self.tokens[e]
                ids[r, width - len(toks):] = torch.tensor(toks)
                valid[r, width - len(toks):] = 1
                pos[r, width - len(toks):] = torch.arange(ep.cached, ep.cached + len(toks))
                ep.cached += len(toks)
        ids, valid, pos = ids.to(self.dev), valid.to(self.dev), pos.to(self.dev)
        self.attn = torch.cat([self.attn, valid], dim=1)
        # Only the last position is sampled from; a one-token decode step has nothing to skip.
        with (last_position_only(self.model) if width > 1 else nullcontext(), autocast(self.p.precision, self.dev),
              reading_shared_prefix(self.model, self.cache)):
            out = self.model(input_ids=ids, attention_mask=self.attn, position_ids=pos, cache=self.cache,
                             use_cache=True, logits_to_keep=1)
        self.cache = out.cache if self.cache is None else self.cache
        last = out.logits[:, -1, :].float()
        return {e: last[r] for r, e in enumerate(self.rows) if feeds.get(e)}

    def _keep_rows(self, episodes: list[int], source: dict[int, int] | None = None) -> None:
        """Make cache row r hold episode episodes[r]: drop finished rows, copy a leader's row to share a prefix."""
        if episodes == self.rows:
            return
        source = source or {}
        index = torch.tensor([self.rows.index(source.get(e, e)) for e in episodes], dtype=torch.long,
                             device=self.dev)
        if self.cache is not None:
            self.cache.batch_select_indices(index)
        self.attn = self.attn[index]
        self.rows = list(episodes)

    # -- turns --------------------------------------------------------------------------------------------------

    def act(self, episodes: Sequence[int], conversations: Sequence[list[Message]]) -> list[Turn]:
        episodes = list(episodes)
        feeds: dict[int, list[int]] = {}
        if self.cache is None:
            self._prefill_prompts(episodes, conversations)
        for e, conv in zip(episodes, conversations):
            ep = self.tokens[e]
            if ep.assistant_ids:  # after the first turn: only what follows the last sampled EOS is new
                new = self.renderer.continuation(conv)
                ep.ids += new
                ep.mask += [0] * len(new)
                ep.logprobs += [0.0] * len(new)
            feeds[e] = ep.ids[ep.cached:]
        self._keep_rows([e for e in self.rows if e in feeds])
        logits = self._forward({e: f for e, f in feeds.items() if f})
        return self._decode(episodes, logits)

    def _prefill_prompts(self, episodes: list[int], conversations: Sequence[list[Message]]) -> None:
        """Prefill prompts sharing all that can be shared, then leave each row one token short.

        The system prompt common to every task is run once; each distinct prompt's remainder is run once; the G
        samples of a task copy its row. The last prompt token is fed per row by `act`, giving each row's logits."""
        self._prefill_ids(episodes, [self.renderer.render(conv, add_generation_prompt=True).ids
                                     for conv in conversations])

    def _prefill_ids(self, episodes: list[int], prompts: Sequence[Sequence[int]]) -> int:
        """Returns how many prompt tokens are kept once as a prefix every row reads (0: none, each row holds its
        whole prompt)."""
        leader_of: dict[tuple[int, ...], int] = {}
        for e, ids in zip(episodes, prompts):
            self.tokens[e] = _EpisodeTokens(list(ids), [0] * len(ids), [0.0] * len(ids), [])
            leader_of.setdefault(tuple(ids), e)
        leaders = list(leader_of.values())
        shared = min(common_prefix_len([self.tokens[e].ids for e in leaders]), min(len(k) for k in leader_of) - 1)
        self.rows, self.cache = leaders[:1], growing_cache()
        self.attn = torch.zeros(1, 0, dtype=torch.long, device=self.dev)
        self._forward({leaders[0]: self.tokens[leaders[0]].ids[:shared]})
        if self._can_share_prefix():  # kept once and read once by every row, instead of copied into each
            for layer in self.cache.layers:
                layer.share_prefix()
        for e in leaders:
            self.tokens[e].cached = shared
        self._keep_rows(leaders, source={e: leaders[0] for e in leaders})
        self._forward({e: self.tokens[e].ids[shared:-1] for e in leaders})
        for e in episodes:
            self.tokens[e].cached = len(self.tokens[e].ids) - 1
        self._keep_rows(episodes, source={e: leader_of[tuple(self.tokens[e].ids)] for e in episodes})
        return shared if self._can_share_prefix() else 0

    def _can_share_prefix(self) -> bool:
        """The shared prompt is kept once where the sampler's attention runs on the CPU (`attention.py`); elsewhere
        (a GPU) each row gets a copy, as the fallback would copy it on every forward."""
        return (self.dev.type == "cpu" and self.model.config._attn_implementation == PACKED_GQA
                and decoder_attention(self.model) is not None)

    def _setting(self, e: int) -> TurnRequest:
        return self.requests[e] if self.requests is not None else self.default

    def _draw(self, active: list[int], stacked: torch.Tensor) -> tuple[list[int], list[float]]:
        """The next token of each active row and its logprob under the row's temperature.

        Each row draws its uniform from its own stream (`gens`: an episode's, from the run's seed, its task and
        its sample; a request's own seed) or else the batch's, so an episode samples the same tokens in whatever
        batch, process or machine it runs."""
        settings = [self._setting(e) for e in active]
        temps = [r.temperature for r in settings]
        if len(set(temps)) == 1:
            T = temps[0]
            logp = torch.log_softmax(stacked / T if T > GREEDY_BELOW else stacked, dim=-1)
        else:
            Ts = torch.tensor([t if t > GREEDY_BELOW else 1.0 for t in temps], device=stacked.device)
            logp = torch.log_softmax(stacked / Ts[:, None], dim=-1)
        if all(t <= GREEDY_BELOW for t in temps):
            tok = logp.argmax(dim=-1)
        else:
            dist = logp
            if any(r.top_p < 1.0 for r in settings):
                dist = logp.clone()
                for k, r in enumerate(settings):
                    if r.top_p < 1.0:
                        dist[k] = nucleus(logp[k], r.top_p)
            u = torch.cat([torch.rand(1, generator=self.gens.get(e, self.gen), device=self.dev, dtype=logp.dtype)
                           for e in active])
            tok = inverse_cdf_sample(dist, u=u)
            greedy = [k for k, t in enumerate(temps) if t <= GREEDY_BELOW]
            if greedy:
                rows = torch.tensor(greedy, device=tok.device)
                tok[rows] = logp[rows].argmax(dim=-1)
        return tok.tolist(), logp.gather(1, tok[:, None]).squeeze(1).tolist()  # one device sync

    def _decode(self, episodes: list[int], logits: dict[int, torch.Tensor]) -> list[Turn]:
        """Sample until every listed episode ends its turn (EOS, a stop string, the turn's token limit, or the
        context limit)."""
        out_ids: dict[int, list[int]] = {e: [] for e in episodes}
        finish: dict[int, str] = {}
        self._stopped = {}
        while True:
            active = [e for e in episodes if e not in finish]
            if not active:
                break
            tok, logp = self._draw(active, torch.stack([logits[e] for e in active]))
            step: dict[int, list[int]] = {}
            for k, e in enumerate(active):
                ended = self._append(e, tok[k], logp[k], out_ids[e])
                if ended is None:
                    step[e] = [tok[k]]
                else:
                    finish[e] = ended
            if step:
                logits = self._forward(step)
        turns = []
        for e in episodes:
            self.tokens[e].assistant_ids.append(out_ids[e])
            turns.append(Turn(self._turn_text(e, out_ids[e]), finish[e]))  # type: ignore[arg-type]
        return turns

    def _append(self, e: int, token: int, logprob: float, out: list[int]) -> str | None:
        """Add a sampled token to episode e's turn `out`; why the turn ends with it ("stop", "length"), or None."""
        ep, setting = self.tokens[e], self._setting(e)
        out.append(token)
        ep.ids.append(token)
        ep.mask.append(1)
        ep.logprobs.append(logprob)
        if self.on_token is not None:
            self.on_token(e, token)
        stop = self._stop_string(out, setting.stop) if setting.stop and token != self.eos else None
        if token == self.eos or stop is not None:
            if stop is not None:
                self._stopped[e] = stop
            return "stop"
        if len(out) >= setting.max_new_tokens or len(ep.ids) >= self.max_context:
            return "length"
        return None

    def _turn_text(self, e: int, ids: list[int]) -> str:
        """A turn's text, cut before the stop string that ended it."""
        text = self.renderer.decode(ids)
        return text[: text.find(self._stopped[e])] if e in self._stopped else text

    def _stop_string(self, ids: list[int], stops: tuple[str, ...]) -> str | None:
        """The stop string the turn's text now contains, if any (checked on the text's tail: a stop string can span
        tokens)."""
        # a character is at most 4 tokens (byte fallback), so the tail must hold 4 per character of the longest
        text = self.renderer.decode(ids[-max(64, 4 * max(map(len, stops)) + 4):])
        return next((s for s in stops if s in text), None)

    def _check_prefix(self, e: int, have: list[int], full: list[int]) -> None:
        if full[: len(have)] != have:
            k = next((i for i, (a, b) in enumerate(zip(have, full)) if a != b), min(len(have), len(full)))
            raise TokenContinuityError(
                f"episode {e}: re-rendered conversation diverges from the policy's context at token {k} "
                f"(had {have[k:k + 5]}, template gives {full[k:k + 5]}); the chat template is not prefix-stable")

    def finish(self, episode: int, conversation: list[Message]) -> TokenRecord:
        """Close the episode: append the template's tokens after the last turn so ids == render(messages).

        The whole conversation is rendered once here and must reproduce every token the policy saw and said."""
        ep = self.tokens.pop(episode)
        full = self.renderer.render(conversation, assistant_ids=ep.assistant_ids).ids
        self._check_prefix(episode, ep.ids, full)
        tail = len(full) - len(ep.ids)
        ep.ids += full[len(ep.ids):]
        ep.mask += [0] * tail
        ep.logprobs += [0.0] * tail
        # Its cache row is dropped by the next `act` (one copy of the cache per turn, not one per finished episode).
        return TokenRecord(ep.ids, ep.mask, ep.logprobs, ep.assistant_ids)
