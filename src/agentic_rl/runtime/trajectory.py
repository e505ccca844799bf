"""Trajectory: one episode as data — messages, the exact sampled tokens, the loss mask, logprobs, rewards, outcome.

One format serves SFT, GRPO, evaluation, replay and the report. It serializes to JSONL in the OpenAI messages
format (assistant tool calls under `tool_calls`), so TRL's SFTTrainer can read it and a person can inspect it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..atomic import atomic_open
from ..text import json_text

Outcome = Literal["ok", "truncated", "env_error", "timeout"]
OUTCOMES: tuple[str, ...] = ("ok", "truncated", "env_error", "timeout")
# Outcomes caused by the infrastructure, not the policy: excluded from losses and counted, never scored 0.
INFRA_FAILURES: tuple[str, ...] = ("env_error", "timeout")


@dataclass
class Trajectory:
    """An episode. `ids`, `mask` and `logprobs` are aligned and present only for model policies."""

    env: str
    task_id: str
    task_kind: str
    sample: int  # index within the group of samples of the same task
    messages: list[dict[str, Any]]  # OpenAI format: system, user, then assistant / tool turns
    turn_rewards: list[float]  # one per assistant turn; they sum to `reward`
    reward: float
    outcome: Outcome
    success: bool  # the env's verifiable check passed (a correct answer, a fix that passes the tests); False unless ok
    info: dict[str, Any] = field(default_factory=dict)  # env counters (tool_calls, faults, invalid) and errors
    ids: list[int] | None = None  # the whole conversation's token ids, the assistant's exactly as sampled
    mask: list[int] | None = None  # 1 on tokens the policy generated, 0 on system / user / tool tokens
    logprobs: list[float] | None = None  # sampling logprob of each token with mask 1 (0.0 elsewhere)
    assistant_ids: list[list[int]] | None = None  # each assistant turn's sampled ids (for exact re-rendering)

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {self.outcome!r}")
        if self.ids is not None and (
                self.mask is None or self.logprobs is None or not len(self.ids) == len(self.mask) == len(self.logprobs)):
            raise ValueError("ids, mask and logprobs must be given together and have the same length")

    @property
    def n_turns(self) -> int:
        return sum(m["role"] == "assistant" for m in self.messages)

    @property
    def n_tool_calls(self) -> int:
        return sum(len(m.get("tool_calls") or []) for m in self.messages if m["role"] == "assistant")

    @property
    def is_infra_failure(self) -> bool:
        return self.outcome in INFRA_FAILURES

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        return cls(**d)


def assistant_message(text: str, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The OpenAI-format message for one assistant turn: its structured tool calls (one, or several in parallel), or
    the text as content when it makes none."""
    if not calls:
        return {"role": "assistant", "content": text}
    return {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}} for name, args in calls]}


def save_jsonl(trajectories: Iterable[Trajectory], path: str | Path) -> None:
    """Write one trajectory per line, atomically (see `atomic.atomic_open`)."""
    with atomic_open(path) as f:
        for t in trajectories:
            f.write(json_text(t.to_dict()) + "\n")


def load_jsonl(path: str | Path) -> list[Trajectory]:
    with open(path, encoding="utf-8") as f:
        return [Trajectory.from_dict(json.loads(line)) for line in f if line.strip()]
