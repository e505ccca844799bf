"""Shared fixtures: the tool_use env and small tiny models built once per test session (no downloads)."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from agentic_rl.envs import make_env
from agentic_rl.models.tiny.build import build_tiny_for_env

# Small enough that a test trains it in seconds; the same code path as the default tiny preset.
SMALL = dict(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab_size=1024)
SMALL_SFT = ["tiny.hidden=64", "tiny.layers=2", "tiny.intermediate=128", "tiny.vocab_size=1024"]


@pytest.fixture
def env():
    return make_env("tool_use")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """An untrained small tiny model with its locally trained tokenizer."""
    return build_tiny_for_env(make_env("tool_use"), tmp_path_factory.mktemp("tiny") / "init", **SMALL)


@pytest.fixture(scope="session")
def trained_dir(tmp_path_factory) -> Path:
    """A small model after a short SFT: it ends its turns and makes calls, so sampled episodes are multi-turn."""
    from agentic_rl.config import load_config
    from agentic_rl.train.sft import SFTConfig, train_sft

    out = tmp_path_factory.mktemp("sft") / "run"
    # torch.optim.Muon's numerics, as this fixture was made before float32 became the CPU default: the same weights,
    # so the tests keep the behaviour they were written against (a LangGraph agent's greedy calls among them)
    cfg = load_config(SFTConfig, overrides=SMALL_SFT + ["demos=400", "max_steps=250", "batch_size=16",
                                                        "eval_every=0", "eval_tasks=10", "lr=3e-3",
                                                        "muon_dtype=bfloat16"])
    train_sft(cfg, out)
    return out / "model"


SHORT_RUN = ["eval_tasks=8", "robustness_tasks=4", *[f"sft.{a}" for a in SMALL_SFT], "sft.demos=64", "sft.max_steps=4",
             "sft.eval_tasks=4", "sft.batch_size=16", "grpo.steps=2", "grpo.tasks_per_step=2", "grpo.group_size=4",
             "grpo.eval_tasks=4", "grpo.max_new_tokens=32"]


@pytest.fixture(scope="session")
def short_run(tmp_path_factory):
    """`agentic-rl run` on tool_use with a small model and a few steps: (run dir, CLI args, CLI result)."""
    from typer.testing import CliRunner

    from agentic_rl.cli import app

    out = tmp_path_factory.mktemp("pipeline") / "run"
    args = ["run", "--env", "tool_use", "--out", str(out), *SHORT_RUN]
    return out, args, CliRunner().invoke(app, args)


@pytest.fixture
def busy_cores():
    """A context manager that keeps every core busy (one CPU-bound process per core) while its block runs: for tests
    of what must not depend on the machine's load."""

    @contextmanager
    def busy():
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
        try:
            yield
        finally:
            for p in procs:
                p.kill()
                p.wait()

    return busy
