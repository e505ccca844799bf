"""Policies without a model: the env's teacher, a noisy teacher, a random agent, and a replay of a script file."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..envs.base import Env, Message, Task, stable_hash
from ..runtime.parsing import format_tool_call, message_text
from .base import Policy, Session, Turn


class TeacherPolicy(Policy):
    """The env's scripted teacher. With `noise` rates it makes the seed's typical mistakes (see the env)."""

    def __init__(self, noise: dict[str, float] | None = None):
        self.noise = noise
        self.name = "noisy-teacher" if noise else "teacher"

    def start(self, env: Env, tasks: Sequence[Task], samples: Sequence[int], seed: int) -> Session:
        plans = [env.noise_plan(t, random.Random(stable_hash("noise", seed, t.id, s)), self.noise)
                 if self.noise else None for t, s in zip(tasks, samples)]
        return _TeacherSession(env, list(tasks), plans)


class _TeacherSession(Session):
    def __init__(self, env: Env, tasks: list[Task], plans: list[dict[str, bool] | None]):
        self.env, self.tasks, self.plans = env, tasks, plans

    def act(self, episodes: Sequence[int], conversations: Sequence[list[Message]]) -> list[Turn]:
        return [Turn(self.env.teacher_turn(self.tasks[i], conv, self.plans[i])) for i, conv in zip(episodes, conversations)]


class RandomPolicy(Policy):
    """Calls a random tool with a random word of the prompt, or answers a random word: the floor of any metric."""

    name = "random"

    def start(self, env: Env, tasks: Sequence[Task], samples: Sequence[int], seed: int) -> Session:
        return _RandomSession(env, list(tasks), [random.Random(stable_hash("random", seed, t.id, s))
                                                 for t, s in zip(tasks, samples)])


class _RandomSession(Session):
    def __init__(self, env: Env, tasks: list[Task], rngs: list[random.Random]):
        self.env, self.tasks, self.rngs = env, tasks, rngs

    def act(self, episodes: Sequence[int], conversations: Sequence[list[Message]]) -> list[Turn]:
        out = []
        for i in episodes:
            rng, words = self.rngs[i], self.tasks[i].prompt.replace("?", " ").split() or ["?"]
            if rng.random() < 0.5 or not self.env.tools.tools:
                out.append(Turn(rng.choice(words)))
                continue
            tool = self.env.tools.tools[rng.choice(sorted(self.env.tools.tools))]
            params = list(tool.schema["function"]["parameters"]["properties"])
            out.append(Turn(format_tool_call(tool.name, {p: rng.choice(words) for p in params})))
        return out


class ScriptPolicy(Policy):
    """Replays a JSON list of assistant turns (strings, or OpenAI assistant messages) in every episode.

    For tests, exploit probes and debugging. When the script runs out, the episode gets an empty answer.
    """

    def __init__(self, path: str | Path):
        if not Path(path).is_file():
            raise ValueError(f"script file not found: {path}")
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"script file {path} is not valid JSON: {e}") from None
        if not isinstance(data, list):
            raise ValueError(f"script file {path} must hold a JSON list of assistant turns (strings or messages)")
        self.turns = [_turn_text(x, path) for x in data]
        self.name = f"script:{path}"

    def start(self, env: Env, tasks: Sequence[Task], samples: Sequence[int], seed: int) -> Session:
        return _ScriptSession(self.turns)


class _ScriptSession(Session):
    def __init__(self, turns: list[str]):
        self.turns = turns

    def act(self, episodes: Sequence[int], conversations: Sequence[list[Message]]) -> list[Turn]:
        out = []
        for conv in conversations:
            k = sum(m["role"] == "assistant" for m in conv)
            out.append(Turn(self.turns[k] if k < len(self.turns) else ""))
        return out


def _turn_text(x: Any, path: str | Path) -> str:
    if isinstance(x, str):
        return x
    if isinstance(x, dict) and x.get("role", "assistant") == "assistant":
        return message_text(x)
    raise ValueError(f"script file {path}: each entry must be a string or an assistant message, got {x!r}")
