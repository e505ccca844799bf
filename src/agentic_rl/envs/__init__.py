"""Environments by name. Adding one: a module with a task generator, its tools, a reward and a teacher."""

from __future__ import annotations

from typing import Any

from .base import Env, Message, StepResult, Task, check_env
from .codefix import CodeFixEnv
from .tool_use import ToolUseEnv

ENVS: dict[str, type[Env]] = {"tool_use": ToolUseEnv, "codefix": CodeFixEnv}


def make_env(name: str, **kwargs: Any) -> Env:
    """Build an env by name; an unknown name is an error that lists the valid ones."""
    if name not in ENVS:
        raise ValueError(f"unknown env {name!r}; valid envs: {', '.join(sorted(ENVS))}")
    return ENVS[name](**kwargs)


__all__ = ["ENVS", "Env", "Message", "StepResult", "Task", "check_env", "make_env"]
