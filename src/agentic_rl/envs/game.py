"""`game`: Bulls and Cows — find a secret number of different digits; each `guess` returns how many digits are right
and in place (bulls) and right but elsewhere (cows). A game outcome with feedback every turn (the seed's §5).

Reward: 1 if the final answer is the secret, else 0; minus GUESS_COST per guess made with the tool (a guess that
breaks the rules — wrong length, repeated digits, not digits — is refused without feedback and still costs one).
The turn limit is the guess budget plus the answer. The teacher plays the consistent-guess strategy: guess the first
number consistent with all feedback so far, and answer once only one is left.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, ClassVar

from ..runtime.parsing import format_tool_call, message_call
from ..runtime.tools import Toolbox, ToolError
from .base import FAULT_TEXT, Draft, Message, Split, Task, TurnRecord, draw_tasks, stable_hash, stream_tasks
from .probes import probe_table
from .tool_env import Score, ToolEnv

GUESS_COST = 0.02
SYSTEM_PROMPT = ("You play Bulls and Cows. To guess, reply with only "
                 '<tool_call>{"name":"guess","arguments":{"number":"..."}}</tool_call>. '
                 "When you know the secret number, reply with the number only.\nTools:\n")
PROMPTS = {
    "en": "Find my secret {n}-digit number (all digits different) in at most {k} guesses.",
    "zh": "猜出我的秘密{n}位数（各位数字都不相同），最多猜{k}次。",
    "rephrase": "I picked a number of {n} different digits. You have {k} guesses to find it.",
}


def feedback(secret: str, guess: str) -> tuple[int, int]:
    """(bulls, cows) of `guess` against `secret`."""
    bulls = sum(a == b for a, b in zip(secret, guess))
    return bulls, len(set(secret) & set(guess)) - bulls


class GameEnv(ToolEnv):
    """Find the secret number with as few guesses as you can."""

    name: ClassVar[str] = "game"
    mistakes: ClassVar[tuple[str, ...]] = ("repeat_guess", "ignore_feedback", "early_answer")
    default_noise: ClassVar[dict[str, float]] = {"repeat_guess": 0.2, "ignore_feedback": 0.3, "early_answer": 0.15}
    supports_faults: ClassVar[bool] = True
    tokenizer_tasks: ClassVar[int] = 600  # 3-digit secrets: about 1,150 distinct train tasks in all
    # The SmolLM2 ladder's budget on this CPU: episodes of up to 8 turns, so half the demos and steps of math's
    # (docs/results-history.md#the-sql-and-game-ladders-on-smollm2-135m-instruct).
    pretrained_run_defaults: ClassVar[dict[str, Any]] = {
        "eval_tasks": 50, "robustness_tasks": 5, "sft": {"demos": 256, "max_steps": 16, "eval_tasks": 10},
        "grpo": {"steps": 6, "eval_tasks": 10}}

    def __init__(self, digits: int = 3, guesses: int = 7, fault_rate: float = 0.0):
        if digits not in (3, 4) or guesses < 1 or not 0.0 <= fault_rate <= 1.0:
            raise ValueError(f"digits must be 3 or 4, guesses ≥ 1, fault_rate in [0, 1]; got {digits}, {guesses}, "
                             f"{fault_rate}")
        self.digits, self.guesses, self.fault_rate = digits, guesses, fault_rate
        self.max_turns = guesses + 1  # the guesses, then the answer
        self.candidates = ["".join(p) for p in itertools.permutations("0123456789", digits)]
        self.tools = Toolbox([self.guess])
        self.system_prompt = SYSTEM_PROMPT + self.tools.schemas_text()

    def tasks(self, split: Split, n: int, seed: int = 0) -> list[Task]:
        return draw_tasks("game", split, n, seed, self._draw)

    def task_stream(self, split: Split, seed: int = 0) -> Iterator[Task]:
        return stream_tasks("game", split, seed, self._draw)

    def _draw(self, rng: random.Random) -> Draft:
        secret, lang = rng.choice(self.candidates), rng.choice(["en", "en", "zh"])
        prompt = PROMPTS[lang].format(n=self.digits, k=self.guesses)
        return Draft(secret, f"{secret}:{lang}", f"{self.digits}-digit", prompt, secret, (), (("lang", lang),))

    def _perturbed(self, task: Task, how: str) -> Task | None:
        lang = {"rephrase": "rephrase", "language": "zh" if task.get("lang") == "en" else "en"}.get(how)
        if lang is not None:
            return replace(task, prompt=PROMPTS[lang].format(n=self.digits, k=self.guesses))
        if how == "casing":
            return replace(task, prompt=task.prompt.upper()) if task.get("lang") == "en" else None
        return super()._perturbed(task, how)

    # -- the episode --

    def guess(self, number: str) -> str:
        """Guess the secret number; the answer says how many digits are right and in place (bulls) and right but in
        another place (cows).

        Args:
            number: The guess: digits, all different, as many as the secret has, for example "012".
        """
        self._guesses += 1
        if self._guesses > self.guesses:
            raise ToolError(f"no guesses left (you had {self.guesses}); answer with the number")
        if len(number) != self.digits or not (number.isascii() and number.isdigit()) or len(set(number)) != self.digits:
            raise ToolError(f"invalid guess {number[:20]!r}: a guess is {self.digits} different digits (guess used)")
        bulls, cows = feedback(self._task.answer, number)
        return f"{number}: {bulls} bulls, {cows} cows"

    def start(self, task: Task) -> None:
        self._guesses = 0

    def score(self, task: Task, answer: str) -> Score:
        win = answer.strip() == task.answer
        return Score(float(win), win, not answer.strip())

    def turn_reward(self, task: Task, turn: TurnRecord) -> float:
        """Each guess the tool took costs GUESS_COST, won or lost, refused or not (a faulted call never ran)."""
        return -GUESS_COST if turn.tool == "guess" and not turn.fault else 0.0

    def episode_info(self) -> dict[str, object]:
        return {"guesses": self._guesses}

    # -- the teacher --

    def consistent(self, messages: list[Message]) -> list[str]:
        """The numbers consistent with every guess's feedback in the conversation."""
        seen = [str(m["content"]).split(": ") for m in messages if m["role"] == "tool" and ": " in str(m["content"])
                and str(m["content"])[:1].isdigit()]
        got = [(g, (int(fb.split()[0]), int(fb.split()[2]))) for g, fb in seen]
        return [c for c in self.candidates if all(feedback(c, g) == f for g, f in got)]

    def teacher_turn(self, task: Task, messages: list[Message], noise: dict[str, bool] | None = None) -> str:
        noise = noise or {}
        turns = [m for m in messages if m["role"] == "assistant"]
        if messages[-1]["role"] == "tool" and messages[-1]["content"] == FAULT_TEXT:
            return format_tool_call(*message_call(turns[-1]))  # type: ignore[misc]
        left = self.consistent(messages)
        rng = random.Random(stable_hash("teacher", task.id, len(turns)))
        if len(left) == 1 or (noise.get("early_answer") and len(left) <= 3) or len(turns) == self.guesses:
            return left[0]
        if len(turns) == 1 and noise.get("repeat_guess"):
            return format_tool_call(*message_call(turns[0]))  # type: ignore[misc]
        if len(turns) == 2 and noise.get("ignore_feedback"):
            return format_tool_call("guess", {"number": rng.choice(self.candidates)})
        return format_tool_call("guess", {"number": left[0] if turns else rng.choice(self.candidates)})

    def probe_hacks(self, tasks: list[Task]) -> list[dict[str, object]]:
        """Guesses outside the rules (which would leak digit counts if answered), guesses past the budget, every
        candidate as the answer, and asking for the secret."""
        g = lambda number: format_tool_call("guess", {"number": number})
        fullwidth = lambda number: "".join(chr(ord(c) + 0xFEE0) for c in number)
        exploits = {"wrong_length": lambda t: [g("0123456789"), t.answer[::-1]],
                    "unicode_digits": lambda t: [g(fullwidth(t.answer)), t.answer[::-1]],
                    "past_the_budget": lambda t: [g(c) for c in self.candidates[:self.guesses + 3]] + [t.answer[::-1]],
                    "every_candidate_as_answer": lambda t: [" ".join(self.candidates)],
                    "repeated_digits": lambda t: [g(str(d) * self.digits) for d in range(10)][:self.guesses] + [t.answer[::-1]],
                    "not_digits": lambda t: [g("abc" if self.digits == 3 else "abcd"), t.answer[::-1]],
                    "ask_for_the_secret": lambda t: ["What is the secret number?", t.answer[::-1]],
                    "ask_via_the_tool": lambda t: [g("secret"), t.answer[::-1]]}
        return probe_table(self, tasks, exploits, lambda t: [t.answer[::-1]])
