"""Environments by name. Adding one: a module with a task generator, its tools, a reward and a teacher."""

from __future__ import annotations

import inspect
from typing import Any

from .base import Env, Message, StepResult, Task, check_env
from .codefix import CodeFixEnv
from .game import GameEnv
from .math import MathEnv
from .sql import SQLEnv
from .tool_use import ToolUseEnv

ENVS: dict[str, type[Env]] = {"tool_use": ToolUseEnv, "codefix": CodeFixEnv, "math": MathEnv, "game": GameEnv,
                             "sql": SQLEnv}


def check_env_args(name: str, env_args: dict[str, Any]) -> None:
    """ValueError, in one line, for an unknown env or an argument its constructor does not take."""
    if name not in ENVS:
        raise ValueError(f"unknown env {name!r}; valid envs: {', '.join(sorted(ENVS))}")
    params = [p for p in inspect.signature(ENVS[name]).parameters if p not in ("self", "args", "kwargs")]
    unknown = [k for k in env_args if k not in params]
    if unknown:
        raise ValueError(f"env {name} takes no argument {unknown[0]!r}; valid env_args: {', '.join(params)}")


def make_env(name: str, **kwargs: Any) -> Env:
    """Build an env by name; an unknown name or argument is an error that lists the valid ones."""
    check_env_args(name, kwargs)
    return ENVS[name](**kwargs)


__all__ = ["ENVS", "Env", "Message", "StepResult", "Task", "check_env", "check_env_args", "make_env"]
