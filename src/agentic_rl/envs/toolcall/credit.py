"""toolcall's two rewards for the calls an episode made: all-or-nothing exact calls, and per-call credit.

Per-call credit gives GRPO a gradient where exact calls give none (a group whose samples all miss one argument all
score 0), in the spirit of ToolRL's name / parameter / value matching, and is built so that no way of calling scores
above the honest attempt it imitates:

    R_calls = clip( ( Σ_{(m, g) matched} s(m, g)  −  #unmatched calls made ) / |gold| , −1, 1 )
    s(m, g) = 0 if the names differ, else NAME + (1 − NAME) × (#arguments equal to gold's) / #(gold's ∪ m's arguments)

The calls made are those that ran (a call the tool refused did nothing); they are matched to the gold calls by the
assignment that maximises Σ s, so the order of parallel calls does not matter. Arguments compare in canonical form
(optional ones equal to their default left out, numbers as numbers, arrays as sets); an argument gold does not have
widens the union, so filling every parameter the schema has scores below leaving the extra ones out. Each unmatched
call costs a whole gold call, so repeating the right call, calling every offered tool or shotgunning values (one
call per candidate) scores no higher than one honest attempt with a wrong value. A task that needs no call scores 1
only with no call at all (one the tool refused, one that did not parse or met a fault included). The answer scales
the calls' credit and never lifts a negative one: with a gold answer (an id) R = min(R_calls, R_calls × (1 +
1[answer]) / 2) — the answer is worth what the calls that found it are, so looking up several names to learn the
id is paid no more than its calls; else R = min(R_calls, R_calls × 1[answer]), so leaving the answer out never
helps. Only the exact calls with the right answer score 1.

A call that ran (a lookup of another name included) is a call made: looking up several names and keeping the right
one is the shotgun this rule must not pay, so a correction of a call that ran scores below one honest attempt; a
call the tool refused did nothing and costs only its turn's CALL_COST.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import permutations

NAME = 0.2  # the share of a call's credit for choosing the right function

Call = tuple[str, str]  # (function name, canonical JSON of the arguments)


def exact_calls(made: list[Call], gold: list[Call], answer_ok: bool, attempted: int, gold_answer: bool = False) -> float:
    """1 when the calls that ran are the gold calls (as a multiset) and the answer holds; a task that needs no call
    fails with any attempt, even one the tool refused. (`gold_answer` is per_call_credit's; the answer is in
    `answer_ok` here.)"""
    if not gold and attempted:
        return 0.0
    return float(sorted(made) == sorted(gold) and answer_ok)


def call_score(made: Call, gold: Call) -> float:
    """s(m, g): the function's name, then the share of arguments (gold's and the call's together) that equal gold's."""
    if made[0] != gold[0]:
        return 0.0
    m, g = json.loads(made[1]), json.loads(gold[1])
    keys = set(m) | set(g)
    same = sum(k in m and k in g and m[k] == g[k] for k in keys)
    return NAME + (1 - NAME) * (same / len(keys) if keys else 1.0)


def per_call_credit(made: list[Call], gold: list[Call], answer_ok: bool, attempted: int,
                    gold_answer: bool = False) -> float:
    """R of the module docstring: matched calls' credit less the unmatched calls, over the gold calls; the answer."""
    if not gold:
        return float(not attempted and answer_ok)
    best = _best_assignment(made, gold)
    calls = max(-1.0, min(1.0, (best - (len(made) - min(len(made), len(gold)))) / len(gold)))
    scaled = calls * (1 + float(answer_ok)) / 2 if gold_answer else calls * float(answer_ok)
    return min(calls, scaled)


def _best_assignment(made: list[Call], gold: list[Call]) -> float:
    """The largest Σ s over one-to-one matchings of made calls to gold calls (gold has at most a few calls)."""
    scores: list[list[float]] = [[call_score(m, g) for g in gold] for m in made]
    if len(made) >= len(gold):
        return max((sum(scores[i][j] for j, i in enumerate(pick)) for pick in permutations(range(len(made)),
                                                                                            len(gold))), default=0.0)
    return max(sum(scores[i][j] for i, j in enumerate(pick)) for pick in permutations(range(len(gold)), len(made)))


# A reward of the calls: f(calls that ran, gold calls, the answer holds, calls attempted, the task has a gold answer).
REWARDS: dict[str, Callable[[list[Call], list[Call], bool, int, bool], float]] = {
    "exact": exact_calls, "per_call": per_call_credit}
