"""The math reward: is the answer right (math-verify, the checker TRL's accuracy reward uses), is it in the asked
format, and is the reply short enough — with guards against answers that hedge.

    reward = 1[correct] + format_weight × 1[formatted] − length_penalty × min(1, overflow / max_chars)

The answer is what a `#### N` line or a `\\boxed{N}` marks; without a marker, the reply's last number (math-verify's
rule). Guards, each giving 0 for both terms: marked answers that disagree (`#### 3108` then `#### 3018`, or many
`\\boxed{}`), a marked answer holding more than one number, and an unmarked reply listing more than MAX_NUMBERS
numbers (answer spam). math-verify reads `3,108`, `\\frac{1}{2}`, `0.5`, `12 dollars` and `$12` as the values they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from math_verify import parse, verify

MAX_NUMBERS = 24  # an unmarked reply with more numbers than this is a list of guesses, not working
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
LISTED = re.compile(r"\d\s*(?:[,;]|\s|\bor\b|\band\b|或|和)\s*-?\d")  # two numbers side by side: "3108, 3018"
MARKED = re.compile(r"####\s*([^\n]*)|\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")


@dataclass(frozen=True)
class MathScore:
    reward: float
    correct: bool
    formatted: bool
    answer: str  # the text that was checked ("" when a guard fired or there is none)


def math_reward(reply: str, gold: str, format_weight: float = 0.1, length_penalty: float = 0.0,
                max_chars: int = 400) -> MathScore:
    """Score one reply against the gold answer; see the module docstring for the formula and the guards."""
    overflow = max(0, len(reply) - max_chars)
    cost = length_penalty * min(1.0, overflow / max_chars)
    marked = [(a or b).strip() for a, b in MARKED.findall(reply)]
    if marked:
        values = {_value(m) for m in marked}
        if len(values) != 1 or any(LISTED.search(THOUSANDS.sub("", m)) for m in marked):
            return MathScore(-cost if cost else 0.0, False, False, "")  # hedging: several answers
        answer, formatted = marked[-1], True
    else:
        if len(NUMBER.findall(reply)) > MAX_NUMBERS:
            return MathScore(-cost if cost else 0.0, False, False, "")  # answer spam
        answer, formatted = reply, False
    correct = bool(answer) and is_correct(answer, gold)
    return MathScore(float(correct) + format_weight * formatted - cost, correct, formatted, answer)


def is_correct(answer: str, gold: str) -> bool:
    """math-verify's verdict: the answer's value equals the gold's (fractions, decimals, separators, units)."""
    try:
        return bool(verify(parse(gold), parse(answer)))
    except Exception:  # math-verify on text it cannot read: not an answer
        return False


def _value(text: str) -> str:
    """A canonical form of a marked answer, to tell whether two markers agree."""
    got = parse(text)
    return str(got[0]) if got else text.replace(",", "").strip()
