"""`sql`: questions about a generated SQLite database, answered with a guarded read-only query; see env.py."""

from .env import SQLEnv

__all__ = ["SQLEnv"]
