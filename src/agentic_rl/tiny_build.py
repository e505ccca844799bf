"""Build the tiny policy for an environment: its tokenizer is trained on that environment's own text."""

from __future__ import annotations

from pathlib import Path

from .envs.base import Env
from .parsing import format_tool_call
from .policies.scripted import TeacherPolicy
from .policies.tiny import build_tiny
from .rollout import run_episodes


def env_corpus(env_factory, n_tasks: int | None = None, seed: int = 0) -> list[str]:
    """Texts the tokenizer learns from: noisy-teacher episodes on train tasks (prompts, calls, observations)."""
    env = env_factory()
    n_tasks = n_tasks or env.tokenizer_tasks
    trajs = run_episodes(env_factory, env.tasks("train", n_tasks, seed), TeacherPolicy(dict(env.default_noise)),
                         seed=seed)
    texts = [env.reset(env.tasks("train", 1, seed)[0])[0]["content"], "system user assistant tool"]
    for t in trajs:
        for m in t.messages[1:]:
            texts.append(m.get("content") or "")
            for tc in m.get("tool_calls") or []:
                texts.append(format_tool_call(tc["function"]["name"], tc["function"]["arguments"]))
    return texts


def build_tiny_for_env(env: Env, out_dir: Path, seed: int = 0, **model_kwargs: int) -> Path:
    """Train the tokenizer on the env's text and save an untrained tiny model there (skipped if already built)."""
    if (out_dir / "config.json").exists():
        return out_dir
    factory = type(env)
    return build_tiny(env_corpus(factory, seed=seed), out_dir, seed=seed, **model_kwargs)
