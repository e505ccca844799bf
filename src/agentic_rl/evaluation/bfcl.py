"""`agentic-rl eval --bench bfcl`: transfer to the Berkeley Function Calling Leaderboard, whose tools we never train on.

BFCL's own pieces come from the `bfcl-eval` package (extra `bfcl`), never a copy: its questions and ground truth
(`load_dataset_entry`, which also adds its language hint to each function doc), its function-doc → JSON-schema
conversion (`convert_to_tool`) and its AST checker (`ast_checker`). The prompt is ours: the model's chat template with
toolcall's system prompt and one tool schema per line, as a model trained here meets tools; BFCL runs each local model
with its own template the same way. One assistant turn per question, greedy unless a temperature is given (BFCL
samples at 0).

Each reply is scored as BFCL scores a model served behind an OpenAI-compatible endpoint (`agentic-rl serve`), by
its OpenAI function-calling handler (`HANDLER`): the functions go in as `convert_to_tool` makes them for OpenAI ("."
in a name becomes "_"), the server answers `tool_calls` when the turn is nothing but calls to offered functions
(`served_calls`, the gateway's rule) and text otherwise, the handler's own `decode_ast` reads that, and the checker
maps "_" back to "." (`underscore_to_dot`) — BFCL's eval runner's per-entry rules, which a test holds the result to
entry by entry: an AST category passes when the decoded calls pass `ast_checker`; irrelevance when nothing decodes as
a call (a malformed `<tool_call>` is text, so an abstention); live_relevance when something does. Beside it
(`bfcl_strict.<category>`) the strict view of our own runtime: a `<tool_call>` that does not parse is still an attempt
on irrelevance, and only the tools' own names count.

The result is an eval JSON (`families.SCHEMA`) whose metrics sit in the regression family, `bfcl.<category>`
accuracy with a bootstrap 95 % interval over questions: `eval --compare base.json trained.json` then flags a category
that training lost (the transfer check of a run). BFCL is for measuring only: no trainer can reach it (it is not an
env in the registry).
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from ..envs.base import Env, EpisodeRecord, Message, StepResult, Task, TurnRecord
from ..envs.toolcall.env import NO_TOOL
from ..policies.base import Policy
from ..runtime.parsing import FinalAnswer, ParseError, calls_of, format_tool_calls, parse_turn, served_calls
from ..runtime.rollout import run_episodes
from ..runtime.tools import tools_system_prompt
from .families import FAMILIES, SCHEMA, aggregate

# The categories whose questions are one user turn with Python-syntax functions, in BFCL's order.
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance", "live_simple",
              "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance", "live_relevance")
DEFAULT_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance", "live_simple",
                      "live_multiple", "live_irrelevance")
NO_CALL_CATEGORIES = ("irrelevance", "live_irrelevance")
MAX_NEW_TOKENS = 256  # BFCL's longest ground truth (four parallel calls) is ~150 SmolLM2 tokens
# The BFCL handler mirrored, and a model it runs whose config says names were shown with "_" for "." (the checker
# looks the model up only for that).
HANDLER = "OpenAI function calling (bfcl_eval OpenAICompletionsHandler) over agentic-rl serve"
CHECKER_MODEL = "gpt-4o-2024-11-20-FC"
MISSING = "the BFCL benchmark needs the bfcl extra: pip install -e '.[bfcl]' (bfcl-eval, the leaderboard's data and checker)"


def _bfcl() -> Any:
    """The bfcl-eval modules we use, imported on first use (a heavy, optional dependency)."""
    try:
        from bfcl_eval import utils
        from bfcl_eval.constants.enums import Language, ModelStyle
        from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
        from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
        from bfcl_eval.model_handler.api_inference.openai_completion import OpenAICompletionsHandler
        from bfcl_eval.model_handler.utils import convert_to_tool
    except ImportError as e:
        raise ValueError(f"{MISSING} ({e})") from None
    # The handler's decode_ast reads only `is_fc_model`; its __init__ would open an API client this never uses.
    handler = OpenAICompletionsHandler.__new__(OpenAICompletionsHandler)
    handler.is_fc_model = True
    return type("bfcl", (), {"utils": utils, "Language": Language, "ModelStyle": ModelStyle,
                             "GORILLA_TO_OPENAPI": GORILLA_TO_OPENAPI, "ast_checker": staticmethod(ast_checker),
                             "convert_to_tool": staticmethod(convert_to_tool), "handler": handler})


def check_categories(categories: Sequence[str]) -> list[str]:
    """The categories asked for, checked; ValueError naming the unknown ones and the valid ones."""
    unknown = [c for c in categories if c not in CATEGORIES]
    if unknown or not categories:
        raise ValueError(f"unknown BFCL categor{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown) or '(none)'}; "
                         f"valid: {', '.join(CATEGORIES)}")
    return list(dict.fromkeys(categories))


def load_questions(categories: Sequence[str], n: int | None = None, seed: int = 0) -> tuple[list[Task], dict]:
    """Up to `n` questions of each category (a seeded sample; all with n=None) as tasks, and BFCL's entry and
    ground truth by task id."""
    bfcl = _bfcl()
    tasks, entries = [], {}
    for cat in check_categories(categories):
        questions = bfcl.utils.load_dataset_entry(cat)
        truth = {} if cat in NO_CALL_CATEGORIES or cat == "live_relevance" else {
            t["id"]: t["ground_truth"] for t in bfcl.utils.load_ground_truth_entry(cat)}
        if n is not None and n < len(questions):
            questions = random.Random(f"bfcl:{cat}:{seed}").sample(questions, n)
        for q in questions:
            if len(q["question"]) != 1:
                raise ValueError(f"BFCL question {q['id']} has {len(q['question'])} turns; only single-turn "
                                 f"categories are supported: {', '.join(CATEGORIES)}")
            user = [m["content"] for m in q["question"][0] if m["role"] == "user"]
            tasks.append(Task(id=q["id"], split="eval", kind=cat, prompt=user[-1] if user else "", answer=""))
            entries[q["id"]] = {"entry": q, "truth": truth.get(q["id"]), "category": cat}
    return tasks, entries


def prompt_messages(entry: dict[str, Any]) -> list[Message]:
    """A question's opening messages: its own system text (if any) before toolcall's system prompt and BFCL's
    functions as the OpenAI handler sends them (`offered_functions`), one per line; then its conversation."""
    functions = offered_functions(entry)
    turn = entry["question"][0]
    own = "\n\n".join(m["content"] for m in turn if m["role"] == "system")
    system = tools_system_prompt(own or None, [{"type": "function", "function": f} for f in functions])
    return [{"role": "system", "content": system}, *({"role": m["role"], "content": m["content"]}
                                                      for m in turn if m["role"] != "system")]


def offered_functions(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """A question's functions as the OpenAI handler sends them (`convert_to_tool`: JSON schema types, "." → "_")."""
    bfcl = _bfcl()
    tools = bfcl.convert_to_tool(copy.deepcopy(entry["function"]), bfcl.GORILLA_TO_OPENAPI,
                                 bfcl.ModelStyle.OPENAI_COMPLETIONS)
    return [t.get("function", t) for t in tools]  # the function inside {"type": "function", …}


def served(text: str, entry: dict[str, Any]) -> list[dict[str, str]] | str:
    """What BFCL's OpenAI handler gets back from `agentic-rl serve` for this reply (`model_responses`): each call as
    {name: arguments JSON} when the turn is nothing but calls to the offered functions, else the text."""
    calls = served_calls(text, {f["name"] for f in offered_functions(entry)}, max_calls=1 << 16)
    return [{name: json.dumps(args)} for name, args in calls] if calls else text


def verdict(text: str, entry: dict[str, Any], truth: Any, category: str) -> tuple[bool, str | None]:
    """(passed, why not) as BFCL scores the reply through its OpenAI handler: the eval runner's per-entry rules."""
    bfcl = _bfcl()
    response = served(text, entry)
    try:
        decoded = bfcl.handler.decode_ast(response, bfcl.Language.PYTHON, False)
    except Exception as e:  # nothing decodes: an abstention to the relevance rules, a miss to the AST ones
        decoded, error = None, f"no decodable call: {type(e).__name__}"
    else:
        error = None
    if category in NO_CALL_CATEGORIES or category == "live_relevance":
        called = decoded is not None and not bfcl.utils.is_empty_output(decoded)
        ok = not called if category in NO_CALL_CATEGORIES else called
        return ok, None if ok else ("decoded a call" if called else error or "no call")
    if decoded is None:
        return False, error
    if not bfcl.utils.is_function_calling_format_output(decoded):
        return False, "not in function-calling format"
    try:
        result = bfcl.ast_checker(entry["function"], decoded, truth, bfcl.Language.PYTHON, category, CHECKER_MODEL)
    except Exception as e:  # the checker meets a value shape it does not expect: a wrong answer, not a crash
        return False, f"checker: {type(e).__name__}: {e}"
    return bool(result["valid"]), None if result["valid"] else "; ".join(map(str, result.get("error", [])))


def score(text: str, entry: dict[str, Any], truth: Any, category: str) -> tuple[bool, str | None, int, bool]:
    """The strict view: (passed, why not, calls decoded, parse failed) for one reply, read as our runtime reads a
    turn — a `<tool_call>` that does not parse is an attempt on irrelevance, and a miss elsewhere."""
    parsed = parse_turn(text, None, max_calls=1 << 16)
    calls = calls_of(parsed)
    failed = isinstance(parsed, ParseError)
    if category in NO_CALL_CATEGORIES:
        return isinstance(parsed, FinalAnswer), None if isinstance(parsed, FinalAnswer) else "called a tool", \
            len(calls), failed
    if failed:
        return False, f"unparsable call: {parsed.kind}", 0, True  # type: ignore[union-attr]
    if category == "live_relevance":
        return bool(calls), None if calls else "no call", len(calls), False
    if not calls:
        return False, "no call", 0, False
    bfcl = _bfcl()
    names = {f["name"] for f in offered_functions(entry)}
    if any(name not in names for name, _ in calls):
        return False, "a call to a function not offered", len(calls), False
    decoded = [{name: args} for name, args in calls]
    try:
        result = bfcl.ast_checker(entry["function"], decoded, truth, bfcl.Language.PYTHON, category, CHECKER_MODEL)
    except Exception as e:  # the checker meets a value shape it does not expect: a wrong answer, not a crash
        return False, f"checker: {type(e).__name__}: {e}", len(calls), False
    return bool(result["valid"]), None if result["valid"] else "; ".join(map(str, result.get("error", []))), \
        len(calls), False


class Questions(Env):
    """BFCL questions as one-turn episodes for the agent loop (batched sampling, trajectories kept). Not registered
    as an env: nothing trains on it."""

    name: ClassVar[str] = "bfcl"
    max_calls: ClassVar[int] = 1 << 16
    max_new_tokens: ClassVar[int] = MAX_NEW_TOKENS

    def __init__(self, entries: dict[str, dict[str, Any]]):
        self.entries, self.max_turns, self.tools, self._task = entries, 1, None, None  # type: ignore[assignment]

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        raise ValueError("BFCL questions come from load_questions")

    def reset(self, task: Task) -> list[Message]:
        self._task = task
        return prompt_messages(self.entries[task.id]["entry"])

    def step(self, action: str) -> StepResult:
        q = self.entries[self._task.id]  # type: ignore[union-attr]
        ok, why = verdict(action, q["entry"], q["truth"], q["category"])
        strict, strict_why, calls, failed = score(action, q["entry"], q["truth"], q["category"])
        parsed = parse_turn(action, None, max_calls=self.max_calls)
        kind = "ToolCall" if calls else type(parsed).__name__  # as ToolEnv records parallel calls
        turn = TurnRecord(parsed=kind, parse_error=parsed.kind if isinstance(parsed, ParseError) else None, calls=calls)
        episode = EpisodeRecord(success=ok, episode_reward=float(ok), turns=1, tool_calls=calls, invalid=int(failed))
        return StepResult([], float(ok), True, False, turn, episode, {"bfcl_error": why, "strict": strict,
                                                                    "strict_error": strict_why})

    def teacher_turn(self, task: Task, messages: list[Message], noise: dict[str, bool] | None = None) -> str:
        """BFCL's ground truth as calls to the functions as shown (each parameter's first accepted value; optional
        ones left out where leaving them out is accepted); no call where none is expected. The plumbing's check: it
        scores 1."""
        q = self.entries[task.id]
        if q["truth"] is None:
            return NO_TOOL[0]
        required = {f["name"]: set(f["parameters"].get("required", [])) for f in q["entry"]["function"]}
        shown = {f["name"]: s["name"] for f, s in zip(q["entry"]["function"], offered_functions(q["entry"]))}
        return format_tool_calls([(shown.get(name, name), _first_choice(params, required.get(name, set())))
                                  for call in q["truth"] for name, params in call.items()])


def _first_choice(params: dict[str, Any], required: set[str] = frozenset()) -> dict[str, Any]:  # type: ignore[assignment]
    """Ground-truth parameters (each a list of accepted values, "" meaning it may be left out; a dict's entries
    alike) → one call's arguments: the first accepted value of each, a parameter the schema requires included."""
    out = {}
    for p, values in params.items():
        given = [v for v in values if v != ""] if isinstance(values, list) else [values]
        if not given or (isinstance(values, list) and "" in values and p not in required):
            continue
        v = given[0]
        out[p] = _first_choice(v) if isinstance(v, dict) else (
            [_first_choice(x) if isinstance(x, dict) else x for x in v] if isinstance(v, list) else v)
    return out


def evaluate_bfcl(policy: Policy, categories: Sequence[str] = DEFAULT_CATEGORIES, n: int | None = None,
                  seed: int = 0, batch: int = 32,
                  progress: Callable[[str], None] | None = None) -> tuple[dict[str, Any], list]:
    """Per-category accuracy of `policy` on BFCL (the module docstring's rules) as an eval JSON, and the
    trajectories. `batch`: questions sampled together (a live_multiple prompt runs to ~2,500 tokens)."""
    import importlib.metadata

    say = progress or (lambda _msg: None)
    tasks, entries = load_questions(categories, n, seed)
    t0 = time.monotonic()
    say(f"{len(tasks)} BFCL questions")
    # a batch of questions of like length at a time: the sampler's one KV cache holds each row at the batch's longest
    by_length = sorted(tasks, key=lambda t: len(json.dumps(entries[t.id]["entry"])))
    trajs = []
    for start in range(0, len(by_length), batch):
        trajs += run_episodes(lambda: Questions(entries), by_length[start:start + batch], policy, seed=seed)
        say(f"BFCL: {len(trajs)}/{len(tasks)} questions")
    wall = time.monotonic() - t0
    index = {t.id: i for i, t in enumerate(tasks)}
    rows = [(index[t.task_id], {f"bfcl.{t.task_kind}": (float(t.success), 1.0),
                                f"bfcl_strict.{t.task_kind}": (float(bool(t.info.get("strict"))), 1.0)}) for t in trajs]
    by_kind = {cat: {f: {} for f in FAMILIES} | {"regression": aggregate([r for r in rows if tasks[r[0]].kind == cat],
                                                                         seed)}
               for cat in dict.fromkeys(t.kind for t in tasks)}
    overall: dict[str, dict[str, Any]] = {f: {} for f in FAMILIES}
    for kind in by_kind.values():
        for name, metric in kind["regression"].items():
            overall["regression"][name] = kind["regression"][name] = {**metric, "better": "higher"}
    result = {"schema": SCHEMA, "env": "bfcl", "bench": "bfcl", "bfcl_handler": HANDLER,
              "bfcl_eval_version": importlib.metadata.version("bfcl-eval"), "policy": getattr(policy, "name", None),
              "split": "eval", "tasks": len(tasks), "k": 1, "seed": seed,
              "temperature": getattr(getattr(policy, "sampling", None), "temperature", None),
              "robustness_tasks": 0, "wall_seconds": round(wall, 2), "families": list(FAMILIES),
              "overall": overall, "by_kind": by_kind, "regression": {"baseline": None, "worse": []},
              "questions": question_rows(trajs, entries)}  # written apart, as a JSONL beside the JSON
    return result, trajs


def question_rows(trajs: list, entries: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each question's reply and verdicts, as BFCL's score files keep them: one JSON object per line."""
    rows = []
    for t in trajs:
        reply = next((m["content"] for m in reversed(t.messages) if m["role"] == "assistant"), "")
        reply = reply or format_tool_calls([(c["function"]["name"], json.loads(c["function"]["arguments"])
                                             if isinstance(c["function"]["arguments"], str) else c["function"]["arguments"])
                                            for m in t.messages if m["role"] == "assistant"
                                            for c in m.get("tool_calls") or []])
        q = entries[t.task_id]
        rows.append({"id": t.task_id, "category": t.task_kind, "handler": HANDLER, "reply": reply,
                     "model_responses": served(reply, q["entry"]), "valid": bool(t.success),
                     "error": t.info.get("bfcl_error"), "strict_valid": bool(t.info.get("strict")),
                     "strict_error": t.info.get("strict_error")})
    return rows


def bfcl_table(result: dict[str, Any]) -> Any:
    """Per-category accuracy as a rich table."""
    from rich.table import Table

    table = Table(title=f"BFCL (bfcl-eval {result.get('bfcl_eval_version')}, {result.get('bfcl_handler')}): "
                        f"{result['policy']}, {result['tasks']} questions")
    for col in ("category", "accuracy", "95% interval", "strict view", "n"):
        table.add_column(col)
    metrics = result["overall"]["regression"]
    for name, m in metrics.items():
        if not name.startswith("bfcl."):
            continue
        ci = f"[{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}]" if m["ci95"] else ""
        strict = metrics.get("bfcl_strict." + name.removeprefix("bfcl."), {}).get("value")
        table.add_row(name.removeprefix("bfcl."), f"{m['value']:.3f}", ci,
                      "" if strict is None else f"{strict:.3f}", str(m["n"]))
    return table


__all__ = ["CATEGORIES", "DEFAULT_CATEGORIES", "HANDLER", "Questions", "bfcl_table", "check_categories",
           "evaluate_bfcl", "load_questions", "prompt_messages", "question_rows", "score", "served", "verdict"]
