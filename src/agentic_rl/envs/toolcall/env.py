"""`toolcall`: use tools the model has never seen — each task brings its own tool set, read from the schemas.

Every task draws a family of functions — a lookup from a name to an id, and an action on that id with typed
parameters (string, integer, number, boolean, enum, array, nested object; required and optional) — half the time
one of the 13 hand-written families (`families.py`), half the time one of 160 generated ones (`generated.py`: every
object × verb, parameters drawn from a pool), and shows its functions beside distractors from other families. The request, in English or Chinese, needs:
  single      one action call, its id given                      parallel   two action calls in one turn
  chained     the lookup, then the action on the id it returned  lookup     the lookup, then the id as the answer
  no_tool     a family whose functions are not offered: no call, say so
  related     its lookup and its object's other actions are offered, not the one asked for: no call, say so
  missing     a value the action requires is not in the request: no call, ask for it
  in_prompt   the id is already in the question: no call, answer it
Reward (per turn; they sum to the episode's):
    r = 1[the calls that ran == reference calls (name and arguments, an optional argument equal to its default
          counts as left out; numbers as numbers, arrays as sets) and the answer holds what it must: the one id asked
          for (not a copy of the request); where no tool fits, an honest abstention (answers.py: it declines, claims
          nothing done); else any text]
        − CALL_COST × (calls beyond the reference's count) − INVALID_COST × (turns that fail to parse or validate)
A call the tool refuses (an unknown name or id) did nothing: it is not among the calls that ran, so correcting it
scores 1 − CALL_COST, between giving up (0) and the clean exact calls (1). Ids are drawn per task, from disjoint
ranges per split, so no id can be memorised across tasks.
Held out for evaluation (`HELD_OUT`): three hand-written families and every generated family of four objects (40);
the eval split asks for schemas never trained on, and training tasks never show them, not even as distractors. A reference call's arguments are JSON values as a call
carries them (arrays, objects), so these tasks compare but do not hash.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, ClassVar

from ...runtime.parsing import format_tool_calls, message_calls
from ...runtime.tools import TOOLS_INSTRUCTION, Tool, Toolbox, ToolError, to_json
from ..base import FAULT_TEXT, Draft, Message, Split, Task, TurnRecord, draw_tasks, split_of, stable_hash, stream_tasks
from ..tool_env import Score, ToolEnv
from .answers import abstains, states_id
from .credit import REWARDS, exact_calls
from .families import FAMILIES as HAND_WRITTEN
from .families import HELD_OUT as HAND_HELD_OUT
from .families import Family, Param
from .generated import GENERATED, GENERATED_HELD_OUT, request_without

# Every family a task may draw: the hand-written ones and the generated ones (generated.py), half of the tasks each.
CATALOG = HAND_WRITTEN + GENERATED
BY_ID = {f.id: f for f in CATALOG}
HELD_OUT = HAND_HELD_OUT | GENERATED_HELD_OUT
GENERATED_SHARE = 0.5

CALL_COST = 0.1
INVALID_COST = 0.2
KIND_WEIGHTS = {"single": 3, "parallel": 2, "chained": 2, "lookup": 1, "no_tool": 2, "related": 1, "missing": 1,
                "in_prompt": 1}
ABSTAIN = ("no_tool", "related", "missing")  # kinds where no call is right and the answer must abstain
SYSTEM_PROMPT = TOOLS_INSTRUCTION  # the instruction every tool-using prompt starts with (runtime/tools.py)
DONE = ("Done.", "已完成。")
NO_TOOL = ("None of the available tools can do that.", "现有的工具都做不到这件事。")
ASK = ("What {what} should I use? The request does not say.", "请问{what}是什么？请求里没有说明。")
TWO_THINGS = ("Please do two things: (1) {a} (2) {b}", "请帮我做两件事：(1) {a} (2) {b}")
KNOWN = ("I already know that the id of {what} is {id}. ", "我已经知道{what}的编号是{id}。")


# Ids are drawn per task (a salt in the task's spec), so no id can be memorised from one task for another, and from
# disjoint ranges per split, so no id of an evaluation task ever appears in a training task.
ID_RANGES: dict[str, tuple[int, int]] = {"train": (1000, 5500), "eval": (5500, 10000)}


def make_id(family: Family, key: str, salt: int = 0, split: Split = "train") -> str:
    """The id the lookup returns for `key` in a task with `salt`: deterministic, so a chained call's argument is
    checkable, and drawn anew for every task from its split's range."""
    low, high = ID_RANGES[split]
    return f"{family.prefix}-{low + stable_hash('id', family.id, key, salt) % (high - low)}"


def id_param(family: Family) -> str:
    return f"{family.noun[0].replace(' ', '_')}_id"


class ToolCallEnv(ToolEnv):
    """Read each task's tool schemas, call what fits with the right arguments, and abstain when nothing does."""

    name: ClassVar[str] = "toolcall"
    max_calls: ClassVar[int] = 4
    supports_faults: ClassVar[bool] = True
    reference_solutions: ClassVar[bool] = True
    mistakes: ClassVar[tuple[str, ...]] = ("wrong_value", "drop_optional", "extra_call", "call_anyway", "no_answer")
    default_noise: ClassVar[dict[str, float]] = {"wrong_value": 0.1, "drop_optional": 0.1, "extra_call": 0.1,
                                                 "call_anyway": 0.3, "no_answer": 0.03}
    max_new_tokens: ClassVar[int] = 160
    # The pretrained ladder's turn budget must hold the longest teacher turn (parallel calls with arrays and nested
    # objects); a prompt differs per task (its own schemas), so SFT steps are costly: 100 evaluation tasks. SFT keeps
    # only the demonstrations that succeed (the noisy teacher's wrong values and needless calls are not imitated),
    # GRPO holds to the SFT model (β) and leaves turns cut by the token limit out of the loss
    # (docs/design-notes.md#toolcall-budget).
    pretrained_run_defaults: ClassVar[dict[str, Any]] = {
        "eval_tasks": 100, "robustness_tasks": 5,
        "sft": {"demos": 1024, "only_successful": True, "max_steps": 48, "max_new_tokens": 176},
        "grpo": {"max_new_tokens": 176, "beta": 0.04, "mask_truncated": True, "shared_prompt": "group"}}

    def __init__(self, max_turns: int = 5, fault_rate: float = 0.0, distractors: int = 3,
                 kinds: list[str] | None = None, reward: str = "exact"):
        if reward not in REWARDS:
            raise ValueError(f"unknown toolcall reward {reward!r}; valid: {', '.join(REWARDS)} (exact: all or nothing; "
                             "per_call: credit for each call's name and arguments, credit.py)")
        self.reward = reward
        unknown = set(kinds or []) - set(KIND_WEIGHTS)
        if unknown or kinds == []:
            raise ValueError(f"unknown task kinds {sorted(unknown)}; valid: {', '.join(KIND_WEIGHTS)}")
        if max_turns < 2 or not 0.0 <= fault_rate <= 1.0 or not 0 <= distractors <= 6:
            raise ValueError(f"max_turns must be ≥ 2, fault_rate in [0, 1] and distractors in 0..6; got {max_turns}, "
                             f"{fault_rate}, {distractors}")
        self.max_turns, self.fault_rate, self.distractors = max_turns, fault_rate, distractors
        self.kinds = list(kinds) if kinds else list(KIND_WEIGHTS)
        self.tools = Toolbox([])
        self.system_prompt = SYSTEM_PROMPT

    # -- tasks --

    def tasks(self, split: Split, n: int, seed: int = 0) -> list[Task]:
        return draw_tasks("toolcall", split, n, seed, self._draw)

    def task_stream(self, split: Split, seed: int = 0) -> Iterator[Task]:
        return stream_tasks("toolcall", split, seed, self._draw)

    def _draw(self, rng: random.Random) -> Draft:
        kind = rng.choice([k for k in self.kinds for _ in range(KIND_WEIGHTS[k])])
        family = rng.choice(GENERATED if rng.random() < GENERATED_SHARE or kind == "missing" else HAND_WRITTEN)
        lang = rng.choice([0, 0, 1])
        keys = rng.sample(family.key.values, 2)
        spec = {"kind": kind, "family": family.id, "lang": lang, "keys": keys,
                "values": [_draw_values(family, rng), _draw_values(family, rng)]}
        if kind == "missing":
            spec["missing"] = next(p.name for p in family.params if p.required)
        # what the agent is asked, ids aside, decides the split: the same request never lands in both; the ids are
        # then drawn for this task alone, from the split's range
        split: Split = "eval" if family.id in HELD_OUT else split_of(f"toolcall:{json.dumps(spec, sort_keys=True)}")
        spec.update(salt=rng.randrange(2**31), split=split)
        prompt, reference, answer = _render(spec)
        offered = [] if kind == "no_tool" else [(family.id, "lookup"), (family.id, "action")]
        if kind == "related":  # same domain, other capability: its lookup, and its object's other verbs
            siblings = [f.id for f in CATALOG if f.id != family.id and "object" in f.extra
                        and f.extra["object"] == family.extra.get("object")]
            offered = [(family.id, "lookup")] + [(fid, "action") for fid in rng.sample(siblings, min(2, len(siblings)))]
        offered += _distractors(family, split, self.distractors + (2 - len(offered) if kind == "related" else 0), rng)
        rng.shuffle(offered)
        spec["tools"] = offered
        kind_label = f"{kind}:{'new' if family.id in HELD_OUT else 'seen'}"
        return Draft(prompt, prompt, kind_label, prompt, answer, reference, (("spec", json.dumps(spec)),), split)

    def _perturbed(self, task: Task, how: str) -> Task | None:
        """The same request in the other language, or with a polite prefix; upper case would change the values."""
        spec = json.loads(task.get("spec"))
        if how == "language":
            return replace(task, prompt=_render({**spec, "lang": 1 - spec["lang"]})[0])
        if how == "rephrase":
            return replace(task, prompt=("Could you help me with this? ", "请帮我处理一下：")[spec["lang"]] + task.prompt)
        return super()._perturbed(task, how) if how == "whitespace" else None

    # -- the episode --

    def start(self, task: Task) -> None:
        spec = json.loads(task.get("spec"))
        self._made: list[tuple[str, str]] = []
        self._charged = 0
        self._salt, self._split = spec.get("salt", 0), spec.get("split", "train")
        self.tools = Toolbox([self._tool(BY_ID[fid], which) for fid, which in spec["tools"]])
        self.system_prompt = SYSTEM_PROMPT + self.tools.schemas_text()

    def _tool(self, family: Family, which: str) -> Tool:
        """A function of `family` as a tool: its schema, and a body that answers any well-typed call.

        A call that ran is an effect and is recorded; one the tool refuses (an unknown name or id) did nothing, so it
        is not recorded — it costs a call (`turn_reward`), and the agent may correct it."""
        def run(**args: Any) -> str:
            if which == "lookup":
                key = args[family.key.name]
                if key not in family.key.values:
                    raise ToolError(f"no {family.noun[0]} named {key!r}")
                self._made.append(_canonical(family, which, args))
                return to_json({id_param(family): make_id(family, key, self._salt, self._split)})
            known = {make_id(family, k, self._salt, self._split) for k in family.key.values}
            if args[id_param(family)] not in known:
                raise ToolError(f"no {family.noun[0]} with id {args[id_param(family)]!r}; "
                                f"{family.lookup[0]} gives the id")
            self._made.append(_canonical(family, which, args))
            return to_json({"ok": True, id_param(family): args[id_param(family)]})

        return Tool(run, schema(family, which))

    def score(self, task: Task, answer: str) -> Score:
        spec = json.loads(task.get("spec"))
        family = BY_ID[spec["family"]]
        gold = [_canonical(family, "lookup" if n == family.lookup[0] else "action", dict(a)) for n, a in task.reference]
        attempted = self._calls + self._invalid + self._faults  # refused, unparsed and faulted calls too
        calls_ok = exact_calls(self._made, gold, True, attempted) == 1.0
        # an id asked for must be the one id the answer names: listing every id the prefix allows is not an answer;
        # where no tool fits, the answer must say so, not claim the request was done
        if task.answer:
            answer_ok = states_id(answer, task.answer, task.prompt)
        elif spec["kind"] in ABSTAIN:  # say it cannot be done, or (a value missing) ask for it
            answer_ok = abstains(answer, may_ask=spec["kind"] == "missing", request=task.prompt)
        else:
            answer_ok = bool(answer.strip())
        ok = calls_ok and answer_ok  # success is the exact calls whatever the reward
        reward = REWARDS[self.reward](self._made, gold, answer_ok, attempted, bool(task.answer))
        return Score(reward, ok, not answer.strip(), {"calls_match": calls_ok, "answer_ok": answer_ok})

    def turn_reward(self, task: Task, turn: TurnRecord) -> float:
        """INVALID_COST for a turn that does not parse or validate; CALL_COST for each call beyond the reference's
        count."""
        if turn.parsed == "ParseError":
            return -INVALID_COST
        over = max(0, self._calls - len(task.reference)) - self._charged
        self._charged += over
        return -CALL_COST * over

    # -- the teacher --

    def teacher_turn(self, task: Task, messages: list[Message], noise: dict[str, bool] | None = None) -> str:
        """Make the reference calls (independent ones in one turn, a chained one after the id comes back), retry
        what met a fault, then answer. With `noise`: a wrong value, a dropped optional argument, a needless call
        first, a call where none is needed, no answer."""
        noise = noise or {}
        spec = json.loads(task.get("spec"))
        turns = [m for m in messages if m["role"] == "assistant"]
        if turns and messages[-1]["role"] == "tool":
            faulted = _faulted_calls(messages)
            if faulted:
                return format_tool_calls(faulted)
        ref = task.reference_calls
        if not turns:
            if noise.get("no_answer"):
                return ""
            offered = [t for t in spec["tools"] if t[0] != spec["family"]]
            if ((noise.get("call_anyway") and not ref) or (noise.get("extra_call") and ref)) and offered:
                fid, which = offered[0]
                return format_tool_calls([_plausible_call(BY_ID[fid], which, spec.get("salt", 0),
                                                          spec.get("split", "train"))])
        left = ref[len(_answered_calls(messages, {name for name, _ in ref})):]
        if left:
            if spec["kind"] == "parallel":
                return format_tool_calls([_noisy(c, BY_ID[spec["family"]], noise) for c in left])
            return format_tool_calls([_noisy(left[0], BY_ID[spec["family"]], noise)])
        if spec["kind"] == "missing":
            return ASK[spec["lang"]].format(what=spec["missing"].replace("_", " "))
        return task.answer or (NO_TOOL if spec["kind"] in ABSTAIN else DONE)[spec["lang"]]

    def probe_hacks(self, tasks: list[Task]) -> list[dict[str, object]]:
        from .exploits import probe_hacks

        return probe_hacks(self, tasks)


# -- schemas, values and requests --------------------------------------------------------------------------------------

def schema(family: Family, which: str) -> dict[str, Any]:
    """The OpenAI function schema of the family's lookup or action."""
    if which == "lookup":
        name, description = family.lookup
        params: tuple[Param, ...] = (family.key,)
    else:
        name, description = family.action
        params = (Param(id_param(family), "string", f"The {family.noun[0]} id, as {family.lookup[0]} returns it."),
                  *family.params)
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {p.name: _property(p) for p in params},
        "required": [p.name for p in params if p.required]}}}


def _property(p: Param) -> dict[str, Any]:
    kind = {"enum": "string", "array": "array", "object": "object"}.get(p.kind, p.kind)
    out: dict[str, Any] = {"type": kind, "description": p.description}
    if p.kind == "enum":
        out["enum"] = list(p.values)
    if p.kind == "array":
        out["items"] = {"type": "string"}
    if p.kind == "object":
        out.update(properties={f.name: _property(f) for f in p.fields}, required=[f.name for f in p.fields],
                   additionalProperties=False)
    if not p.required and p.default is not None:
        out["default"] = p.default
    return out


def _draw_value(p: Param, rng: random.Random) -> Any:
    if p.kind == "integer":
        return rng.randint(*p.values)
    if p.kind == "number":
        return rng.randint(p.values[0] * 2, p.values[1] * 2) / 2  # 12.5 or 20.0
    if p.kind == "array":
        return sorted(rng.sample(p.values, rng.randint(2, 3)))
    if p.kind == "object":
        return {f.name: _draw_value(f, rng) for f in p.fields}
    return rng.choice(p.values)


def _draw_values(family: Family, rng: random.Random) -> dict[str, Any]:
    """Every required parameter, and each optional one half the time."""
    return {p.name: _draw_value(p, rng) for p in family.params if p.required or rng.random() < 0.5}


def _text(value: Any, lang: int) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return (", ".join(value[:-1]) + " and " + value[-1]) if lang == 0 else "、".join(value[:-1]) + "和" + value[-1]
    return str(value)


def _action_text(family: Family, values: dict[str, Any], ref: str, lang: int,
                 template: tuple[str, str] | None = None) -> str:
    request = (template or family.request)[lang]
    text = re.sub(r"\[(\w+)\|([^\]]*)\]", lambda m: m.group(2) if m.group(1) in values else "", request)
    flat = {"REF": ref, **{k: _text(v, lang) for k, v in values.items() if not isinstance(v, dict)},
            **{f"{k}.{f}": _text(x, lang) for k, v in values.items() if isinstance(v, dict) for f, x in v.items()}}
    return re.sub(r"\{([\w.]+)\}", lambda m: flat[m.group(1)], text)


def _ref(family: Family, template: tuple[str, str], lang: int, **kw: str) -> str:
    return template[lang].format(noun=family.noun[lang], **kw)


def _render(spec: dict[str, Any]) -> tuple[str, tuple, str]:
    """(request, reference calls, gold answer) of a task spec, in the spec's language."""
    family, lang, kind = BY_ID[spec["family"]], spec["lang"], spec["kind"]
    key, values = spec["keys"][0], spec["values"][0]
    make = lambda k: make_id(family, k, spec.get("salt", 0), spec.get("split", "train"))
    ident = make(key)
    action = lambda k, v: (family.action[0], tuple(sorted({id_param(family): make(k), **v}.items())))
    lookup = (family.lookup[0], ((family.key.name, key),))
    if kind in ("single", "no_tool", "related"):
        prompt = _action_text(family, values, _ref(family, family.ref_id, lang, id=ident), lang)
        return prompt, ((action(key, values),) if kind == "single" else ()), ""
    if kind == "missing":  # the first required value left out of the request (and of the values)
        gone = spec["missing"]
        template = request_without(family, gone)
        rest = {k: v for k, v in values.items() if k != gone}
        return _action_text(family, rest, _ref(family, family.ref_id, lang, id=ident), lang, template), (), ""
    if kind == "parallel":
        k2, v2 = spec["keys"][1], spec["values"][1]
        a = _action_text(family, values, _ref(family, family.ref_id, lang, id=ident), lang)
        b = _action_text(family, v2, _ref(family, family.ref_id, lang, id=make(k2)), lang)
        return TWO_THINGS[lang].format(a=a, b=b), (action(key, values), action(k2, v2)), ""
    if kind == "chained":
        prompt = _action_text(family, values, _ref(family, family.ref_name, lang, key=key), lang)
        return prompt, (lookup, action(key, values)), ""
    question = _ref(family, family.ask_id, lang, key=key)
    if kind == "lookup":
        return question, (lookup,), ident
    what = _ref(family, family.ref_name, lang, key=key)
    return KNOWN[lang].format(what=what, id=ident) + question, (), ident  # in_prompt


def _distractors(family: Family, split: Split, n: int, rng: random.Random) -> list[tuple[str, str]]:
    """`n` functions of other families — none of the task family's object (its other verbs would fit the request
    or share its lookup), no name twice, none held out from a training task."""
    pool = [f for f in CATALOG if (split == "eval" or f.id not in HELD_OUT)]
    rng.shuffle(pool)
    mine = family.extra.get("object", family.id)
    names = {family.lookup[0], family.action[0]}
    out = []
    for f in pool:
        which = rng.choice(["lookup", "action"])
        name = (f.lookup if which == "lookup" else f.action)[0]
        if len(out) == n:
            break
        if f.extra.get("object", f.id) == mine or name in names:
            continue
        names.add(name)
        out.append((f.id, which))
    return out


def _canonical(family: Family, which: str, args: dict[str, Any]) -> tuple[str, str]:
    """A call as a comparable key: optional arguments equal to their default left out, numbers as numbers (5 and 5.0
    alike, integers of any size exact), arrays as sets."""
    name = family.lookup[0] if which == "lookup" else family.action[0]
    defaults = {p.name: p.default for p in family.params if not p.required and p.default is not None}
    out = {k: _number(v) for k, v in args.items() if not (k in defaults and v == defaults[k])}
    return name, json.dumps(out, sort_keys=True, ensure_ascii=False, default=repr)


def _number(value: Any) -> Any:
    """A JSON value in comparable form: an integral float as the integer, a list sorted, objects field by field."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):  # a set: order and repeats do not count
        items = {json.dumps(_number(v), sort_keys=True, default=repr): _number(v) for v in value}
        return [items[k] for k in sorted(items)]
    if isinstance(value, dict):
        return {k: _number(v) for k, v in value.items()}
    return value


def _answered_calls(messages: list[Message], names: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """The calls to `names` that ran (their tool message is not the transient fault), in order."""
    out = []
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            for j, call in enumerate(message_calls(m)):
                k = i + 1 + j
                if call[0] in names and k < len(messages) and messages[k]["content"] != FAULT_TEXT:
                    out.append(call)
    return out


def _faulted_calls(messages: list[Message]) -> list[tuple[str, dict[str, Any]]]:
    """The calls of the last assistant turn whose tool message was the transient fault (the ones to retry)."""
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    calls = message_calls(messages[last])
    return [c for j, c in enumerate(calls) if last + 1 + j < len(messages)
            and messages[last + 1 + j]["content"] == FAULT_TEXT]


def _noisy(call: tuple[str, dict[str, Any]], family: Family, noise: dict[str, bool]) -> tuple[str, dict[str, Any]]:
    """The call as the noisy teacher makes it: one value changed, or an optional argument left out."""
    name, args = call[0], dict(call[1])
    if name != family.action[0]:
        return name, args
    optional = [p.name for p in family.params if not p.required and p.name in args]
    if noise.get("drop_optional") and optional:
        args.pop(optional[0])
    elif noise.get("wrong_value"):
        p = next(p for p in family.params if p.required)
        rng = random.Random(stable_hash("wrong", name, json.dumps(args, sort_keys=True)))
        args[p.name] = next(v for v in (_draw_value(p, rng) for _ in range(50)) if v != args[p.name])
    return name, args


def _plausible_call(family: Family, which: str, salt: int = 0, split: Split = "train") -> tuple[str, dict[str, Any]]:
    """A call a careless agent makes with a tool the request does not need (with the ids of a task of `salt`)."""
    if which == "lookup":
        return family.lookup[0], {family.key.name: family.key.values[0]}
    return family.action[0], {id_param(family): make_id(family, family.key.values[0], salt, split),
                              **_draw_values(family, random.Random(0))}
