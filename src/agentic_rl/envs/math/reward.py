"""The math reward: is the answer the right number, is it in the asked format, and is the reply short enough — with
guards against answers that hedge or make the checker compute.

    reward = 1[correct] + format_weight × 1[formatted] − length_penalty × min(1, overflow / max_chars)

Reasoning blocks (`<think>…</think>`) are dropped first. The answer is what each `#### N` line and `\\boxed{N}`
marks; without a marker, the reply's last number, which must be the only number on its line. A marked answer
counts only when it is one number literal
(`answer.read_number`: `1,420`, `1 420`, `\\frac{1}{2}`, `1.42e3`, `一千四百二十`, with units): an expression
(`26 * 32`, which a lenient checker would evaluate, so copying the question would pay), several values, a complex or
modular form, or markers that disagree earn 0 for both terms; so does an unmarked reply listing more than
MAX_NUMBERS numbers (answer spam). `MathScore.reason` says why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from .answer import normalize_digits, read_number, strip_reasoning

MAX_NUMBERS = 24  # an unmarked reply with more numbers than this is a list of guesses, not working
NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")
MARKED = re.compile(r"####[ \t]*([^\n]*)|\\boxed\s*\{((?:[^{}]|\{[^{}]*\})*)\}")


@dataclass(frozen=True)
class MathScore:
    reward: float
    correct: bool
    formatted: bool
    answer: str  # the text that was checked ("" when a guard fired or there is none)
    reason: str = ""  # why the answer was not read as a number ("" when it was)


def math_reward(reply: str, gold: str, format_weight: float = 0.1, length_penalty: float = 0.0,
                max_chars: int = 400) -> MathScore:
    """Score one reply against the gold answer; see the module docstring for the formula and the guards.

    >>> math_reward("37 × 84 = 3108\\n#### 3108", "3108").reward
    1.1
    >>> math_reward("#### 37 * 84", "3108").reason
    "not one number literal (an expression or several values): '37 * 84'"
    """
    overflow = max(0, len(reply) - max_chars)
    cost = length_penalty * min(1.0, overflow / max_chars)
    nothing = lambda reason: MathScore(-cost if cost else 0.0, False, False, "", reason)
    text = normalize_digits(strip_reasoning(reply))
    marked = [(a or b).strip() for a, b in MARKED.findall(text)]
    if marked:
        readings = [read_number(m) for m in marked]
        refused = next((r.reason for r in readings if r.value is None), "")
        if refused:
            return nothing(refused)
        if len({r.value for r in readings}) != 1:
            return nothing(f"marked answers disagree: {', '.join(marked[:4])}")
        answer, value, formatted = marked[-1], readings[-1].value, True
    else:
        numbers = NUMBER.findall(text)
        if len(numbers) > MAX_NUMBERS:
            return nothing(f"answer spam: {len(numbers)} numbers and no marked answer")
        if not numbers:
            return nothing("no answer")
        last_line = next(line for line in reversed(text.splitlines()) if NUMBER.search(line))
        if len(NUMBER.findall(last_line)) > 1:  # "3018, or maybe 3108": the answer must be one number there too
            return nothing(f"no marked answer, and the last line holds several numbers: {last_line.strip()[:80]!r}")
        answer, value, formatted = numbers[-1], read_number(numbers[-1]).value, False
    correct = value is not None and value == gold_value(gold)
    return MathScore(float(correct) + format_weight * formatted - cost, correct, formatted, answer)


def gold_value(gold: str) -> Fraction:
    """The gold answer's value (task answers are number literals)."""
    value = read_number(gold).value
    if value is None:
        raise ValueError(f"the gold answer {gold!r} is not a number literal")
    return value
