"""Rollout records: the token-exact history of an agent's requests under one rollout id, as the trainer needs it.

A request that extends the record — the conversation recorded so far, then only new user or tool messages, with the
same tools — is sampled from the record's own ids plus the template's continuation (`Renderer.continuation`): the
ids sampled before are kept as sampled, never re-tokenized from the text the agent sends back. A request that does
not extend it (the agent rewrote or dropped a message, changed the system prompt or the tools, or wrote an assistant
turn itself) starts a new segment, and the segment says why. A retried request (the same body again, as SDKs resend
on a timeout) gets the recorded reply instead of a second sample, so retries never fork a trajectory.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from ..runtime.render import Renderer
from ..runtime.trajectory import Trajectory


@dataclass
class Segment:
    """One run of requests that extend each other: aligned ids, loss mask (1 on sampled tokens) and logprobs."""

    reason: str  # why it started: "first request", or what broke the previous segment
    tools: list[dict[str, Any]] | None
    messages: list[dict[str, Any]] = field(default_factory=list)  # as the agent sent them, plus each reply
    prompt_messages: list[dict[str, Any]] = field(default_factory=list)  # as the model saw them (tools in system)
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[list[int]] = field(default_factory=list)  # each reply's sampled ids
    closed_turn: bool = True  # the last reply ended with the end-of-turn token (not a stop string or the limit)

    def to_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "messages": self.prompt_messages, "ids": self.ids, "mask": self.mask,
                "logprobs": self.logprobs, "turns": self.turns}


@dataclass
class Rollout:
    id: str  # unguessable: whoever holds it owns the rollout (`Gateway.open`)
    name: str = ""  # the creator's label (a trainer's step-task-sample), never a way in
    segments: list[Segment] = field(default_factory=list)
    replies: dict[str, dict[str, Any]] = field(default_factory=dict)  # request body hash → the reply sent
    reward: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    touched: float = field(default_factory=time.monotonic, repr=False)  # its last request (eviction picks the oldest)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "reward": self.reward, "info": self.info,
                "segments": [s.to_dict() for s in self.segments]}

    def trajectories(self, renderer: Renderer, env: str = "gateway") -> list[Trajectory]:
        """Each segment as a Trajectory (the env path's format), closed with the template's tail after its last
        reply; the reward goes to the last turn of the last segment."""
        out = []
        for k, seg in enumerate(self.segments):
            if not seg.turns:
                continue
            ids, mask, logprobs = list(seg.ids), list(seg.mask), list(seg.logprobs)
            full = renderer.render(seg.prompt_messages, assistant_ids=seg.turns).ids
            if full[:len(ids)] == ids:  # the template's closing tail after the last reply, as the env path ends
                tail = full[len(ids):]
                ids += tail
                mask += [0] * len(tail)
                logprobs += [0.0] * len(tail)
            last = k == len(self.segments) - 1
            reward = float(self.reward or 0.0) if last else 0.0
            rewards = [0.0] * (len(seg.turns) - 1) + [reward]
            out.append(Trajectory(env=env, task_id=self.id, task_kind=str(self.info.get("kind", "")), sample=k,
                                  messages=seg.prompt_messages, turn_rewards=rewards, reward=reward, outcome="ok",
                                  success=bool(self.info.get("success", False)) and last,
                                  info={"segment_reason": seg.reason, **self.info}, ids=ids, mask=mask,
                                  logprobs=logprobs, assistant_ids=seg.turns))
        return out


def request_key(body: dict[str, Any]) -> str:
    """The same request body (a retry) gives the same key; `stream` is left out (a retry may switch it)."""
    canonical = json.dumps({k: v for k, v in body.items() if k not in ("stream", "stream_options")}, sort_keys=True,
                           ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two messages are the same turn: role, text and calls (names and arguments) equal; call ids are ignored."""
    def calls(m: dict[str, Any]) -> list[tuple[str, Any]]:
        return [(c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or []]
    return (a["role"] == b["role"] and (a.get("content") or "") == (b.get("content") or "")
            and calls(a) == calls(b))


def extends(seg: Segment, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str | None:
    """None when `messages` extend the segment; else why not, in words."""
    if tools != seg.tools:
        return "the tools changed"
    n = len(seg.messages)
    for k, (old, new) in enumerate(zip(seg.messages, messages)):
        if not _same(old, new):
            what = "the system prompt changed" if old["role"] == "system" and k == 0 else \
                f"message {k} ({new['role']}) differs from the recorded one: the agent rewrote history"
            return what
    if len(messages) <= n:
        return f"the request has {len(messages)} messages, fewer than the {n} recorded: the agent dropped history"
    extra = next((k for k in range(n, len(messages)) if messages[k]["role"] == "assistant"), None)
    if extra is not None:
        return f"message {extra} is an assistant turn the gateway did not sample"
    return None


def continue_ids(seg: Segment, prompt_messages: list[dict[str, Any]], renderer: Renderer, eos: int) -> list[int]:
    """The ids that follow the segment's last reply up to the next generation prompt (a reply cut by a stop string
    or the token limit is closed with the end-of-turn token first, as the template closes every turn)."""
    head = [] if seg.closed_turn else [eos]
    return head + renderer.continuation(prompt_messages)
