"""`math`: arithmetic and word problems (or GSM8K), answered directly or with a calculator; see env.py."""

from .env import MathEnv

__all__ = ["MathEnv"]
