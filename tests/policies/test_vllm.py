"""vLLM as the sampling engine (`rollout.engine=vllm`). On a CUDA GPU with the vllm extra: its episodes are token-exact
trajectories whose logprobs match our model's forward, and GRPO trains through it with weights or a LoRA adapter
handed over each step. Elsewhere it is refused before anything is written."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from agentic_rl.config import load_config
from agentic_rl.train.grpo import GRPOConfig, train_grpo

GPU_AND_VLLM = torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None
NEEDS = pytest.mark.skipif(not GPU_AND_VLLM, reason="vLLM samples on a CUDA GPU (pip install -e '.[vllm]'); this "
                                                     "machine has no GPU: scripts/gpu_check.sh runs these where one is")


@pytest.mark.skipif(GPU_AND_VLLM, reason="here vLLM can run: the GPU tests below cover it")
def test_vllm_is_refused_where_it_cannot_run(tmp_path):
    cfg = load_config(GRPOConfig, overrides=["rollout.engine=vllm"])
    with pytest.raises(ValueError, match=r"rollout\.engine=vllm needs (a CUDA GPU|vLLM: pip install)"):
        train_grpo(cfg, tmp_path / "g")
    assert not (tmp_path / "g").exists()


def test_vllm_settings_are_checked():
    with pytest.raises(ValueError, match=r"choose one"):
        load_config(GRPOConfig, overrides=["rollout.engine=vllm", "rollout.backend=ray"])
    with pytest.raises(ValueError, match=r"leave rollout\.engine=vllm out with agent"):
        load_config(GRPOConfig, overrides=["rollout.engine=vllm", "agent=m:f"])
    with pytest.raises(ValueError, match=r"vllm_gpu_memory: it is used only with rollout\.engine=vllm"):
        load_config(GRPOConfig, overrides=["rollout.vllm_gpu_memory=0.5"])


@NEEDS
def test_vllm_samples_token_exact_trajectories_with_the_model_logprobs(trained_dir):
    from agentic_rl.envs import make_env
    from agentic_rl.policies import HFPolicy, SamplingConfig
    from agentic_rl.policies.vllm import VLLMPolicy
    from agentic_rl.runtime.rollout import run_episodes
    from agentic_rl.train.logprobs import sequence_logprobs

    engine = VLLMPolicy(trained_dir, SamplingConfig(1.0, 32), gpu_memory_utilization=0.2)
    tasks = make_env("tool_use").tasks("eval", 6, seed=1)
    trajs = run_episodes(lambda: make_env("tool_use"), tasks, engine, group_size=2, seed=7)
    # each record was checked against the rendered conversation (the session raises on a diverging token)
    assert all(len(t.ids) == len(t.mask) == len(t.logprobs) and any(t.mask) for t in trajs)
    hf = HFPolicy(trained_dir, device="cuda", dtype=torch.float32)
    with torch.no_grad():
        logp, _ = sequence_logprobs(hf.model, [t.ids for t in trajs], 1.0, masks=[t.mask for t in trajs])
    worst = max(abs(float(logp[b, i]) - lp) for b, t in enumerate(trajs)
                for i, (m, lp) in enumerate(zip(t.mask, t.logprobs)) if m)
    assert worst < 0.1, worst  # vLLM samples in bf16; the forward is fp32
    again = run_episodes(lambda: make_env("tool_use"), tasks, engine, group_size=2, seed=7)
    assert [t.ids for t in again] == [t.ids for t in trajs]  # each turn's own seed: the same draws


@NEEDS
@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_grpo_trains_through_vllm(trained_dir, tmp_path, finetune):
    lora = ["finetune=lora", "lora.r=8"] if finetune == "lora" else []
    cfg = load_config(GRPOConfig, overrides=[f"policy={trained_dir}", "steps=3", "tasks_per_step=4", "group_size=4",
                                             "max_new_tokens=32", "eval_tasks=4", "eval_every=0", "device=cuda",
                                             "rollout.engine=vllm", "rollout.vllm_gpu_memory=0.2", *lora])
    s = train_grpo(cfg, tmp_path / "g")
    metrics = [json.loads(x) for x in (tmp_path / "g" / "metrics.jsonl").read_text().splitlines()]
    assert s["precision"] == "bf16" and len(metrics) == 3
    assert all(m["trajectories_trained"] == 16 for m in metrics)
