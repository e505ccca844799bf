"""Rollout workers on Ray give what the local backend gives: the same trajectories for the same seed (each episode
draws from its own stream), and a GRPO run whose workers take the learner's weights after every step trains the same
model as a local run."""

from __future__ import annotations

import json
import time

import pytest
import torch

pytest.importorskip("ray")

from agentic_rl.config import load_config
from agentic_rl.envs import make_env
from agentic_rl.policies import HFPolicy, SamplingConfig
from agentic_rl.runtime.rollout import run_episodes
from agentic_rl.scale.ray_rollout import RayRollout
from agentic_rl.train.grpo import GRPOConfig, train_grpo


def _same(local, remote, version):
    assert [(t.task_id, t.sample) for t in remote] == [(t.task_id, t.sample) for t in local]
    for a, b in zip(local, remote):
        assert a.ids == b.ids and a.mask == b.mask and a.messages == b.messages and a.reward == b.reward
        # the same tokens; their logprobs round differently in a worker's smaller batch on one thread (fp32 matmul
        # blocking): 1.3e-5 apart on the 2026-12-07 machine, at c71a43d as after it; the trainer's check allows 1e-3
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) <= 1e-4
        assert b.info["weights_version"] == version


def test_two_ray_workers_sample_the_local_trajectories_and_take_published_weights(trained_dir):
    tasks = make_env("tool_use").tasks("eval", 5, seed=1)
    policy = HFPolicy(trained_dir, SamplingConfig(1.0, 32))
    local = run_episodes(lambda: make_env("tool_use"), tasks, policy, group_size=2, seed=7)
    with RayRollout("tool_use", {}, str(trained_dir), 1.0, 32, workers=2) as workers:
        remote = workers.run(tasks, 2, seed=7)
        _same(local, remote, 0)
        assert len({t.info["worker_pid"] for t in remote}) == 2  # both workers sampled a share
        with torch.no_grad():  # the learner's next weights: every worker must sample with them
            for p in policy.model.parameters():
                p.add_(0.01 * torch.randn_like(p))
        workers.publish(1, policy.model)
        total = float(sum(p.double().sum() for p in policy.model.state_dict().values()))
        assert workers.checksums() == pytest.approx([total, total], rel=1e-12)
        _same(run_episodes(lambda: make_env("tool_use"), tasks, policy, group_size=2, seed=7),
              workers.run(tasks, 2, seed=7), 1)
        workers.version = 0  # a driver that asks for weights the workers no longer hold is refused
        with pytest.raises(Exception, match="weights version 0, but this worker holds 1"):
            workers.run(tasks[:1], 2, seed=7)


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_grpo_with_ray_workers_trains_what_a_local_run_trains(trained_dir, tmp_path, finetune):
    """Two steps: the second step's episodes are sampled by the workers with the weights the first step made, so
    the runs' second steps agree only if those weights reached them. With LoRA the workers get the adapter alone."""
    lora = ["finetune=lora", "lora.r=4", "lr=1e-2"] if finetune == "lora" else ["lr=1e-3"]
    common = [f"policy={trained_dir}", "steps=2", "tasks_per_step=3", "group_size=2", "max_new_tokens=32",
              "eval_tasks=2", "seed=3", *lora]
    for name, extra in (("local", []), ("ray", ["rollout.backend=ray", "rollout.workers=2"])):
        train_grpo(load_config(GRPOConfig, overrides=common + extra), tmp_path / name)
    metrics = {n: [json.loads(x) for x in (tmp_path / n / "metrics.jsonl").read_text().splitlines()]
               for n in ("local", "ray")}
    assert len(metrics["local"]) == len(metrics["ray"]) == 2
    for a, b in zip(metrics["local"], metrics["ray"]):
        for key in ("reward_mean", "success_rate", "tokens_per_traj", "trajectories_trained", "tool_calls_per_traj"):
            assert a[key] == b[key], key
        for key in ("loss", "entropy", "approx_kl"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    full = sum(v.numel() * 4 for v in HFPolicy(trained_dir).model.state_dict().values()) / 2**20
    published = [m["published_mb"] for m in metrics["ray"]]
    if finetune == "lora":  # the adapter's matrices: a few percent of the model
        assert all(0 < mb < 0.1 * full for mb in published), (published, full)
    else:
        assert published == [pytest.approx(full, rel=1e-3)] * 2
    one = HFPolicy(tmp_path / "local" / "model").model.state_dict()
    two = HFPolicy(tmp_path / "ray" / "model").model.state_dict()
    start = HFPolicy(trained_dir).model.state_dict()
    assert any(not torch.equal(one[k], start[k]) for k in one)  # it trained
    # Adam divides each gradient by its own running scale: where a gradient is ~0, the last-digit differences of
    # the two runs' logprobs move a weight by up to ~lr; the step's statistics above are the exact comparison
    for k in one:
        torch.testing.assert_close(one[k], two[k], rtol=0, atol=2e-3)


def test_a_lost_worker_is_replaced_and_its_share_sampled_again(trained_dir, tmp_path):
    """The worker that steps one task dies there. Once (the marker stops the second death): a new worker samples
    the share again and the step's trajectories are the local ones. Every time: past the retries, that share's
    episodes are infrastructure failures and the others are kept. Both are recorded as events."""
    env = "tests.scale.dying_env:DyingEnv"
    tasks = make_env("tool_use").tasks("eval", 4, seed=1)
    local = run_episodes(lambda: make_env("tool_use"), tasks, HFPolicy(trained_dir, SamplingConfig(1.0, 32)),
                         group_size=2, seed=7)
    once = {"die_on": tasks[3].id, "marker": str(tmp_path / "died")}
    with RayRollout(env, once, str(trained_dir), 1.0, 32, workers=2, retries=1) as workers:
        got = workers.run(tasks, 2, seed=7)
        events = workers.take_events()
        again = workers.run(tasks, 2, seed=7)  # the replaced worker samples the next step as any other
    assert len(events) == 1 and "worker 1 lost" in events[0] and (tmp_path / "died").exists()
    _same(local, got, 0)
    _same(local, again, 0)
    with RayRollout(env, {"die_on": tasks[0].id}, str(trained_dir), 1.0, 32, workers=2, retries=1) as workers:
        got = workers.run(tasks, 2, seed=7)
        events = workers.take_events()
    assert len(events) == 2 and all("worker 0 lost" in e for e in events)
    assert [t.outcome for t in got[:4]] == ["env_error"] * 4 and all(t.is_infra_failure for t in got[:4])
    _same(local[4:], got[4:], 0)


def test_a_hung_worker_is_taken_for_lost(trained_dir, tmp_path):
    env = "tests.scale.dying_env:DyingEnv"
    tasks = make_env("tool_use").tasks("eval", 2, seed=1)
    local = run_episodes(lambda: make_env("tool_use"), tasks, HFPolicy(trained_dir, SamplingConfig(1.0, 32)),
                         group_size=2, seed=7)
    hang = {"die_on": tasks[0].id, "marker": str(tmp_path / "hung"), "hang": True}
    with RayRollout(env, hang, str(trained_dir), 1.0, 32, workers=2, retries=1, hang_s=10) as workers:
        got = workers.run(tasks, 2, seed=7)
        events = workers.take_events()
    assert len(events) == 1 and "worker 0 lost" in events[0] and "TimeoutError" in events[0]
    _same(local, got, 0)


def test_a_slow_worker_is_not_taken_for_hung(trained_dir):
    """Each env call sleeps 6 s, so a share takes ≥ 12 s, past hang_s = 9 — but the model runs between the calls."""
    env = "tests.scale.dying_env:DyingEnv"
    tasks = make_env("tool_use").tasks("eval", 2, seed=1)
    local = run_episodes(lambda: make_env("tool_use"), tasks, HFPolicy(trained_dir, SamplingConfig(1.0, 32)),
                         group_size=1, seed=7)
    with RayRollout(env, {"slow_s": 6.0}, str(trained_dir), 1.0, 32, workers=2, retries=0, hang_s=9) as workers:
        started = time.monotonic()
        got = workers.run(tasks, 1, seed=7)
        took = time.monotonic() - started
        events = workers.take_events()
    assert took > 12 and events == []
    _same(local, got, 0)


def test_the_ray_backend_refuses_what_it_cannot_do_yet():
    for extra, why in ((["rollout.engine=gateway"], "choose one"),):
        with pytest.raises(ValueError, match=why):
            load_config(GRPOConfig, overrides=["rollout.backend=ray", *extra])
    with pytest.raises(ValueError, match=r"rollout\.workers: it is used only with rollout\.backend=ray"):
        load_config(GRPOConfig, overrides=["rollout.workers=4"])  # without the backend it would do nothing


def test_overlap_samples_the_next_step_while_this_one_trains(trained_dir, tmp_path):
    """rollout.overlap=1: every step after the first trains on trajectories sampled with the weights one update old
    (staleness 1, recorded), so the ratio against their sampling logprobs is no longer 1 (approx_kl > 0), where the
    first step, on-policy, has it at float rounding."""
    cfg = load_config(GRPOConfig, overrides=[f"policy={trained_dir}", "steps=3", "tasks_per_step=3", "group_size=2",
                                             "max_new_tokens=32", "eval_tasks=2", "lr=1e-3", "seed=3",
                                             "rollout.backend=ray", "rollout.workers=2", "rollout.overlap=1"])
    train_grpo(cfg, tmp_path / "run")
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["staleness_max"] for m in lines] == [0, 1, 1]
    assert lines[0]["approx_kl"] < 1e-6 < min(m["approx_kl"] for m in lines[1:])
    with pytest.raises(ValueError, match="max_staleness"):
        load_config(GRPOConfig, overrides=["rollout.backend=ray", "rollout.overlap=1", "rollout.max_staleness=0"])
    with pytest.raises(ValueError, match=r"set rollout\.backend=ray"):
        load_config(GRPOConfig, overrides=["rollout.overlap=1"])


def test_ray_workers_run_an_agent_function_and_grpo_trains_on_it(trained_dir, tmp_path):
    """Each actor runs the user's agent through a gateway of its own: the records are token-exact (the learner's
    forward gives the logprobs the actors recorded), and a GRPO step trains on them."""
    from agentic_rl.train.grpo import check_trajectory_logprobs

    tasks = make_env("tool_use").tasks("eval", 4, seed=1)
    agent = ("examples.openai_agent:run", 8, None)
    with RayRollout("tool_use", {}, str(trained_dir), 1.0, 32, workers=2, agent=agent) as workers:
        trajs = workers.run(tasks, 2, seed=7)
    assert len({t.info["worker_pid"] for t in trajs}) == 2 and all(t.info["weights_version"] == 0 for t in trajs)
    assert {t.task_id for t in trajs} == {t.id for t in tasks} and all(any(t.mask) for t in trajs)
    cfg = load_config(GRPOConfig, overrides=[f"policy={trained_dir}", "max_new_tokens=32"])
    assert check_trajectory_logprobs(HFPolicy(trained_dir), trajs, cfg) <= 1e-3
    train_grpo(load_config(GRPOConfig, overrides=[
        f"policy={trained_dir}", "agent=examples.openai_agent:run", "steps=1", "tasks_per_step=2", "group_size=2",
        "max_new_tokens=32", "eval_tasks=2", "rollout.backend=ray", "rollout.workers=2"]), tmp_path / "g")
    step = json.loads((tmp_path / "g" / "metrics.jsonl").read_text().splitlines()[0])
    assert step["rollout_events"] == [] and step["trajectories_trained"] >= 4 and step["sampled_by_workers"] == 2
