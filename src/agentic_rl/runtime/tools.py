"""Tools: plain typed Python functions, their JSON schemas, and safe calls that never raise into the trainer."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from transformers.utils import get_json_schema

# JSON that the policy reads or writes (tool schemas in the system prompt, tool calls, structured tool results) has
# no spaces after "," and ":". A space is a token of its own for the tiny policy's tokenizer
# (models/tiny/tokenizer.py), so compact JSON makes prompts and demonstrations markedly shorter and SFT faster, at
# no cost in what the policy learns (docs/design-notes.md#compact-json). Any JSON parser reads it the same.
JSON_SEPARATORS = (",", ":")


# How a model trained here is told about tools it is given (toolcall's prompt, BFCL's, the gateway's): this
# instruction, then one compact JSON schema per line (`tools_system_prompt`).
TOOLS_INSTRUCTION = (
    "You are an agent with tools, described below. Call a tool only when the request needs it and a tool fits; "
    "otherwise answer directly, or say that no tool can do it. To call tools, reply with only "
    '<tool_call>{"name":...,"arguments":{...}}</tool_call> blocks, one per call; several calls that do not depend on '
    "each other may go in one reply. Use the exact parameter names and types of the schema. When the request is done, "
    "reply with a short answer.\nTools:\n")


def tools_system_prompt(system: str | None, tools: list[dict[str, Any]]) -> str:
    """A system message with `tools` ({"type": "function", "function": ...}) in it, one compact schema per line after
    a line ending in "Tools:". A system text that already ends with that header (an env's own prompt) gets the lines
    directly; other text comes first, then TOOLS_INSTRUCTION and the lines."""
    lines = "\n".join(to_json(t) for t in tools)
    if system and system.endswith("Tools:\n"):
        return system + lines
    return (system + "\n\n" if system else "") + TOOLS_INSTRUCTION + lines


def to_json(value: Any) -> str:
    """Compact JSON, as the agent sees and writes it; non-ASCII text (北京) stays as it is."""
    return json.dumps(value, ensure_ascii=False, separators=JSON_SEPARATORS)


class ToolError(Exception):
    """Raised by a tool to tell the agent something went wrong; the message becomes the observation."""


class InfrastructureError(RuntimeError):
    """Raised by a tool when the env's own machinery failed, not the call: it is not the agent's to see or to be
    scored on, so it passes through `Tool.__call__` and ends the episode as `env_error`."""


@dataclass(frozen=True)
class ToolResult:
    """What one tool call gives back to the agent: text, and whether it is an error."""

    content: str
    ok: bool
    error_kind: str | None = None  # "unknown_tool" | "invalid_arguments" | "tool_error" | "crash"


@dataclass
class Tool:
    """A callable the agent may use, with the OpenAI-style schema derived from its signature and docstring, or given
    (a tool made at run time: enums, arrays, nested objects)."""

    fn: Callable[..., Any]
    schema: dict[str, Any] = None  # type: ignore[assignment]  # None: derived from `fn`
    _validator: jsonschema.protocols.Validator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # The same shape `transformers.utils.get_json_schema` produces, so HF chat templates and TRL read it as is.
        if self.schema is None:
            self.schema = get_json_schema(self.fn)
        params = _strict(self.schema["function"]["parameters"])
        self._validator = jsonschema.Draft202012Validator(params)

    @property
    def name(self) -> str:
        return str(self.schema["function"]["name"])

    def validate(self, arguments: Any) -> str | None:
        """Return None when `arguments` matches the schema, else a one-line reason naming the problem."""
        if not isinstance(arguments, dict):
            return f"arguments must be a JSON object, got {type(arguments).__name__}"
        errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path))
        if not errors:
            return None
        e = errors[0]
        where = ".".join(str(p) for p in e.path) or "arguments"
        valid = ", ".join(self.schema["function"]["parameters"]["properties"]) or "none"
        return f"{where}: {e.message} (parameters of {self.name}: {valid})"

    def __call__(self, arguments: Any) -> ToolResult:
        """Validate, then call. Every failure comes back as an error result, never as an exception."""
        problem = self.validate(arguments)
        if problem is not None:
            return ToolResult(f"error: invalid arguments for {self.name}: {problem}", ok=False,
                              error_kind="invalid_arguments")
        try:
            out = self.fn(**arguments)
        except ToolError as e:
            return ToolResult(f"error: {e}", ok=False, error_kind="tool_error")
        except InfrastructureError:
            raise
        except Exception as e:  # a bug in a tool is the env's problem, reported to the agent, not a trainer crash
            return ToolResult(f"error: {self.name} failed: {type(e).__name__}: {e}", ok=False, error_kind="crash")
        return ToolResult(out if isinstance(out, str) else to_json(out), ok=True)


def _strict(params: dict[str, Any]) -> dict[str, Any]:
    """JSON Schema for validation: unknown arguments are errors and `nullable` admits null."""
    params = copy.deepcopy(params)
    params.setdefault("additionalProperties", False)
    for prop in params.get("properties", {}).values():
        if prop.pop("nullable", False) and "type" in prop:
            types = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
            prop["type"] = [*types, "null"]
    return params


class Toolbox:
    """The tools of one environment, by name."""

    def __init__(self, fns: list[Callable[..., Any] | Tool]):
        tools = [fn if isinstance(fn, Tool) else Tool(fn) for fn in fns]
        self.tools: dict[str, Tool] = {t.name: t for t in tools}
        if len(self.tools) != len(tools):
            raise ValueError("tool names must be unique")

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema for t in self.tools.values()]

    def schemas_text(self) -> str:
        """The schemas for a system prompt: one compact JSON object per line."""
        return "\n".join(to_json(s) for s in self.schemas)

    def call(self, name: str, arguments: Any) -> ToolResult:
        tool = self.tools.get(name)
        if tool is None:
            return ToolResult(f"error: unknown tool {name!r}; valid tools: {', '.join(self.tools)}", ok=False,
                              error_kind="unknown_tool")
        return tool(arguments)
