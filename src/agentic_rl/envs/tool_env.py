"""The turn loop every tool-using env shares: parse → fault injection → tool call → stuck check → limits → totals.

A subclass declares what is its own — tasks, tools, the system prompt, `score` (the reward of a submission, a
function one can read and test alone), the shaping of a tool turn, and its teacher — and `ToolEnv` runs the
episode and reports typed `TurnRecord`s and an `EpisodeRecord`:

    action ─ parse_turn ─┬─ final answer / submitting tool ─→ score() ─→ end (terminated)
                         ├─ out of the env's budget (time) ──────────→ end (truncated, nothing submitted)
                         ├─ parse error ─────→ error observation ─┐
                         ├─ injected fault ──→ FAULT_TEXT ────────┼─→ stuck check → turn_reward() → turn limit?
                         └─ tool call ───────→ the tool's result ─┘                                   └→ end (truncated)

Faults are declared: an env with `supports_faults` takes `fault_rate`, and the base decides each fault by a hash of
(task id, call index), at most MAX_FAULTS per episode, so the same trajectory always meets the same faults.
An env with `max_calls` > 1 takes parallel calls: a turn of several `<tool_call>` blocks runs each in order, and each
gets its own tool message (OpenAI's parallel tool calls, Hermes's one block per call).
"""

from __future__ import annotations

import json
from abc import abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from ..runtime.parsing import FinalAnswer, ParallelCalls, ParseError, ToolCall, parse_turn
from .base import FAULT_TEXT, Env, EpisodeRecord, Message, StepResult, Task, TurnRecord, injects_fault


@dataclass(frozen=True)
class Score:
    """The verdict on a submission: its reward, whether it solves the task, and facts for evaluation."""

    reward: float
    success: bool
    no_answer: bool = False  # the submission was empty
    info: dict[str, Any] = field(default_factory=dict)


class StuckDetector:
    """Flags a turn that repeats an earlier action which got the same observation, closes an A-B-A-B alternation of
    actions, or re-reads a resource (a file) that has not changed since its last read."""

    def __init__(self) -> None:
        self.history: list[tuple[str, str]] = []  # (action key, observation)
        self.reads: dict[str, Any] = {}  # resource → its state when last read

    def check(self, key: str, observation: str, read: tuple[str, Any] | None = None) -> bool:
        stuck = (key, observation) in self.history
        if read is not None:
            resource, state = read
            stuck = stuck or self.reads.get(resource) == state
            self.reads[resource] = state
        keys = [k for k, _ in self.history[-3:]] + [key]
        if len(keys) == 4 and keys[0] == keys[2] and keys[1] == keys[3] and keys[0] != keys[1]:
            stuck = True
        self.history.append((key, observation))
        return stuck


class ToolEnv(Env):
    """An env whose episode is a conversation with tools, ended by a final answer (or `submit_tool`) or a limit."""

    system_prompt: str
    fault_rate: float = 0.0
    # A tool whose call submits the episode instead of running (codefix's finish()); None: only a final answer does.
    submit_tool: ClassVar[str | None] = None

    # -- what a subclass writes --

    @abstractmethod
    def score(self, task: Task, answer: str) -> Score:
        """The reward of the agent's submission (its final answer's text; "" for a submitting tool)."""

    def turn_reward(self, task: Task, turn: TurnRecord) -> float:
        """The shaping reward of a tool turn (a parse error, a fault, a call that ran). Default: none."""
        return 0.0

    def start(self, task: Task) -> None:
        """Set up the episode's own state (codefix: a fresh repository)."""

    def out_of_budget(self) -> str | None:
        """The name of an env budget (beyond turns) that has run out, ending the episode unsubmitted; None if none."""
        return None

    def read_state(self, call: ToolCall) -> tuple[str, Any] | None:
        """For a call that reads something: (what it reads, its current state), so re-reading it unchanged counts
        as stuck. Default: None (no call reads anything)."""
        return None

    def episode_info(self) -> dict[str, Any]:
        """Env-specific facts reported when the episode ends, whatever ended it."""
        return {}

    # -- the loop --

    def reset(self, task: Task) -> list[Message]:
        self.close()
        self._task = task
        self._turns = self._calls = self._faults = self._invalid = self._stuck = 0
        self._total = 0.0
        self._detector = StuckDetector()
        self.start(task)
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": task.prompt}]

    def step(self, action: str) -> StepResult:
        task = getattr(self, "_task", None)
        if task is None:
            raise RuntimeError("call reset(task) before step()")
        self._turns += 1
        parsed = parse_turn(action, self.tools, self.max_calls)
        if isinstance(parsed, FinalAnswer) or (isinstance(parsed, ToolCall) and parsed.name == self.submit_tool):
            turn = TurnRecord(type(parsed).__name__, tool=getattr(parsed, "name", None))
            verdict = self.score(task, parsed.text if isinstance(parsed, FinalAnswer) else "")
            return self._end(verdict.reward, turn, verdict.success, verdict.no_answer, verdict.info, terminated=True)
        budget = self.out_of_budget()
        if budget is not None:
            return self._end(0.0, TurnRecord(type(parsed).__name__), False, True, {budget: True}, terminated=False)
        if isinstance(parsed, ParseError):
            self._invalid += 1
            turn = TurnRecord("ParseError", parse_error=parsed.kind)
            observations: list[Message] = [{"role": "tool", "content": f"error: {parsed.message}"}]
            key, read = f"parse:{action}", None
        else:
            calls = parsed.calls if isinstance(parsed, ParallelCalls) else (parsed,)
            observations, keys, read, faulted = [], [], None, 0
            for call in calls:
                if injects_fault(task.id, self._calls + self._faults, self._faults, self.fault_rate):
                    self._faults += 1  # nothing ran: not a stuck event, and calling again is the right move
                    faulted += 1
                    observations.append({"role": "tool", "name": call.name, "content": FAULT_TEXT})
                    continue
                self._calls += 1
                keys.append(f"{call.name}:{json.dumps(call.arguments, sort_keys=True)}")
                read = self.read_state(call) if len(calls) == 1 else None
                observations.append({"role": "tool", "name": call.name,
                                     "content": self.tools.call(call.name, call.arguments).content})
            turn = TurnRecord("ToolCall", tool=calls[0].name, fault=faulted == len(calls), calls=len(calls))
            key = "|".join(keys) if keys else None
        if key is not None and self._detector.check(key, "\n".join(str(o["content"]) for o in observations), read):
            self._stuck += 1
            turn = replace(turn, stuck=True)
        reward = self.turn_reward(task, turn)
        if self._turns >= self.max_turns:
            return self._end(reward, turn, False, True, {}, terminated=False)
        self._total += reward
        return StepResult(observations, reward, False, False, turn)

    def _end(self, reward: float, turn: TurnRecord, success: bool, no_answer: bool, info: dict[str, Any],
             terminated: bool) -> StepResult:
        self._total += reward
        extra = max(0, self._calls - len(self._task.reference)) if self.reference_solutions else 0
        episode = EpisodeRecord(success, self._total, self._turns, self._calls, self._faults, self._invalid,
                                self._stuck, extra, no_answer)
        result = StepResult([], reward, terminated, not terminated, turn, episode, {**info, **self.episode_info()})
        self.close()
        return result
