"""The math env's data: arithmetic and grade-school word problems (English and Chinese), numbers drawn per task.

A word problem is a template with named numbers and a list of steps; step k may use the numbers and the earlier
results s1 … s(k-1), and the last step is the answer. Difficulty scales the numbers' ranges (level 1: as written;
level 2 and 3: ×10 and ×100 at the top). Draws whose steps are not positive integers are drawn again.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

NAMES = [("Tom", "小明"), ("Anna", "小红"), ("Li Wei", "李伟"), ("Maria", "玛丽亚"), ("Ken", "小刚"), ("Sara", "莎拉")]


@dataclass(frozen=True)
class Template:
    id: str
    en: str
    zh: str
    numbers: dict[str, tuple[int, int]]  # name → (low, high) at level 1
    steps: tuple[str, ...]  # expressions over the numbers and s1, s2, …


TEMPLATES = [
    Template("apples", "{name} has {a} boxes of apples with {b} apples in each box. {name} eats {c} apples. How many "
             "apples are left?", "{name}有{a}箱苹果，每箱{b}个。{name}吃了{c}个。还剩多少个苹果？",
             {"a": (2, 9), "b": (3, 12), "c": (1, 9)}, ("a * b", "s1 - c")),
    Template("pencils", "A pencil costs {a} dollars and a notebook costs {b} dollars. How much do {c} pencils and {d} "
             "notebooks cost?", "一支铅笔{a}元，一本笔记本{b}元。买{c}支铅笔和{d}本笔记本一共多少元？",
             {"a": (1, 9), "b": (2, 9), "c": (2, 9), "d": (2, 9)}, ("a * c", "b * d", "s1 + s2")),
    Template("savings", "{name} saves {a} dollars a week for {b} weeks, then spends {c} dollars on a bike. How many "
             "dollars are left?", "{name}每周存{a}元，存了{b}周，然后花{c}元买了一辆自行车。还剩多少元？",
             {"a": (5, 20), "b": (3, 12), "c": (10, 50)}, ("a * b", "s1 - c")),
    Template("bus", "A bus starts with {a} passengers. At the first stop {b} get off and {c} get on. How many "
             "passengers are on the bus now?", "一辆公交车上原有{a}名乘客。第一站下车{b}人，上车{c}人。现在车上有多少名乘客？",
             {"a": (10, 40), "b": (1, 9), "c": (1, 15)}, ("a - b", "s1 + c")),
    Template("garden", "A garden has {a} rows of {b} flowers. {c} more rows are planted. How many flowers are there "
             "now?", "花园里有{a}行花，每行{b}朵。又种了{c}行。现在一共有多少朵花？",
             {"a": (2, 9), "b": (3, 12), "c": (1, 6)}, ("a + c", "s1 * b")),
    Template("cookies", "{name} bakes {a} trays of {b} cookies and packs them into bags of {c}. How many bags does "
             "{name} fill?", "{name}烤了{a}盘饼干，每盘{b}块，每袋装{c}块。能装满多少袋？",
             {"a": (2, 9), "b": (4, 12), "c": (2, 6)}, ("a * b", "s1 / c")),
    Template("train", "A train travels at {a} km per hour for {b} hours, then {c} km more. How far does it travel in "
             "total?", "一列火车以每小时{a}千米的速度行驶{b}小时，然后又行驶了{c}千米。一共行驶了多少千米？",
             {"a": (20, 90), "b": (2, 6), "c": (5, 50)}, ("a * b", "s1 + c")),
    Template("library", "A library has {a} books. It lends out {b} books on Monday and twice as many on Tuesday. How "
             "many books are still in the library?", "图书馆有{a}本书。星期一借出{b}本，星期二借出的是星期一的两倍。图书馆还剩多少本书？",
             {"a": (60, 200), "b": (5, 19)}, ("b * 2", "b + s1", "a - s2")),
    Template("shop", "A shop sells {a} shirts on Monday and {b} shirts on Tuesday at {c} dollars each. How much money "
             "does it make?", "一家商店星期一卖出{a}件衬衫，星期二卖出{b}件，每件{c}元。一共收入多少元？",
             {"a": (2, 15), "b": (2, 15), "c": (5, 30)}, ("a + b", "s1 * c")),
    # held out: evaluation only (HELD_OUT), so the eval split has templates never trained on
    Template("pages", "{name} reads {a} pages a day. The book has {b} pages. After {c} days, how many pages are left "
             "to read?", "{name}每天读{a}页。这本书有{b}页。{c}天后还剩多少页没读？",
             {"a": (5, 20), "b": (120, 300), "c": (2, 6)}, ("a * c", "b - s1")),
    Template("legs", "A farmer has {a} chickens and {b} cows. How many legs do the animals have in total?",
             "农民有{a}只鸡和{b}头牛。这些动物一共有多少条腿？", {"a": (2, 20), "b": (2, 15)}, ("a * 2", "b * 4", "s1 + s2")),
    Template("weather", "The temperature was {a} degrees in the morning. It rose {b} degrees by noon and fell {c} "
             "degrees by night. What was the temperature at night?", "早上气温是{a}度。到中午升高了{b}度，到晚上又下降了{c}度。晚上的气温是多少度？",
             {"a": (10, 25), "b": (2, 12), "c": (3, 15)}, ("a + b", "s1 - c")),
]
HELD_OUT = {"pages", "legs", "weather"}
BY_ID = {t.id: t for t in TEMPLATES}

# Arithmetic by level: 1 adds or subtracts three-digit numbers, 2 multiplies two-digit ones (the seed's 37 × 84),
# 3 takes two operations.
ARITHMETIC = {1: ("a + b", "a - b"), 2: ("a * b",), 3: ("a * b + c", "(a + b) * c", "a * b - c")}
ARITH_RANGES = {1: (100, 999), 2: (12, 99), 3: (12, 99)}
ARITH_PROMPTS = {"en": ["What is {expr}?", "Compute {expr}."], "zh": ["{expr} 等于多少？"]}
SHOWN = {"*": "×", "/": "÷"}


def evaluate(expr: str, values: dict[str, int]) -> Fraction:
    """Exact value of a step: + - * / and parentheses over named integers (eval with no builtins, data-only input)."""
    return eval(expr, {"__builtins__": {}}, {k: Fraction(v) for k, v in values.items()})


def draw_word(rng: random.Random, template: Template, level: int) -> tuple[dict[str, Any], list[tuple[str, int]]] | None:
    """Numbers for `template` at `level` and its steps [(expression with numbers, value)], or None if a step is not a
    positive integer (the caller draws again)."""
    values = {k: rng.randint(lo, hi * 10 ** (level - 1)) for k, (lo, hi) in template.numbers.items()}
    steps: list[tuple[str, int]] = []
    for i, expr in enumerate(template.steps, 1):
        value = evaluate(expr, values)
        if value.denominator != 1 or value <= 0:
            return None
        shown = expr
        for k in sorted(values, key=len, reverse=True):
            shown = shown.replace(k, str(values[k]))
        steps.append((shown, int(value)))
        values[f"s{i}"] = int(value)
    return values, steps


def draw_arithmetic(rng: random.Random, level: int) -> tuple[str, int]:
    """An expression of `level` (with * and /, as a calculator takes it) and its value."""
    lo, hi = ARITH_RANGES[level]
    expr = rng.choice(ARITHMETIC[level])
    values = {k: rng.randint(lo, hi) for k in "abc"}
    if level == 3:
        values["c"] = rng.randint(2, 9)
    for k, v in values.items():
        expr = expr.replace(k, str(v))
    return expr, int(evaluate(expr, {}))


def show(expr: str) -> str:
    """An expression as a person writes it: 37 × 84."""
    for op, sign in SHOWN.items():
        expr = expr.replace(op, sign)
    return expr
