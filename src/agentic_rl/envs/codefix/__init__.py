"""The code-agent environment: fix an injected bug in a real git repository, rewarded by tests it cannot game."""

from .env import CodeFixEnv

__all__ = ["CodeFixEnv"]
