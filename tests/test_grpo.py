import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentic_rl.config import load_config
from agentic_rl.envs import make_env
from agentic_rl.grpo import GRPOConfig, LogprobMismatchError, ZeroVarianceError, check_logprobs, train_grpo
from agentic_rl.policies import HFPolicy, SamplingConfig

FAST = ["tasks_per_step=4", "group_size=4", "max_new_tokens=40", "eval_tasks=8", "micro_batch_size=8"]


def test_grpo_run_logs_the_learning_signal_and_resumes_exactly(trained_dir, tmp_path):
    args = FAST + [f"policy={trained_dir}", "steps=4", "eval_every=2", "checkpoint_every=2", "mu=2", "beta=0.05"]
    cfg = load_config(GRPOConfig, overrides=args)
    s = train_grpo(cfg, tmp_path / "full")
    lines = [json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    for key in ("reward_mean", "reward_std", "success_rate", "zero_variance_frac", "clip_frac", "approx_kl",
                "entropy", "kl_ref", "tokens_per_traj", "tool_calls_per_traj", "truncation_rate", "env_error_rate",
                "infra_excluded"):
        assert key in lines[0], key
    assert lines[0]["entropy"] > 0 and lines[1]["eval"]["episodes"] == 8
    assert (tmp_path / "full" / "best" / "config.json").exists() and s["steps"] == 4
    # An interrupted run: the same config stopped after its step-2 checkpoint, then resumed to the end.
    half = tmp_path / "half"
    train_grpo(cfg.model_copy(update={"steps": 2}), half)
    (half / "config.yaml").write_text(cfg.to_yaml())
    (half / "summary.json").unlink()
    train_grpo(cfg, half, resume=True)
    a = AutoModelForCausalLM.from_pretrained(tmp_path / "full" / "model")
    b = AutoModelForCausalLM.from_pretrained(half / "model")
    x = torch.randint(5, a.config.vocab_size, (4, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(a(input_ids=x).logits, b(input_ids=x).logits, atol=1e-4)
    lb = [json.loads(x) for x in (half / "metrics.jsonl").read_text().splitlines()]
    assert [x["reward_mean"] for x in lines] == [x["reward_mean"] for x in lb]


def test_logprob_check_catches_train_sample_drift(trained_dir, env):
    policy = HFPolicy(trained_dir, SamplingConfig(temperature=1.0, max_new_tokens=40))
    f = lambda: make_env("tool_use")  # noqa: E731
    cfg = GRPOConfig(policy=str(trained_dir), temperature=1.0)
    assert check_logprobs(policy, f, env.tasks("train", 2), cfg, seed=0) < 1e-3
    # sampled at T=1 but scored at T=0.5: exactly the drift the check exists to catch
    with pytest.raises(LogprobMismatchError, match=r"token \d+ .* sampling logprob"):
        check_logprobs(policy, f, env.tasks("train", 2), cfg.model_copy(update={"temperature": 0.5}), seed=0)


def test_zero_variance_stops_with_advice(trained_dir, tmp_path):
    # near-greedy sampling makes the G samples of a task identical: every group has zero reward variance
    cfg = load_config(GRPOConfig, overrides=FAST + [f"policy={trained_dir}", "steps=5", "zero_variance_patience=2",
                                                    "temperature=0.0001", "logprob_tolerance=1000"])
    with pytest.raises(ZeroVarianceError, match="temperature"):
        train_grpo(cfg, tmp_path / "z")


def test_cli_reports_a_stopped_run_as_a_message_not_a_traceback(trained_dir, tmp_path):
    from typer.testing import CliRunner

    from agentic_rl.cli import app

    r = CliRunner().invoke(app, ["grpo", "--policy", str(trained_dir), "--out", str(tmp_path / "g"), *FAST,
                                 "steps=5", "zero_variance_patience=1", "temperature=0.0001",
                                 "logprob_tolerance=1000"])
    assert r.exit_code == 1 and "ZeroVarianceError" in r.output and "Traceback" not in r.output
