"""Environments by name (or `module:Class` for one of your own). Adding one: README's "How to add an environment"."""

from __future__ import annotations

import importlib
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


def env_class(name: str) -> type[Env]:
    """The env class `name` names: a built-in (ENVS) or `package.module:Class` (imported, Gymnasium's entry point)."""
    if name in ENVS:
        return ENVS[name]
    module, _, attr = name.partition(":")
    if attr:
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"cannot load env {name!r}: {e}") from None
        if isinstance(cls, type) and issubclass(cls, Env):
            return cls
        raise ValueError(f"{name!r} is not an Env subclass")
    raise ValueError(f"unknown env {name!r}; valid envs: {', '.join(sorted(ENVS))} (or module:Class)")


def check_env_args(name: str, env_args: dict[str, Any]) -> None:
    """ValueError, in one line, for an unknown env or an argument its constructor does not take."""
    params = [p for p in inspect.signature(env_class(name)).parameters if p not in ("self", "args", "kwargs")]
    unknown = [k for k in env_args if k not in params]
    if unknown:
        raise ValueError(f"env {name} takes no argument {unknown[0]!r}; valid env_args: {', '.join(params)}")


def make_env(name: str, **kwargs: Any) -> Env:
    """Build an env by name; an unknown name or argument is an error that lists the valid ones."""
    check_env_args(name, kwargs)
    return env_class(name)(**kwargs)


__all__ = ["ENVS", "Env", "Message", "StepResult", "Task", "check_env", "check_env_args", "env_class", "make_env"]
