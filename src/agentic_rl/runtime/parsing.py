"""Parse one assistant turn into a final answer, a tool call, or a typed parse error. Never raises.

The format is the Hermes / Qwen convention: a turn is either exactly one
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (whitespace around it allowed) or a final answer
in plain text. Everything else is a `ParseError` whose `kind` names the problem; the environment turns it
into an error observation so the agent can recover, and the trainer never sees an exception.
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
    "multiple_calls",  # more than one <tool_call> in one turn
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


Parsed = FinalAnswer | ToolCall | ParseError


def parse_turn(text: str, tools: Toolbox | None = None) -> Parsed:
    """Classify one assistant turn. With `tools`, also check the tool exists and its arguments validate."""
    try:
        return _parse(text, tools)
    except Exception as e:  # belt and braces: the contract is "never raises", whatever the input
        return ParseError("malformed_json", f"could not parse the turn: {type(e).__name__}")


def _parse(text: str, tools: Toolbox | None) -> Parsed:
    n_open, n_close = text.count(OPEN), text.count(CLOSE)
    if n_open == 0 and n_close == 0:
        return FinalAnswer(text.strip())
    if n_open != n_close:
        return ParseError("unbalanced_tags", f"found {n_open} {OPEN} and {n_close} {CLOSE}; write exactly one "
                                             f"{OPEN}{{\"name\": ..., \"arguments\": {{...}}}}{CLOSE}")
    if n_open > 1:
        return ParseError("multiple_calls", f"found {n_open} tool calls in one turn; make one call per turn")
    start, end = text.index(OPEN), text.index(CLOSE)
    if end < start:
        return ParseError("unbalanced_tags", f"{CLOSE} comes before {OPEN}")
    if text[:start].strip() or text[end + len(CLOSE):].strip():
        return ParseError("text_around_call", "a turn is either one tool call or a final answer, not both")
    body = text[start + len(OPEN):end]
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


def message_call(message: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The tool call an assistant message makes — from its `tool_calls` (arguments as an object or a JSON string) or
    parsed from its text — or None when it makes none. The one place that reads a call out of a message."""
    calls = message.get("tool_calls") or []
    if calls:
        fn = calls[0]["function"]
        args = json.loads(fn["arguments"]) if isinstance(fn["arguments"], str) else fn["arguments"]
        return fn["name"], args
    parsed = parse_turn(str(message.get("content") or ""))
    return (parsed.name, parsed.arguments) if isinstance(parsed, ToolCall) else None


def message_text(message: dict[str, Any]) -> str:
    """An assistant message as the raw text of its turn: the call's canonical text when it carries `tool_calls`,
    else its content."""
    if message.get("tool_calls"):
        return format_tool_call(*message_call(message))  # type: ignore[misc]
    return str(message.get("content") or "")
