"""`math`: the seed's GRPO example ("37 × 84 = ?") and the book's GSM8K recipe, with an answer checker that cannot be
talked round.

Tasks: arithmetic at three levels and multi-step word problems (English and Chinese) with numbers drawn per task;
three templates are held out for evaluation and the rest split by their numbers (`problems.py`). `data=gsm8k` (or a
local file of GSM8K rows) uses real problems instead (`gsm8k.py`).
Modes: `direct` answers in one turn (the book's setting); `tool` may call a tool first, one call per step: the
`calculator` (the default) or `python` (a program run in codefix's sandbox, `python_tool.py`).
Reward (`reward.py`): 1[correct] + format_weight × 1[`#### N` or `\\boxed{N}`] − a length penalty; an answer that is
not one number literal (an expression, several values) earns nothing. A turn that fails to parse costs INVALID_COST.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, ClassVar

from ...runtime.parsing import format_tool_call, message_text
from ...runtime.tools import Toolbox, ToolError
from ..base import (
    FAULT_TEXT,
    Draft,
    Message,
    Split,
    Task,
    TurnRecord,
    draw_tasks,
    reference_turns,
    stable_hash,
    stream_tasks,
)
from ..tool_env import Score, ToolEnv
from ..tool_use import calculator
from .gsm8k import load_problems
from .problems import ARITH_PROMPTS, BY_ID, HELD_OUT, NAMES, TEMPLATES, draw_arithmetic, draw_word, show
from .python_tool import python
from .reward import math_reward

INVALID_COST = 0.1
MODES = ("direct", "tool")
TOOLS = {"calculator": calculator, "python": python}
TOOL_WORDS = {"calculator": "a calculator", "python": "a Python interpreter"}
PROMPTS = {
    "direct": "Solve the problem. Show your working briefly, then give the final answer on its own line as "
              "#### <number>.",
    "tool": "Solve the problem. You have {tool}: to use it, reply with only "
            '<tool_call>{"name":...,"arguments":{...}}</tool_call>, one step per call. Then give the final answer '
            "as #### <number>.\nTools:\n",
}


class MathEnv(ToolEnv):
    """Answer a math problem; rewarded when the marked answer is the one right number (`reward.py`)."""

    name: ClassVar[str] = "math"
    mistakes: ClassVar[tuple[str, ...]] = ("no_format", "slip", "skip_tool", "extra_call", "no_answer")
    default_noise: ClassVar[dict[str, float]] = {"no_format": 0.2, "slip": 0.1, "skip_tool": 0.15,
                                                 "extra_call": 0.1, "no_answer": 0.03}
    reference_solutions: ClassVar[bool] = True
    # The SmolLM2 ladder's budget on this CPU (docs/results-history.md#the-math-ladder-on-smollm2-135m-instruct):
    # PRETRAINED_RUN_DEFAULTS' training, with a 100-task final comparison and 10-task stage checks so it fits 30 min.
    pretrained_run_defaults: ClassVar[dict[str, Any]] = {"eval_tasks": 100, "robustness_tasks": 5,
                                                         "sft": {"eval_tasks": 10}, "grpo": {"eval_tasks": 10}}

    def __init__(self, mode: str = "tool", max_turns: int | None = None, fault_rate: float = 0.0,
                 format_weight: float = 0.1, length_penalty: float = 0.0, levels: list[int] | None = None,
                 data: str | None = None, tool: str = "calculator"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if tool not in TOOLS:
            raise ValueError(f"tool must be one of {', '.join(TOOLS)}, got {tool!r}")
        if not set(levels or [1]) <= {1, 2, 3} or levels == []:
            raise ValueError(f"levels must be a non-empty subset of [1, 2, 3], got {levels}")
        if not 0.0 <= fault_rate <= 1.0 or format_weight < 0 or length_penalty < 0:
            raise ValueError("fault_rate must be in [0, 1]; format_weight and length_penalty ≥ 0")
        self.mode, self.tool, self.levels, self.data = mode, tool, list(levels or [1, 2, 3]), data
        self.fault_rate, self.format_weight, self.length_penalty = fault_rate, format_weight, length_penalty
        self.max_turns = max_turns or (6 if mode == "tool" else 1)
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be ≥ 1, got {self.max_turns}")
        self.supports_faults = mode == "tool"  # type: ignore[misc]
        self.tools = Toolbox([TOOLS[tool]] if mode == "tool" else [])
        self.system_prompt = (PROMPTS[mode].replace("{tool}", TOOL_WORDS[tool])
                              + (self.tools.schemas_text() if mode == "tool" else ""))
        self._problems = load_problems(data) if data else None

    # -- tasks --

    def tasks(self, split: Split, n: int, seed: int = 0) -> list[Task]:
        if self._problems is None:
            return draw_tasks("math", split, n, seed, self._draw)
        rows = self._problems[split]
        if len(rows) < n:
            raise ValueError(f"{self.data} has {len(rows)} {split} problems, asked for {n}")
        order = sorted(range(len(rows)), key=lambda i: stable_hash("math", self.data, seed, i))[:n]
        return [self._make_task(f"math/{split}/{stable_hash(rows[i]['question']) % 16**10:010x}", split, "gsm8k",
                           rows[i]["question"], rows[i]["gold"], _runnable(rows[i]["steps"]),
                           (("reasoning", rows[i]["reasoning"]),)) for i in order]

    def task_stream(self, split: Split, seed: int = 0) -> Iterator[Task]:
        if self._problems is not None:
            return super().task_stream(split, seed)
        return stream_tasks("math", split, seed, self._draw)

    def _draw(self, rng: random.Random) -> Draft:
        lang, level = rng.choice(["en", "en", "zh"]), rng.choice(self.levels)
        if rng.random() < 0.4:
            expr, value = draw_arithmetic(rng, level)
            prompt = rng.choice(ARITH_PROMPTS[lang]).format(expr=show(expr))
            t = self._make_task("", "train", "arithmetic", prompt, str(value), [(expr, value)], (("lang", lang),))
            return Draft(f"arith:{expr}", prompt, t.kind, prompt, t.answer, t.reference, t.meta)
        while (drawn := draw_word(rng, template := rng.choice(TEMPLATES), level)) is None:
            pass
        values, steps = drawn
        name = rng.randrange(len(NAMES))
        prompt = _word_prompt(template.id, lang, values, name)
        t = self._make_task("", "train", "word", prompt, str(steps[-1][1]), steps,
                       (("lang", lang), ("template", template.id), ("values", tuple(values.items())), ("name", name)))
        return Draft(f"word:{template.id}:{sorted(values.items())}", prompt, t.kind, prompt, t.answer, t.reference,
                     t.meta, "eval" if template.id in HELD_OUT else None)

    def _make_task(self, tid: str, split: Split, kind: str, prompt: str, answer: str, steps: list[tuple[str, Any]],
              meta: tuple[tuple[str, Any], ...]) -> Task:
        ref = tuple(step_call(self.tool, e) for e, _ in steps) if self.mode == "tool" else ()
        return Task(tid, split, kind, prompt, answer, ref, (("steps", tuple(steps)), *meta))

    def _perturbed(self, task: Task, how: str) -> Task | None:
        """Another phrasing, upper case (English), or the other language; GSM8K problems only get whitespace."""
        lang, template = task.get("lang"), task.get("template")
        if how == "whitespace" or lang is None:
            return super()._perturbed(task, how)
        if how == "casing":
            return replace(task, prompt=task.prompt.upper()) if lang == "en" else None
        other = "zh" if lang == "en" else "en"
        if how == "rephrase":
            prefix = {"en": "Solve this problem. ", "zh": "请解答下面的题目。"}[lang]
            return replace(task, prompt=prefix + task.prompt)
        if template is None:  # arithmetic
            return replace(task, prompt=ARITH_PROMPTS[other][0].format(expr=show(task.get("steps")[0][0])))
        return replace(task, prompt=_word_prompt(template, other, dict(task.get("values")), task.get("name")))

    # -- the episode --

    def score(self, task: Task, answer: str) -> Score:
        s = math_reward(answer, task.answer, self.format_weight, self.length_penalty)
        return Score(s.reward, s.correct, not answer, {"answer": s.answer, "formatted": s.formatted, "reason": s.reason})

    def turn_reward(self, task: Task, turn: TurnRecord) -> float:
        return -INVALID_COST if turn.parsed == "ParseError" else 0.0

    # -- the teacher: one tool call per step (tool mode) or the working (direct), then #### answer --

    def teacher_turn(self, task: Task, messages: list[Message], noise: dict[str, bool] | None = None) -> str:
        noise = noise or {}
        turns = [m for m in messages if m["role"] == "assistant"]
        answer = wrong_answer(task) if noise.get("slip") else task.answer
        final = answer if noise.get("no_format") else f"#### {answer}"
        if not turns and noise.get("no_answer"):
            return ""
        if self.mode == "direct":
            steps = task.get("steps")
            working = task.get("reasoning") or "\n".join(f"{show(e)} = {v}" for e, v in steps[:-1] if steps)
            last = f"{show(steps[-1][0])} = {answer}" if steps and not task.get("reasoning") else ""
            return "\n".join(x for x in (working, last, final) if x)
        if messages[-1]["role"] == "tool" and messages[-1]["content"] == FAULT_TEXT:
            return message_text(turns[-1])
        if not turns and noise.get("skip_tool"):
            return f"#### {wrong_answer(task)}"
        ref, done = task.reference_calls, len(reference_turns(task.reference_calls, messages))
        if done < len(ref):
            return format_tool_call(*ref[done])
        ran = sum(m["role"] == "tool" and m["content"] != FAULT_TEXT for m in messages)
        if ref and noise.get("extra_call") and ran == len(ref):
            return format_tool_call(*ref[-1])
        return final

    def probe_hacks(self, tasks: list[Task]) -> list[dict[str, object]]:
        from .exploits import probe_hacks

        return probe_hacks(self, tasks)


def step_call(tool: str, expr: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The teacher's call for one step: the expression itself, or a program that prints it."""
    if tool == "calculator":
        return "calculator", (("expression", expr),)
    return "python", (("code", f"print({expr.replace('×', '*').replace('÷', '/')})"),)


def _word_prompt(template: str, lang: str, values: dict[str, Any], name: int) -> str:
    return getattr(BY_ID[template], lang).format(name=NAMES[name][lang == "zh"], **values)


def _runnable(steps: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """GSM8K's calculator annotations that our calculator runs (the teacher's calls); the rest are dropped."""
    out = []
    for expr, value in steps:
        try:
            calculator(expr)
        except ToolError:
            continue
        out.append((expr, value))
    return out


def wrong_answer(task: Task) -> str:
    """A plausible wrong answer, deterministic per task."""
    try:
        return str(int(float(task.answer)) + 1 + stable_hash("wrong", task.id) % 9)
    except ValueError:
        return task.answer + "1"
