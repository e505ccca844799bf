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
