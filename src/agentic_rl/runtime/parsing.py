"""Parse one assistant turn into a final answer, a tool call, parallel tool calls, or a typed parse error. Never
raises.

The format is the Hermes / Qwen convention: a turn is either `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
blocks — one, or up to `max_calls` for an env that takes parallel calls, with only whitespace around and between
them — or a final answer in plain text. Everything else is a `ParseError` whose `kind` names the problem; the
environment turns it into an error observation so the agent can recover, and the trainer never sees an exception.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from .tools import Toolbox, to_json

OPEN, CLOSE = "<tool_call>", "</tool_call>"

ParseErrorKind = Literal[
    "malformed_json",  # the text between the tags is not a JSON object
    "missing_name",  # no string "name" field
    "bad_arguments",  # "arguments" is neither an object nor a JSON string holding one
    "unknown_tool",  # the name is not one of the env's tools
    "invalid_arguments",  # the arguments do not match the tool's schema
    "multiple_calls",  # more <tool_call> blocks in one turn than the env takes
    "text_around_call",  # prose before or after the call
    "unbalanced_tags",  # an opening tag without a closing one, or the reverse
]


@dataclass(frozen=True)
class FinalAnswer:
    text: str


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ParseError:
    kind: ParseErrorKind
    message: str


@dataclass(frozen=True)
class ParallelCalls:
    """Several calls in one turn (an env with `max_calls` > 1): they run in order, each answered by its own tool
    message."""

    calls: tuple[ToolCall, ...]


Parsed = FinalAnswer | ToolCall | ParallelCalls | ParseError


def parse_turn(text: str, tools: Toolbox | None = None, max_calls: int = 1) -> Parsed:
    """Classify one assistant turn. With `tools`, also check each tool exists and its arguments validate; more
    than `max_calls` calls in the turn is a `multiple_calls` error."""
    try:
        return _parse(text, tools, max_calls)
    except Exception as e:  # belt and braces: the contract is "never raises", whatever the input
        return ParseError("malformed_json", f"could not parse the turn: {type(e).__name__}")


def _parse(text: str, tools: Toolbox | None, max_calls: int) -> Parsed:
    n_open, n_close = text.count(OPEN), text.count(CLOSE)
    if n_open == 0 and n_close == 0:
        return FinalAnswer(text.strip())
    if n_open != n_close:
        return ParseError("unbalanced_tags", f"found {n_open} {OPEN} and {n_close} {CLOSE}; write "
                                             f"{'exactly one' if max_calls == 1 else 'each call as'} "
                                             f"{OPEN}{{\"name\": ..., \"arguments\": {{...}}}}{CLOSE}")
    if n_open > max_calls:
        return ParseError("multiple_calls", f"found {n_open} tool calls in one turn; make one call per turn" if
                          max_calls == 1 else f"found {n_open} tool calls in one turn; at most {max_calls}")
    # the observation an env of one call per turn shows is worded for one call (tool_use's episodes are unchanged)
    around = ("a turn is either one tool call or a final answer, not both" if max_calls == 1 else
              "a turn is either tool calls or a final answer, not both")
    bodies, pos = [], 0
    for _ in range(n_open):  # where the blocks are, and nothing but whitespace around them, before reading any
        start, end = text.find(OPEN, pos), text.find(CLOSE, pos)
        if end < start:
            return ParseError("unbalanced_tags", f"{CLOSE} comes before {OPEN}")
        if text[pos:start].strip():
            return ParseError("text_around_call", around)
        bodies.append(text[start + len(OPEN):end])
        pos = end + len(CLOSE)
    if text[pos:].strip():
        return ParseError("text_around_call", around)
    calls = [_call(body, tools) for body in bodies]
    error = next((c for c in calls if isinstance(c, ParseError)), None)
    if error is not None:
        return error
    return calls[0] if len(calls) == 1 else ParallelCalls(tuple(calls))  # type: ignore[arg-type]


def _call(body: str, tools: Toolbox | None) -> ToolCall | ParseError:
    """One call's JSON body, checked against `tools` when given."""
    try:
        obj = json.loads(body)
    except (json.JSONDecodeError, RecursionError):
        return ParseError("malformed_json", 'the tool call is not valid JSON; expected {"name": ..., "arguments": {...}}')
    if not isinstance(obj, dict):
        return ParseError("malformed_json", 'the tool call must be a JSON object {"name": ..., "arguments": {...}}')
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ParseError("missing_name", 'the tool call needs a string "name"')
    args = obj.get("arguments", {})
    if isinstance(args, str):  # OpenAI's wire format sends arguments as a JSON string
        try:
            args = json.loads(args)
        except (json.JSONDecodeError, RecursionError):
            args = None
    if not isinstance(args, dict):
        return ParseError("bad_arguments", '"arguments" must be a JSON object')
    if tools is not None:
        if name not in tools.tools:
            return ParseError("unknown_tool", f"unknown tool {name!r}; valid tools: {', '.join(tools.tools)}")
        problem = tools.tools[name].validate(args)
        if problem is not None:
            return ParseError("invalid_arguments", f"invalid arguments for {name}: {problem}")
    return ToolCall(name, args)


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The canonical text of a call, exactly as the tiny chat template renders `tool_calls` (compact JSON)."""
    return OPEN + to_json({"name": name, "arguments": arguments}) + CLOSE


def format_tool_calls(calls: list[tuple[str, dict[str, Any]]]) -> str:
    """Several calls in one turn, one block each, as the tiny chat template renders them."""
    return "".join(format_tool_call(name, args) for name, args in calls)


def calls_of(parsed: Parsed) -> list[tuple[str, dict[str, Any]]]:
    """The (name, arguments) of each call a parsed turn makes ([] for a final answer or a parse error)."""
    if isinstance(parsed, ToolCall):
        return [(parsed.name, parsed.arguments)]
    if isinstance(parsed, ParallelCalls):
        return [(c.name, c.arguments) for c in parsed.calls]
    return []


def served_calls(text: str, names: set[str], max_calls: int) -> list[tuple[str, dict[str, Any]]]:
    """The calls an OpenAI-compatible server answers as `tool_calls` for this turn: all of them when the turn is
    nothing but calls to the offered `names`, else none (the text stays text)."""
    calls = calls_of(parse_turn(text, None, max_calls))
    return calls if calls and all(name in names for name, _ in calls) else []


def message_calls(message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every tool call an assistant message makes, in order — from its `tool_calls` (arguments as an object or a
    JSON string) or parsed from its text. The one place that reads calls out of a message."""
    calls = message.get("tool_calls") or []
    if calls:
        out = []
        for c in calls:
            fn = c["function"]
            out.append((fn["name"], json.loads(fn["arguments"]) if isinstance(fn["arguments"], str) else fn["arguments"]))
        return out
    return calls_of(parse_turn(str(message.get("content") or ""), max_calls=1 << 30))


def message_call(message: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The first tool call an assistant message makes, or None when it makes none."""
    calls = message_calls(message)
    return calls[0] if calls else None


def message_text(message: dict[str, Any]) -> str:
    """An assistant message as the raw text of its turn: the calls' canonical text when it carries `tool_calls`,
    else its content."""
    if message.get("tool_calls"):
        return format_tool_calls(message_calls(message))
    return str(message.get("content") or "")
