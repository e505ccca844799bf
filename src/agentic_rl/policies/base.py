"""The policy interface: a policy opens a session over a batch of episodes and produces one assistant turn at a time.

Model policies and scripted ones (teacher, noisy teacher, random, replay) look the same to the agent loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..envs.base import Env, Message, Task


@dataclass
class Turn:
    """One assistant turn as the policy produced it."""

    text: str
    finish: Literal["stop", "length"] = "stop"  # "length": cut by a token limit before the policy stopped


@dataclass
class TokenRecord:
    """What a model session knows of one episode's tokens: everything a trainer needs."""

    ids: list[int]
    mask: list[int]
    logprobs: list[float]
    assistant_ids: list[list[int]]


class Session(ABC):
    """Turns for a fixed batch of episodes. Episode `i` is `tasks[i]`; conversations are passed in full each turn."""

    @abstractmethod
    def act(self, episodes: Sequence[int], conversations: Sequence[list[Message]]) -> list[Turn]:
        """The next assistant turn of each listed episode, given its conversation so far."""

    def finish(self, episode: int, conversation: list[Message]) -> TokenRecord | None:
        """The episode ended: release what it holds and return its token record (model policies only)."""
        return None


class Policy(ABC):
    """Something that can act in an environment."""

    name: str

    @abstractmethod
    def start(self, env: Env, tasks: Sequence[Task], samples: Sequence[int], seed: int) -> Session:
        """Open a session for episodes (tasks[i], samples[i]); `seed` fixes all sampling randomness."""


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    """Sampling temperature; 0 means greedy. Logprobs are recorded under this temperature (logits / T)."""
    max_new_tokens: int = 96
    """Most tokens in one assistant turn. A longer turn is cut there, and the episode ends as `truncated` (unless the
    env ended it on that turn, e.g. taking the cut text as a final answer)."""
    max_context: int | None = None
    """Most tokens in a whole episode, prompt and observations included (None: the model's own limit,
    `max_position_embeddings`, as vLLM's max_model_len defaults to it): a smaller fixed cap would cut long episodes,
    such as codefix's, short of what the teacher's demonstrations reach (docs/design-notes.md#codefix-turn-budget)."""
