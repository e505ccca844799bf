"""Environments by name (or `module:Class` for one of your own). Adding one: README's "How to add an environment"."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
import typing
from typing import Any

import pydantic

from .base import Env, Message, StepResult, Task, check_env
from .codefix import CodeFixEnv
from .game import GameEnv
from .math import MathEnv
from .sql import SQLEnv
from .tool_use import ToolUseEnv
from .toolcall import ToolCallEnv

ENVS: dict[str, type[Env]] = {"tool_use": ToolUseEnv, "codefix": CodeFixEnv, "math": MathEnv, "game": GameEnv,
                             "sql": SQLEnv, "toolcall": ToolCallEnv}


def env_class(name: str) -> type[Env]:
    """The env class `name` names: a built-in (ENVS) or `package.module:Class` (imported, Gymnasium's entry point),
    the module looked for on the Python path and then in the current directory, as README's example is used."""
    if name in ENVS:
        return ENVS[name]
    module, _, attr = name.partition(":")
    if not attr:
        raise ValueError(f"unknown env {name!r}; valid envs: {', '.join(sorted(ENVS))} (or module:Class)")
    try:
        cls = getattr(import_here_too(module), attr)
    except ModuleNotFoundError as e:
        raise ValueError(f"cannot load env {name!r}: no module named {e.name!r} in the current directory "
                         f"({os.getcwd()}) or on the Python path") from None
    except AttributeError:
        raise ValueError(f"cannot load env {name!r}: module {module!r} has no {attr!r}") from None
    except Exception as e:  # the module itself failed to import: its error, in one line
        raise ValueError(f"cannot load env {name!r}: importing {module!r} failed: {type(e).__name__}: {e}") from None
    if isinstance(cls, type) and issubclass(cls, Env):
        return cls
    raise ValueError(f"{name!r} is not an Env subclass")


def import_here_too(module: str) -> Any:
    """Import `module`; if it is not on the path, from the current directory (the console script's path does not
    hold it, unlike `python -m`)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = module.split(".")[0]
        if e.name != top or os.getcwd() in sys.path:
            raise
    sys.path.append(os.getcwd())
    return importlib.import_module(module)


def check_env_args(name: str, env_args: dict[str, Any]) -> dict[str, Any]:
    """`env_args` checked against the env's constructor — each name, and each value against its annotation
    (converted as pydantic converts, "0.3" → 0.3) — or a one-line ValueError naming the argument and what is valid."""
    cls = env_class(name)
    params = {n: p for n, p in inspect.signature(cls).parameters.items() if n not in ("self", "args", "kwargs")}
    unknown = [k for k in env_args if k not in params]
    if unknown:
        raise ValueError(f"env {name} takes no argument {unknown[0]!r}; valid env_args: {', '.join(params)}")
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # an annotation that does not resolve: leave the values to the constructor
        hints = {}
    out = {}
    for key, value in env_args.items():
        if key not in hints:
            out[key] = value
            continue
        try:
            out[key] = pydantic.TypeAdapter(hints[key]).validate_python(value)
        except pydantic.ValidationError as e:
            why = e.errors()[0]["msg"]
            raise ValueError(f"env_args.{key}: {why[0].lower() + why[1:]} (got {value!r}); env {name} takes "
                             f"{key}: {_type_name(hints[key])}") from None
    return out


def _type_name(annotation: Any) -> str:
    """`float`, `list[str] | None`, `list[Module] | None`: the annotation without module paths."""
    return annotation.__name__ if isinstance(annotation, type) else re.sub(r"(\w+\.)+(\w+)", r"\2", str(annotation))


def make_env(name: str, **kwargs: Any) -> Env:
    """Build an env by name; an unknown name or argument is an error that lists the valid ones."""
    check_env_args(name, kwargs)
    return env_class(name)(**kwargs)


__all__ = ["ENVS", "Env", "Message", "StepResult", "Task", "check_env", "check_env_args", "env_class", "make_env"]
