"""The toolcall env: tools the model has never seen, a new set for each task (see env.py)."""

from .env import ToolCallEnv

__all__ = ["ToolCallEnv"]
