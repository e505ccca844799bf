"""OpenAI's chat-completions wire format: a request checked field by field, and the replies and errors built back.

A bad request gets OpenAI's error JSON naming the field and what is valid (`ApiError`), never a traceback. Unknown
keys are ignored, as vLLM's server does; a known key with a bad value is refused. Messages are turned into the
project's own format (tool-call arguments as objects, text parts joined), and a request's `tools` go into the system
message as the envs put theirs (`tools_system_prompt`), so a model trained here meets served tools as it met its own.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..runtime.tools import to_json, tools_system_prompt

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_N = 32
MAX_STOP = 4
MAX_STOP_CHARS = 256  # a stop string is looked for in the turn's tail of tokens (sampler.py): long ones cost each step
SEED_RANGE = (-(2**63), 2**63 - 1)  # a 64-bit seed, as OpenAI's API and vLLM take it
MAX_DEPTH = 32  # nesting of a tool call's arguments: deeper ones are refused, not recursed into
MAX_BODY_DEPTH = 64  # nesting of a whole request (tool schemas nest three levels per object)


class ApiError(Exception):
    """An error reply: HTTP status, OpenAI's error `type`, the offending `param` (a field path) and a `code`."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def bad(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param, code="invalid_value")


@dataclass
class ChatRequest:
    """A checked /v1/chat/completions request, messages in the project's format."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    tool_choice: str | dict[str, Any]
    temperature: float
    top_p: float
    max_tokens: int | None
    n: int
    stop: tuple[str, ...]
    seed: int | None
    stream: bool
    include_usage: bool
    logprobs: bool
    return_token_ids: bool
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def forced_tool(self) -> str | None:
        """The function `tool_choice` names, if it names one."""
        return self.tool_choice["function"]["name"] if isinstance(self.tool_choice, dict) else None


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as e:  # ValueError: bad JSON, bad UTF-8, an integer past Python's digit limit
        why = str(e) if isinstance(e, ValueError) else "nested too deeply"
        raise ApiError(400, f"the request body is not valid JSON ({why[:200]})", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    if _depth(body, MAX_BODY_DEPTH) > MAX_BODY_DEPTH:
        raise ApiError(400, f"the request body nests more than {MAX_BODY_DEPTH} levels deep", code="invalid_json")
    return body


def _number(body: dict[str, Any], key: str, default: float, low: float, high: float, low_open: bool = False) -> float:
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise bad(key, f"must be a number, got {type(v).__name__}")
    if isinstance(v, float) and not math.isfinite(v):
        raise bad(key, f"must be a finite number in [{low}, {high}], got {v}")
    if v > high or v < low or (low_open and v == low):
        raise bad(key, f"must be in {'(' if low_open else '['}{low}, {high}], got {v}")
    return float(v)


def _int(body: dict[str, Any], key: str, low: int, high: int | None = None) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad(key, f"must be an integer, got {type(v).__name__}")
    if v < low or (high is not None and v > high):
        shown = v if abs(v) < 10**30 else f"an integer of {len(str(abs(v)))} digits"
        raise bad(key, f"must be {'≥ ' + str(low) if high is None else f'in [{low}, {high}]'}, got {shown}")
    return v


def _bool(body: dict[str, Any], key: str) -> bool:
    v = body.get(key, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise bad(key, f"must be true or false, got {v!r}")
    return v


def parse_request(body: dict[str, Any]) -> ChatRequest:
    """Check every field this server reads; raise ApiError(400) naming the first bad one."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("model", "required: the name of a served model (GET /v1/models)")
    tools = _tools(body.get("tools"))
    max_tokens = _int(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1)
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,) if stop else ()
    elif isinstance(stop, list) and len(stop) <= MAX_STOP and all(isinstance(s, str) and s for s in stop):
        stops = tuple(stop)
    else:
        raise bad("stop", f"must be a non-empty string or a list of at most {MAX_STOP} of them")
    if any(len(s) > MAX_STOP_CHARS for s in stops):
        raise bad("stop", f"a stop string may be at most {MAX_STOP_CHARS} characters")
    seed = _int(body, "seed", *SEED_RANGE)
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise bad("stream_options", "must be an object such as {\"include_usage\": true}")
    top_logprobs = _int(body, "top_logprobs", 0, 0)
    del top_logprobs  # only 0 is served: the sampled token's own logprob comes with logprobs=true
    return ChatRequest(
        model=model, messages=_messages(body.get("messages")), tools=tools,
        tool_choice=_tool_choice(body.get("tool_choice"), tools),
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0), top_p=_number(body, "top_p", 1.0, 0.0, 1.0, True),
        max_tokens=max_tokens, n=_int(body, "n", 1, MAX_N) or 1, stop=stops, seed=seed,
        stream=_bool(body, "stream"), include_usage=bool(options.get("include_usage", False)),
        logprobs=_bool(body, "logprobs"), return_token_ids=_bool(body, "return_token_ids"), raw=body)


def _text(content: Any, where: str, allow_none: bool) -> str | None:
    """A message's content as text: a string, or a list of text parts joined (OpenAI's content parts)."""
    if content is None and allow_none:
        return None
    if isinstance(content, str):
        return _encodable(content, where)
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad(f"{where}[{i}]", "only text parts ({\"type\": \"text\", \"text\": ...}) are served")
            parts.append(part["text"])
        return _encodable("".join(parts), where)
    raise bad(where, f"must be a string or a list of text parts, got {type(content).__name__}")


def _encodable(text: str, where: str) -> str:
    """Text the tokenizer can take: JSON's \\ud800 escapes decode to lone surrogates, which UTF-8 cannot hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise bad(where, "holds a lone surrogate (an unpaired \\ud800–\\udfff escape): not text") from None
    return text


def _messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "required: a non-empty list of {\"role\": ..., \"content\": ...}")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(where, "must be an object with a role")
        role = m.get("role")
        if role not in ROLES:
            raise bad(f"{where}.role", f"must be one of {', '.join(ROLES)}, got {role!r}")
        if role == "assistant":
            msg: dict[str, Any] = {"role": "assistant",
                                   "content": _text(m.get("content"), f"{where}.content", allow_none=True) or ""}
            calls = m.get("tool_calls")
            if calls is not None and not isinstance(calls, list):
                raise bad(f"{where}.tool_calls", "must be a list of {\"id\": ..., \"type\": \"function\", "
                                                 "\"function\": {\"name\": ..., \"arguments\": ...}}")
            if calls:
                msg["tool_calls"] = [_call(c, f"{where}.tool_calls[{k}]") for k, c in enumerate(calls)]
            out.append(msg)
        elif role == "tool":
            if not isinstance(m.get("tool_call_id"), str):
                raise bad(f"{where}.tool_call_id", "required on a tool message: the id of the call it answers")
            out.append({"role": "tool", "content": _text(m.get("content"), f"{where}.content", allow_none=False),
                        "tool_call_id": m["tool_call_id"], **({"name": m["name"]} if m.get("name") else {})})
        else:
            out.append({"role": "system" if role == "developer" else role,
                        "content": _text(m.get("content"), f"{where}.content", allow_none=False)})
    return out


def _call(c: Any, where: str) -> dict[str, Any]:
    fn = c.get("function") if isinstance(c, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise bad(where, "must be {\"id\": ..., \"type\": \"function\", \"function\": {\"name\": ..., \"arguments\": ...}}")
    args = fn.get("arguments", "{}")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):
            raise bad(f"{where}.function.arguments", "must be a JSON object (as a string)") from None
    if not isinstance(args, dict):
        raise bad(f"{where}.function.arguments", "must be a JSON object (as a string)")
    if _depth(args) > MAX_DEPTH:
        raise bad(f"{where}.function.arguments", f"nested more than {MAX_DEPTH} levels deep")
    return {"id": c.get("id"), "type": "function", "function": {"name": fn["name"], "arguments": args}}


def _depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deeply a JSON value nests, counted up to limit + 1 (without recursion: a hostile value may nest
    thousands deep)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            if d <= limit:
                todo.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise bad("tools", "must be a list of {\"type\": \"function\", \"function\": {\"name\": ..., ...}}")
    names = set()
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(fn, dict):
            raise bad(f"tools[{i}]", "must be {\"type\": \"function\", \"function\": {\"name\": ..., ...}}")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise bad(f"tools[{i}].function.name", "required: a non-empty string")
        if "parameters" in fn and not isinstance(fn["parameters"], dict):
            raise bad(f"tools[{i}].function.parameters", "must be a JSON Schema object")
        if fn["name"] in names:
            raise bad(f"tools[{i}].function.name", f"{fn['name']!r} is given twice")
        names.add(fn["name"])
    return [{"type": "function", "function": t["function"]} for t in tools] or None


def _tool_choice(choice: Any, tools: list[dict[str, Any]] | None) -> str | dict[str, Any]:
    if choice is None:
        return "auto" if tools else "none"
    names = [t["function"]["name"] for t in tools or []]
    if choice in ("auto", "none", "required"):
        if choice == "required" and not tools:
            raise bad("tool_choice", "'required' needs tools")
        return choice
    fn = choice.get("function") if isinstance(choice, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise bad("tool_choice", "must be 'auto', 'none', 'required' or {\"type\": \"function\", \"function\": "
                                 "{\"name\": ...}}")
    if name not in names:
        raise bad("tool_choice.function.name", f"{name!r} is not among the request's tools ({', '.join(names) or 'none'})")
    return {"type": "function", "function": {"name": name}}


def prompt_messages(req: ChatRequest) -> list[dict[str, Any]]:
    """The messages as the model sees them: the tools in the system message (one is added if there is none)."""
    if not req.tools:
        return req.messages
    messages = list(req.messages)
    if messages[0]["role"] == "system":
        return [{"role": "system", "content": tools_system_prompt(messages[0]["content"], req.tools)}, *messages[1:]]
    return [{"role": "system", "content": tools_system_prompt(None, req.tools)}, *messages]


def completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex[:24]


def call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def openai_tool_calls(calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Calls in OpenAI's wire format (arguments as a JSON string)."""
    return [{"id": call_id(), "type": "function", "function": {"name": name, "arguments": to_json(args)}}
            for name, args in calls]


def completion(model: str, choices: list[dict[str, Any]], prompt_tokens: int, completion_tokens: int
               ) -> dict[str, Any]:
    return {"id": completion_id(), "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": usage(prompt_tokens, completion_tokens)}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}
