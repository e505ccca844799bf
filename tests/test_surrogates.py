"""A lone UTF-16 surrogate — text a script policy, an env or a model behind an API can emit, and no UTF-8 file can
hold — never crashes a batch: rollout, eval, SFT and GRPO write it and read it back as it was (issue 39, item 6)."""

from __future__ import annotations

import functools
import json

import pytest
from typer.testing import CliRunner

from agentic_rl.cli import app
from agentic_rl.config import load_config
from agentic_rl.envs import tool_use
from agentic_rl.runtime.trajectory import load_jsonl
from tests.conftest import SMALL_SFT

LONE = "\ud800"
REPLY = f"I think it is {LONE} maybe"


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


@pytest.fixture
def search_says_a_surrogate(monkeypatch):
    """tool_use's search tool answers with a lone surrogate in its text (the env's observation carries it)."""
    original = tool_use.search

    @functools.wraps(original)
    def search(query: str) -> str:
        return original(query) + " " + LONE

    monkeypatch.setattr(tool_use, "search", search)


@pytest.mark.parametrize("command", ["rollout", "eval"])
def test_rollout_and_eval_write_a_lone_surrogate_and_read_it_back(tmp_path, command):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([REPLY]))  # json.dumps escapes it: a valid file that holds the surrogate
    out = tmp_path / "out.json"
    args = [command, "--policy", f"script:{script}", "--n", "3", "--json", str(out)]
    result = CliRunner().invoke(app, args + (["--no-robustness"] if command == "eval" else []))
    assert result.exit_code == 0, result.output
    raw = out.read_bytes()
    raw.decode("utf-8")  # the file is valid UTF-8
    if command == "rollout":  # the trajectories, and the reply in them exactly as the policy wrote it
        assert REPLY in set(_strings(json.loads(raw)))
    else:  # the eval result: its metrics, over episodes that all ran
        assert json.loads(raw)["schema"] == "agentic-rl.eval/1"


def test_trajectory_files_round_trip_a_lone_surrogate(tmp_path):
    from agentic_rl.policies import ScriptPolicy
    from agentic_rl.runtime.rollout import run_episodes
    from agentic_rl.runtime.trajectory import save_jsonl

    script = tmp_path / "script.json"
    script.write_text(json.dumps([REPLY]))
    env = tool_use.ToolUseEnv()
    trajs = run_episodes(tool_use.ToolUseEnv, env.tasks("eval", 2), ScriptPolicy(script))
    save_jsonl(trajs, tmp_path / "t.jsonl")  # as run writes each stage's evaluation episodes
    assert load_jsonl(tmp_path / "t.jsonl") == trajs


def test_sft_renders_and_writes_observations_with_a_lone_surrogate(tmp_path, search_says_a_surrogate):
    from agentic_rl.train.sft import SFTConfig, train_sft

    cfg = load_config(SFTConfig, overrides=SMALL_SFT + ["demos=24", "max_steps=2", "batch_size=8", "eval_every=0",
                                                        "eval_tasks=2", "env_args.kinds=[search]"])
    train_sft(cfg, tmp_path / "sft")
    demos = load_jsonl(tmp_path / "sft" / "demos.jsonl")
    observations = [m["content"] for d in demos for m in d.messages if m["role"] == "tool"]
    assert observations and all(o.endswith(" " + LONE) for o in observations if not o.startswith("error"))


def test_grpo_samples_and_trains_on_observations_with_a_lone_surrogate(trained_dir, tmp_path, search_says_a_surrogate):
    from agentic_rl.train.grpo import GRPOConfig, train_grpo

    cfg = load_config(GRPOConfig, overrides=[f"policy={trained_dir}", "steps=1", "tasks_per_step=2", "group_size=2",
                                             "max_new_tokens=32", "eval_every=0", "eval_tasks=2",
                                             "env_args.kinds=[search]"])
    summary = train_grpo(cfg, tmp_path / "grpo")
    assert summary["steps"] == 1
    line = json.loads((tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()[0])
    assert line["env_error_rate"] == 0.0
