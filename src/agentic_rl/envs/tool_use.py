"""`tool_use`: the seed's §1 and §4 made concrete — choose the right tool, skip needless ones, retry faults, stop.

Task kinds (English and Chinese templates):
  calc         hard arithmetic (37 × 84)                      → calculator, then answer
  weather      the weather in a city ("北京天气？")            → get_weather, then answer the condition
  temperature  a city's temperature                            → get_weather, then answer the number
  search       a fact about a synthetic entity                 → search, then answer the fact
  trivial      2 + 3, "repeat the word X"                      → answer at once; any tool call is waste
  two_step     a city's temperature plus a number              → get_weather, calculator, then answer

The weather changes from day to day: each weather, temperature and two-step task happens on its own day (part of
the task), and `get_weather` reports that day's weather. So the answer can only come from the tool — never from
memory of the training tasks — which is the behaviour the env exists to teach. (With one fixed weather per city, a
model learns "Beijing → sunny" from its demonstrations instead of reading the observation, and fails on every
held-out city.)

Transient faults: each tool call fails with probability `fault_rate` ("error: service unavailable, try again"), at
most MAX_FAULTS (2) times per episode, decided by a hash of (task id, call index) so the same trajectory always gets
the same observations. The right move is to call again.

Reward (per turn; the episode reward is their sum):
    r = 1[final answer correct]
        − CALL_COST   × (successful tool calls beyond the reference solution)
        − INVALID_COST × (turns that fail to parse or call a tool with invalid arguments)
With no answer by the turn limit the first term is 0 and the costs still apply, so looping never beats answering.
Faulted calls and their retries are free: recovering is what we want.
"""

from __future__ import annotations

import ast
import operator
import random
import string
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, ClassVar

from ..runtime.parsing import format_tool_call, message_text
from ..runtime.tools import Toolbox, ToolError, to_json
from .base import (
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
from .tool_env import Score, ToolEnv

CALL_COST = 0.1
INVALID_COST = 0.2

SYSTEM_PROMPT = (
    "You are an agent with tools. Call a tool only when you need it. To call one, reply with only "
    '<tool_call>{"name":...,"arguments":{...}}</tool_call>. If a tool fails, try again. '
    "When you know the answer, reply with the answer only.\nTools:\n"
)

# --- the world the tools look at: deterministic, local, and synthetic where memorising must not help --------------

CITIES = [
    ("Beijing", "北京"), ("Shanghai", "上海"), ("Guangzhou", "广州"), ("Shenzhen", "深圳"), ("Chengdu", "成都"),
    ("Hangzhou", "杭州"), ("Wuhan", "武汉"), ("Xian", "西安"), ("Nanjing", "南京"), ("Chongqing", "重庆"),
    ("Tokyo", "东京"), ("Seoul", "首尔"), ("Paris", "巴黎"), ("London", "伦敦"), ("Berlin", "柏林"),
    ("Madrid", "马德里"), ("Rome", "罗马"), ("Moscow", "莫斯科"), ("Cairo", "开罗"), ("Sydney", "悉尼"),
    ("Toronto", "多伦多"), ("Chicago", "芝加哥"), ("Boston", "波士顿"), ("Lima", "利马"), ("Delhi", "德里"),
    ("Bangkok", "曼谷"), ("Singapore", "新加坡"), ("Dubai", "迪拜"), ("Oslo", "奥斯陆"), ("Vienna", "维也纳"),
]
CONDITIONS = ["sunny", "cloudy", "rainy", "snowy", "windy", "foggy"]


DAYS = 365
CITY_EN = {name: en for en, zh in CITIES for name in (en, zh)}


def weather_on(city: str, day: int) -> tuple[str, int]:
    """(condition, °C) in `city` (English or Chinese name) on `day`; ToolError for a city the world does not have."""
    en = CITY_EN.get(city.strip())
    if en is None:
        raise ToolError(f"unknown city {city!r}")
    h = stable_hash("weather", en, day % DAYS)
    return CONDITIONS[h % len(CONDITIONS)], (h >> 8) % 36 - 5  # -5 … 30 °C

_SYL = ["ka", "zor", "vel", "mi", "tan", "ro", "quin", "dal", "sef", "lu", "bra", "nox", "ith", "par", "gel", "ru"]
_SUFFIX = ["Industries", "Labs", "Works", "Group", "Foundry", "Systems"]


def _entities(n: int = 1000) -> dict[str, dict[str, Any]]:
    """Synthetic companies, so the facts cannot have been memorised by any pretrained model. Enough of them that a
    learner cannot memorise the train split's facts either: with too few, the tiny policy answers train entities'
    questions from memory instead of learning to read the search result (docs/design-notes.md#tool_use-task-mix)."""
    rng = random.Random(1234)
    out: dict[str, dict[str, Any]] = {}
    while len(out) < n:
        name = (rng.choice(_SYL) + rng.choice(_SYL)).capitalize() + " " + rng.choice(_SUFFIX)
        if name in out:
            continue
        founder = (rng.choice(_SYL) + rng.choice(_SYL)).capitalize() + " " + (rng.choice(_SYL) + rng.choice(_SYL)).capitalize()
        out[name] = {"founder": founder, "year": rng.randint(1900, 2020), "city": rng.choice(CITIES)[0]}
    return out


ENTITIES = _entities()
WORDS = ["apple", "river", "stone", "cloud", "tiger", "lamp", "garden", "silver", "rocket", "piano", "maple", "ocean",
         "violet", "window", "candle", "forest", "harbor", "pepper", "saddle", "tunnel", "苹果", "河流", "石头", "月亮"]
# Made-up words too (every two-syllable one), so "repeat the word X" has enough distinct tasks for its share of the
# mix (KIND_WEIGHTS) and a held-out word is one the policy must copy, not recall.
WORDS += sorted({a + b for a in _SYL for b in _SYL} - set(WORDS))


# --- tools: plain typed functions; the schema comes from the signature and docstring ---------------------------------

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.USub: operator.neg, ast.UAdd: operator.pos}


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / // % and parentheses.

    Args:
        expression: The expression, for example "37 * 84".
    """
    if len(expression) > 200:
        raise ToolError("expression too long (at most 200 characters)")

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ToolError("only numbers, + - * / // % and parentheses are allowed")

    try:
        value = ev(ast.parse(expression.replace("×", "*").replace("÷", "/"), mode="eval").body)
    except SyntaxError:
        raise ToolError(f"cannot parse expression {expression!r}") from None
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    return _fmt(value)


def weather_tool(today: Callable[[], int]) -> Callable[[str], str]:
    """The `get_weather` tool of a world whose current day is `today()` (the env sets it from the task)."""

    def get_weather(city: str) -> str:
        """Get today's weather in a city.

        Args:
            city: The city name, in English or Chinese, for example "Beijing" or "北京".
        """
        condition, temp = weather_on(city, today())
        return to_json({"city": city.strip(), "condition": condition, "temperature_c": temp})

    return get_weather


def search(query: str) -> str:
    """Search the knowledge base for facts about a company.

    Args:
        query: The company name, for example "Zorvath Industries".
    """
    e = ENTITIES.get(query.strip())
    if e is None:
        hits = [n for n in ENTITIES if query.strip().lower() and query.strip().lower() in n.lower()]
        if len(hits) != 1:
            return "no results"
        query, e = hits[0], ENTITIES[hits[0]]
    return f"{query.strip()}: founded by {e['founder']} in {e['year']}, headquartered in {e['city']}."


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.6g}"


# --- task templates ------------------------------------------------------------------------------------------------

TEMPLATES: dict[str, dict[str, list[str]]] = {
    "calc": {"en": ["What is {a} {op} {b}?", "Compute {a} {op} {b}."], "zh": ["{a} {op} {b} 等于多少？"]},
    "weather": {"en": ["What's the weather in {city}?", "How is the weather in {city} today?"], "zh": ["{city}天气？"]},
    "temperature": {"en": ["What is the temperature in {city} in °C?"], "zh": ["{city}现在多少度？"]},
    "search_founder": {"en": ["Who founded {entity}?"], "zh": ["{entity}的创始人是谁？"]},
    "search_year": {"en": ["In what year was {entity} founded?"], "zh": ["{entity}是哪一年成立的？"]},
    "search_city": {"en": ["Where is {entity} headquartered?"], "zh": ["{entity}的总部在哪个城市？"]},
    "trivial_add": {"en": ["What is {a} + {b}?"], "zh": ["{a} + {b} 等于几？"]},
    "repeat": {"en": ["Repeat the word {word}."], "zh": ["重复这个词：{word}"]},
    "two_step": {"en": ["What is the temperature in {city} plus {n}?"], "zh": ["{city}的气温加上{n}是多少？"]},
}
KIND_WEIGHTS = {"calc": 3, "weather": 2, "temperature": 1, "search": 3, "trivial": 2, "two_step": 2}
WEATHER_KINDS = ("weather", "temperature", "two_step")  # tasks whose answer depends on the day they are asked on


# Phrasings never used in training: `perturb(task, "rephrase")` asks the same question in one of these.
REPHRASE: dict[str, dict[str, list[str]]] = {
    "calc": {"en": ["Please calculate {a} {op} {b}."], "zh": ["请计算 {a} {op} {b}。"]},
    "weather": {"en": ["Tell me today's weather in {city}."], "zh": ["{city}今天天气怎么样？"]},
    "temperature": {"en": ["How many degrees Celsius is it in {city}?"], "zh": ["{city}的气温是多少度？"]},
    "search_founder": {"en": ["Who is the founder of {entity}?"], "zh": ["谁创立了{entity}？"]},
    "search_year": {"en": ["When was {entity} founded? Give the year."], "zh": ["{entity}成立于哪一年？"]},
    "search_city": {"en": ["In which city is {entity} headquartered?"], "zh": ["{entity}的总部位于哪座城市？"]},
    "trivial_add": {"en": ["Add {a} and {b}."], "zh": ["{a}加{b}等于多少？"]},
    "repeat": {"en": ["Say the word {word} back to me."], "zh": ["请重复：{word}"]},
    "two_step": {"en": ["Add {n} to the temperature in {city}."], "zh": ["{city}的温度再加{n}是多少？"]},
}


class _Draw:
    """One drawn task before it becomes a Task: its content key, the question's template and parameters."""

    def __init__(self, key: str, template: str, lang: str, params: dict[str, Any], rng: random.Random,
                 answer: str, calls: list[tuple[str, dict[str, Any]]], kind: str, day: int = 0):
        self.key, self.template, self.lang, self.params = key, template, lang, params
        self.prompt = rng.choice(TEMPLATES[template][lang]).format(**params)
        self.answer, self.calls, self.kind, self.day = answer, calls, kind, day

    @property
    def meta(self) -> tuple[tuple[str, Any], ...]:
        return (("template", self.template), ("lang", self.lang), ("params", tuple(sorted(self.params.items()))),
                ("day", self.day))

    def draft(self) -> Draft:
        ref = tuple((name, tuple(sorted(args.items()))) for name, args in self.calls)
        return Draft(self.key, self.identity, self.kind, self.prompt, self.answer, ref, self.meta)

    @property
    def identity(self) -> str:
        """What makes two draws the same task. A weather question asked on another day has another answer, so it is
        another task; keyed on the prompt alone, the few distinct weather prompts (cities × templates) would each be
        drawn once, far below KIND_WEIGHTS' share of weather tasks."""
        return f"{self.prompt}\x00day {self.day}" if self.kind in WEATHER_KINDS else self.prompt


def _make(kind: str, rng: random.Random) -> _Draw:
    """Draw one task of `kind`."""
    lang = rng.choice(["en", "en", "zh"])
    if kind == "calc":
        op = rng.choice(["×", "+", "-"])
        a, b = (rng.randint(12, 99), rng.randint(12, 99)) if op == "×" else (rng.randint(100, 999), rng.randint(100, 999))
        expr = f"{a} {'*' if op == '×' else op} {b}"
        return _Draw(f"calc:{a}{op}{b}", "calc", lang, {"a": a, "op": op, "b": b}, rng, calculator(expr),
                     [("calculator", {"expression": expr})], "calc")
    if kind in WEATHER_KINDS:
        en, zh = rng.choice(CITIES)
        city = en if lang == "en" else zh
        day = rng.randrange(DAYS)
        condition, temp = weather_on(city, day)
        if kind == "weather":
            return _Draw(f"weather:{city}", "weather", lang, {"city": city}, rng, condition,
                         [("get_weather", {"city": city})], kind, day)
        if kind == "temperature":
            return _Draw(f"temperature:{city}", "temperature", lang, {"city": city}, rng, str(temp),
                         [("get_weather", {"city": city})], kind, day)
        n = rng.randint(11, 99)
        calls = [("get_weather", {"city": city}), ("calculator", {"expression": f"{temp} + {n}"})]
        return _Draw(f"two_step:{city}+{n}", "two_step", lang, {"city": city, "n": n}, rng, str(temp + n), calls,
                     kind, day)
    if kind == "search":
        entity = rng.choice(sorted(ENTITIES))
        field = rng.choice(["founder", "year", "city"])
        # The split key is the entity alone: eval entities are never seen in training, under any question.
        return _Draw(f"entity:{entity}", f"search_{field}", lang, {"entity": entity}, rng,
                     str(ENTITIES[entity][field]), [("search", {"query": entity})], "search")
    if rng.random() < 0.5:
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        return _Draw(f"add:{a}+{b}:{lang}", "trivial_add", lang, {"a": a, "b": b}, rng, str(a + b), [], "trivial")
    word = rng.choice(WORDS)
    return _Draw(f"repeat:{word}:{lang}", "repeat", lang, {"word": word}, rng, word, [], "trivial")


def _recase(template: str) -> str:
    """The template's own words in upper case (English) — the parameters (cities, entities) stay as they are."""
    parts = []
    for literal, field, spec, conv in string.Formatter().parse(template):
        parts.append(literal.upper())
        if field is not None:
            parts.append("{" + field + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}")
    return "".join(parts)


def normalize_answer(text: str) -> str:
    t = " ".join(text.strip().split()).lower().rstrip(".。!！")
    return t.replace("°c", "").replace("℃", "").strip()


def answers_match(given: str, gold: str) -> bool:
    """Exact match after normalisation; numbers compare by value. Listing several candidates never matches."""
    g, want = normalize_answer(given), normalize_answer(gold)
    if g == want:
        return True
    try:
        return abs(float(g) - float(want)) < 1e-9
    except ValueError:
        return False


class ToolUseEnv(ToolEnv):
    """Choose the right tool, skip needless calls, retry transient faults, answer and stop."""

    name: ClassVar[str] = "tool_use"
    mistakes: ClassVar[tuple[str, ...]] = ("wrong_tool", "unneeded_call", "no_retry", "no_answer", "extra_call",
                                           "guess")
    # The seed's typical mistakes. Rates are per episode, for the noisy teacher whose demonstrations SFT learns from.
    default_noise: ClassVar[dict[str, float]] = {"wrong_tool": 0.1, "unneeded_call": 0.3, "no_retry": 0.5,
                                                 "no_answer": 0.08, "extra_call": 0.15, "guess": 0.12}

    reference_solutions: ClassVar[bool] = True
    supports_faults: ClassVar[bool] = True

    def __init__(self, fault_rate: float = 0.15, max_turns: int = 6, kinds: list[str] | None = None):
        """`kinds` restricts the task mix (for curricula and focused runs); None means all of KIND_WEIGHTS."""
        unknown = set(kinds or []) - set(KIND_WEIGHTS)
        if unknown or kinds == []:
            raise ValueError(f"unknown task kinds {sorted(unknown)}; valid: {', '.join(KIND_WEIGHTS)}")
        self.kinds = list(kinds) if kinds else list(KIND_WEIGHTS)
        if not 0.0 <= fault_rate <= 1.0:
            raise ValueError(f"fault_rate must be in [0, 1], got {fault_rate}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be ≥ 1, got {max_turns}")
        self.fault_rate, self.max_turns = fault_rate, max_turns
        self._day = 0  # the world's current day: the task's, set by start()
        self.tools = Toolbox([calculator, weather_tool(lambda: self._day), search])
        self.system_prompt = SYSTEM_PROMPT + self.tools.schemas_text()

    # -- tasks --

    def tasks(self, split: Split, n: int, seed: int = 0) -> list[Task]:
        return draw_tasks("tool_use", split, n, seed, self._draw)

    def task_stream(self, split: Split, seed: int = 0) -> Iterator[Task]:
        return stream_tasks("tool_use", split, seed, self._draw)

    def _draw(self, rng: random.Random) -> Draft:
        kinds = [k for k, w in KIND_WEIGHTS.items() if k in self.kinds for _ in range(w)]
        return _make(rng.choice(kinds), rng).draft()

    def _perturbed(self, task: Task, how: str) -> Task | None:
        """The same question in another form: a phrasing never trained on, the template's words upper-cased, extra
        whitespace, or the other language's template (the parameters — city, entity, numbers — are kept)."""
        template, lang, params = task.get("template"), task.get("lang"), dict(task.get("params", ()))
        if template is None:
            return None
        if how == "rephrase":
            prompt = REPHRASE[template][lang][0].format(**params)
        elif how == "casing":
            if lang == "zh":
                return None  # Chinese has no case
            prompt = _recase(TEMPLATES[template][lang][0]).format(**params)
        elif how == "language":
            prompt = TEMPLATES[template]["zh" if lang == "en" else "en"][0].format(**params)
        else:
            return super()._perturbed(task, how)
        return replace(task, prompt=prompt)

    # -- the episode --

    def start(self, task: Task) -> None:
        self._day = int(task.get("day", 0))  # the world's current day: the task's

    def score(self, task: Task, answer: str) -> Score:
        return Score(float(answers_match(answer, task.answer)), answers_match(answer, task.answer), not answer,
                     {"answer": answer})

    def turn_reward(self, task: Task, turn: TurnRecord) -> float:
        """INVALID_COST for a turn that does not parse; CALL_COST for a call that ran beyond the reference's count."""
        if turn.parsed == "ParseError":
            return -INVALID_COST
        if not turn.fault and self._calls > len(task.reference):
            return -CALL_COST
        return 0.0

    # -- the teacher --

    def teacher_turn(self, task: Task, messages: list[Message], noise: dict[str, bool] | None = None) -> str:
        """Follow the reference solution, retry on faults, then give the gold answer.

        With `noise`, make the planned mistakes: call a wrong tool first, make an unneeded call, give up after a
        fault, stop without an answer, call again after the answer is known, or guess instead of calling.
        """
        noise = noise or {}
        ref = task.reference_calls
        done = [m for m in messages if m["role"] == "tool"]
        last = done[-1]["content"] if done else None
        n_assist = sum(m["role"] == "assistant" for m in messages)
        if last == FAULT_TEXT:
            if noise.get("no_retry"):
                return _wrong_answer(task)
            return message_text(next(m for m in reversed(messages) if m["role"] == "assistant"))
        if n_assist == 0:
            if noise.get("no_answer"):
                return ""
            if ref and noise.get("guess"):
                return _wrong_answer(task)
            if ref and noise.get("wrong_tool"):
                return format_tool_call(*_wrong_call(task))
            if not ref and noise.get("unneeded_call"):
                return format_tool_call("calculator", {"expression": _needless_expression(task)})
        progress = len(reference_turns(ref, messages))
        if progress < len(ref):
            return format_tool_call(*ref[progress])
        if ref and noise.get("extra_call") and sum(m["role"] == "tool" for m in messages) == len(ref) + sum(
                m["content"] == FAULT_TEXT for m in done):
            return format_tool_call(*ref[-1])
        return task.answer


def _needless_expression(task: Task) -> str:
    """What an agent that reaches for the calculator on a trivial task passes it: the question's own sum ("7 + 5"),
    as a model that does not trust its head would — not the answer it already knows, which would teach a learner to
    do the sum in its head and then call the calculator anyway."""
    params = dict(task.get("params", ()))
    if task.get("template") == "trivial_add":
        return f"{params['a']} + {params['b']}"
    return "1 + 1"


def _wrong_call(task: Task) -> tuple[str, dict[str, Any]]:
    name, args = task.reference_calls[0]
    if name == "search":
        return "get_weather", {"city": args["query"]}
    if name == "get_weather":
        return "search", {"query": args["city"]}
    return "search", {"query": args["expression"]}


def _wrong_answer(task: Task) -> str:
    """A plausible wrong guess, deterministic per task: the noisy teacher 'does it in its head'."""
    try:
        return str(int(float(task.answer)) + 1 + stable_hash("guess", task.id) % 9)
    except ValueError:
        return "I don't know"
