"""`rollout.engine=gateway`: the env path's episodes sampled over HTTP by the gateway give the trajectories the
in-process path gives (greedy: the same ids, mask and turns, logprobs to float rounding), and GRPO trains on them."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from agentic_rl.config import load_config
from agentic_rl.envs import make_env
from agentic_rl.policies import HFPolicy, SamplingConfig
from agentic_rl.policies.gateway import GatewayPolicy
from agentic_rl.runtime.rollout import run_episodes
from agentic_rl.serve.local import LocalGateway
from agentic_rl.train.grpo import GRPOConfig, train_grpo


def test_the_env_path_through_the_gateway_gives_the_local_trajectories(trained_dir):
    env = make_env("tool_use")
    tasks = env.tasks("eval", 6, seed=4)
    local = HFPolicy(trained_dir, SamplingConfig(temperature=0.0, max_new_tokens=48))
    with LocalGateway(HFPolicy(trained_dir)) as server:
        remote = GatewayPolicy(server.url, server.gateway.renderer, server.gateway.model_name,
                               SamplingConfig(temperature=0.0, max_new_tokens=48))
        # one episode at a time: the same batch composition on both sides, so logprobs agree to 1e-5
        for task in tasks[:3]:
            a = run_episodes(lambda: make_env("tool_use"), [task], local, seed=0)[0]
            b = run_episodes(lambda: make_env("tool_use"), [task], remote, seed=0)[0]
            assert (b.ids, b.mask, b.assistant_ids, b.messages, b.reward) == (a.ids, a.mask, a.assistant_ids,
                                                                             a.messages, a.reward)
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) <= 1e-5
        # all at once (the gateway batches the concurrent requests): the same tokens
        many_local = run_episodes(lambda: make_env("tool_use"), tasks, local, group_size=2, seed=0)
        many_remote = run_episodes(lambda: make_env("tool_use"), tasks, remote, group_size=2, seed=0)
        assert [t.ids for t in many_remote] == [t.ids for t in many_local]
        assert any(t.n_tool_calls for t in many_remote)
        assert not server.gateway.rollouts  # every record was handed over and forgotten
        remote.close()


def test_grpo_samples_through_the_gateway(trained_dir, tmp_path):
    cfg = load_config(GRPOConfig, overrides=[f"policy={trained_dir}", "rollout.engine=gateway", "steps=1",
                                             "tasks_per_step=2", "group_size=3", "max_new_tokens=32", "eval_tasks=2"])
    train_grpo(cfg, tmp_path / "run")
    m = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert m["trajectories_sampled"] == 6 and m["infra_excluded"] == 0 and m["tokens_per_traj"] > 0
