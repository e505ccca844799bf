import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentic_rl.config import load_config
from agentic_rl.envs import make_env
from agentic_rl.policies import HFPolicy, SamplingConfig
from agentic_rl.train.grpo import GRPOConfig, LogprobMismatchError, check_logprobs, train_grpo

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
    f = lambda: make_env("tool_use")
    cfg = GRPOConfig(policy=str(trained_dir), temperature=1.0)
    assert check_logprobs(policy, f, env.tasks("train", 2), cfg, seed=0) < 1e-3
    # sampled at T=1 but scored at T=0.5: exactly the drift the check exists to catch
    with pytest.raises(LogprobMismatchError, match=r"token \d+ .* sampling logprob"):
        check_logprobs(policy, f, env.tasks("train", 2), cfg.model_copy(update={"temperature": 0.5}), seed=0)


def test_zero_variance_stops_with_advice(trained_dir, tmp_path):
    # near-greedy sampling makes the G samples of a task identical: every group has zero reward variance
    cfg = load_config(GRPOConfig, overrides=FAST + [f"policy={trained_dir}", "steps=5", "zero_variance_patience=2",
                                                    "temperature=0.0001", "logprob_tolerance=1000"])
    s = train_grpo(cfg, tmp_path / "z")
    assert s["steps"] == 1 and "no learning signal" in s["stopped_early"] and "temperature" in s["stopped_early"]
    lines = (tmp_path / "z" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 1  # step 1 trained on nothing (all advantages 0); step 2 was sampled, then the run stopped


def test_cli_reports_a_stopped_run_with_its_advice(trained_dir, tmp_path):
    from typer.testing import CliRunner

    from agentic_rl.cli import app

    r = CliRunner().invoke(app, ["grpo", "--policy", str(trained_dir), "--out", str(tmp_path / "g"), *FAST,
                                 "steps=5", "zero_variance_patience=1", "temperature=0.0001",
                                 "logprob_tolerance=1000"])
    assert r.exit_code == 0, r.output
    assert "GRPO stopped at step 0" in r.output and "higher temperature" in r.output
    assert json.loads((tmp_path / "g" / "summary.json").read_text())["stopped_early"]


def test_observation_tokens_receive_no_gradient(trained_dir, env, monkeypatch):
    """The trainer's loss touches only the policy's tokens: its gradient w.r.t. every other position's logprob is 0."""
    import agentic_rl.train.learner as learner_mod
    from agentic_rl.train.logprobs import sequence_logprobs

    policy = HFPolicy(trained_dir, SamplingConfig(temperature=1.0, max_new_tokens=40))
    trajs = [t for t in __import__("agentic_rl.runtime.rollout", fromlist=["x"]).run_episodes(
        lambda: make_env("tool_use", fault_rate=0.5), env.tasks("train", 4), policy, 2, seed=3) if t.n_turns >= 2]
    assert trajs, "need multi-turn trajectories with observations"
    leaves = []

    def full_logprobs(model, seqs, temperature=1.0, with_entropy=False, masks=None, **_):
        lp, ent = sequence_logprobs(model, seqs, temperature, with_entropy=True)  # every position, no mask
        leaf = lp.detach().requires_grad_()
        leaves.append(leaf)
        return leaf, ent.detach()

    monkeypatch.setattr(learner_mod, "sequence_logprobs", full_logprobs)
    adv = [torch.ones(len(t.ids)) * (1 if i % 2 else -1) for i, t in enumerate(trajs)]
    stats = {"loss": 0.0, "clip_frac": 0.0, "kl_old": 0.0, "entropy": 0.0, "kl_ref": 0.0}
    cfg = GRPOConfig(policy=str(trained_dir))
    learner_mod.micro_step(policy.model, None, trajs, adv, cfg, len(trajs), sum(sum(t.mask) for t in trajs), stats)
    (leaf,) = leaves
    for b, t in enumerate(trajs):
        mask = torch.tensor(t.mask, dtype=torch.bool)
        g = leaf.grad[b, : len(t.ids)]
        assert (g[~mask] == 0).all() and (leaf.grad[b, len(t.ids):] == 0).all()
        assert (g[mask] != 0).any()


def _one_right_tool():
    """A toy env: the first turn earns 1 if it calls `search` (any arguments), else 0. Nothing else matters."""
    from agentic_rl.envs.base import EpisodeRecord, StepResult
    from agentic_rl.envs.tool_use import ToolUseEnv
    from agentic_rl.runtime.parsing import ToolCall, parse_turn

    class OneRightTool(ToolUseEnv):
        def step(self, action):
            p = parse_turn(action)  # any arguments: only the choice of tool is rewarded
            r = float(isinstance(p, ToolCall) and p.name == "search")
            return StepResult([], r, True, False, episode=EpisodeRecord(bool(r), r))

    return OneRightTool


def test_grpo_raises_the_probability_of_the_always_right_tool(trained_dir, tmp_path, monkeypatch):
    from agentic_rl.envs import ENVS
    from agentic_rl.runtime.parsing import format_tool_call
    from agentic_rl.runtime.render import Renderer
    from agentic_rl.train.logprobs import sequence_logprobs

    monkeypatch.setitem(ENVS, "one_right_tool", _one_right_tool())  # an env by name, as a user would add one
    env = make_env("one_right_tool", max_turns=1)
    tasks = env.tasks("eval", 16)

    def p_search(model_dir):
        """Mean probability that the first turn names `search`, teacher-forced up to the tool name."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        r = Renderer(tok)
        seqs, masks = [], []
        for t in tasks:
            prompt = r.render(env.reset(t), add_generation_prompt=True).ids
            text = format_tool_call("search", {"query": "x"})
            call = tok(text, add_special_tokens=False)["input_ids"]
            name_end = len(tok(text[: text.index("search") + len("search")], add_special_tokens=False)["input_ids"])
            ids = prompt + call[:name_end]
            seqs.append(ids)
            masks.append([0] * (len(prompt) + name_end - 1) + [1])  # the token that completes the name
        with torch.no_grad():
            lp, _ = sequence_logprobs(model, seqs, masks=masks)
        return lp.sum(1).exp().mean().item()

    before = p_search(trained_dir)
    cfg = load_config(GRPOConfig, overrides=["env=one_right_tool", "env_args.max_turns=1", f"policy={trained_dir}",
                                             "steps=8", "tasks_per_step=8",
                                             "group_size=8", "max_new_tokens=40", "lr=2e-4", "eval_every=0",
                                             "eval_tasks=4", "micro_batch_size=16", "zero_variance_patience=100"])
    train_grpo(cfg, tmp_path / "toy")
    after = p_search(tmp_path / "toy" / "model")
    assert after > before + 0.1, (before, after)


def test_dynamic_sampling_trains_only_on_groups_with_signal(trained_dir, tmp_path, monkeypatch):
    """What reaches the advantage computation, seen from outside: every group has unequal rewards, and groups
    without any were sampled and dropped (so the test exercises the drop, not an easy batch)."""
    from agentic_rl.train import grpo as grpo_module

    trained: list[list[float]] = []
    sampled: list[list[float]] = []
    real_advantages, real_run = grpo_module._token_advantages, grpo_module.run_episodes

    def spy_advantages(groups, cfg):
        trained.extend([t.reward for t in g] for g in groups)
        return real_advantages(groups, cfg)

    def spy_run(env_factory, tasks, policy, group_size=1, **kw):
        trajs = real_run(env_factory, tasks, policy, group_size, **kw)
        if group_size == cfg.group_size:
            sampled.extend([t.reward for t in trajs[i:i + group_size]] for i in range(0, len(trajs), group_size))
        return trajs

    monkeypatch.setattr(grpo_module, "_token_advantages", spy_advantages)
    monkeypatch.setattr(grpo_module, "run_episodes", spy_run)
    cfg = load_config(GRPOConfig, overrides=FAST + [f"policy={trained_dir}", "steps=2", "dynamic_sampling=true",
                                                    "max_resample=2", "zero_variance_patience=100"])
    train_grpo(cfg, tmp_path / "d")
    assert trained and all(max(g) > min(g) for g in trained)
    flat = [g for g in sampled if max(g) == min(g)]
    assert flat, "every sampled group had signal: this seed does not exercise dynamic sampling's drop"
    assert len(trained) < len(sampled)


def _traj(reward: float, outcome: str = "ok", turn_rewards: list[float] | None = None):
    from agentic_rl.runtime.trajectory import Trajectory

    turn_rewards = turn_rewards if turn_rewards is not None else [reward]
    msgs = [{"role": "user", "content": "q"}] + [{"role": "assistant", "content": "a"}] * len(turn_rewards)
    mask = [0, 1, 1] * len(turn_rewards)  # each turn: one observation token, then two of the policy's
    return Trajectory("tool_use", "t", "calc", 0, msgs, turn_rewards, sum(turn_rewards), outcome,  # type: ignore[arg-type]
                      success=reward > 0, ids=list(range(len(mask))), mask=mask, logprobs=[0.0] * len(mask))


def test_signal_is_judged_on_the_trajectories_that_enter_the_loss():
    from agentic_rl.train.grpo import _has_signal, _token_advantages

    traj = GRPOConfig(advantage="trajectory")
    # three successes and one env error: the error is left out of the loss, so every advantage is 0 — no signal
    group = [_traj(1.0), _traj(1.0), _traj(1.0), _traj(0.0, "env_error")]
    assert not _has_signal(group, traj)
    advs, used = _token_advantages([group], traj)
    assert len(used) == 3 and all(float(a.abs().sum()) == 0 for a in advs)
    assert _has_signal([_traj(1.0), _traj(0.0), _traj(0.0, "env_error")], traj)
    # per-turn credit: equal episode rewards, different turns — the advantages are not 0, and that is signal
    turn = GRPOConfig(advantage="turn")
    same_total = [_traj(0.9, turn_rewards=[-0.1, 1.0]), _traj(0.9, turn_rewards=[0.9])]
    assert not _has_signal(same_total, traj) and _has_signal(same_total, turn)
    advs, _ = _token_advantages([same_total], turn)
    assert any(float(a.abs().sum()) > 0 for a in advs)
    assert not _has_signal([_traj(1.0, turn_rewards=[0.5, 0.5]), _traj(1.0, turn_rewards=[0.5, 0.5])], turn)


def test_a_step_of_only_infrastructure_failures_is_skipped_not_a_crash(trained_dir, tmp_path, monkeypatch):
    from agentic_rl.envs.tool_use import ToolUseEnv

    def broken(self, action):
        raise RuntimeError("the tool server is down")

    monkeypatch.setattr(ToolUseEnv, "step", broken)
    cfg = load_config(GRPOConfig, overrides=FAST + [f"policy={trained_dir}", "steps=2", "zero_variance_patience=100"])
    s = train_grpo(cfg, tmp_path / "down")
    lines = [json.loads(x) for x in (tmp_path / "down" / "metrics.jsonl").read_text().splitlines()]
    assert s["steps"] == 2 and len(lines) == 2
    assert all(x["trajectories_trained"] == 0 and x["infra_excluded"] == 16 and x["env_error_rate"] == 1.0
               for x in lines)
    a = AutoModelForCausalLM.from_pretrained(trained_dir)
    b = AutoModelForCausalLM.from_pretrained(tmp_path / "down" / "model")
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))  # nothing to learn from: no update


def test_dynamic_sampling_that_keeps_no_group_skips_the_update(trained_dir, tmp_path):
    # near-greedy: every group's samples are the same, so dynamic sampling keeps none in any round
    cfg = load_config(GRPOConfig, overrides=FAST + [f"policy={trained_dir}", "steps=1", "dynamic_sampling=true",
                                                    "max_resample=1", "temperature=0.0001", "logprob_tolerance=1000",
                                                    "zero_variance_patience=100"])
    s = train_grpo(cfg, tmp_path / "none")
    (line,) = [json.loads(x) for x in (tmp_path / "none" / "metrics.jsonl").read_text().splitlines()]
    assert s["steps"] == 1 and line["trajectories_trained"] == 0 and line["trajectories_sampled"] == 32


def test_failed_episodes_are_counted_and_left_out_of_the_loss(trained_dir, tmp_path, monkeypatch):
    """A failed episode is data: env errors and time-outs are recorded, counted, and excluded from the loss."""
    from agentic_rl.envs.tool_use import ToolUseEnv

    real_step = ToolUseEnv.step

    def flaky(self, action):  # the tool server crashes on every weather task
        if "get_weather" in action:
            raise RuntimeError("weather service crashed")
        return real_step(self, action)

    monkeypatch.setattr(ToolUseEnv, "step", flaky)
    cfg = load_config(GRPOConfig, overrides=FAST + [f"policy={trained_dir}", "steps=2", "zero_variance_patience=100",
                                                    "episode_timeout_s=1e-9", "tasks_per_step=8"])
    train_grpo(cfg, tmp_path / "f")
    lines = [json.loads(x) for x in (tmp_path / "f" / "metrics.jsonl").read_text().splitlines()]
    errors = [round(x["env_error_rate"] * 32) for x in lines]
    for x, n_err in zip(lines, errors):  # an answer at once ends well; a call to another tool overruns 1 ns
        assert x["trajectories_trained"] == 32 - x["infra_excluded"] and x["trajectories_trained"] > 0
        assert x["infra_excluded"] >= n_err
    assert sum(errors) > 0  # weather calls crashed the env ...
    assert sum(x["infra_excluded"] for x in lines) > sum(errors)  # ... and other tool calls timed out


def test_mask_truncated_keeps_a_cut_trajectory_in_the_baseline_and_out_of_the_loss():
    from agentic_rl.train.grpo import _token_advantages

    cut = _traj(0.0)
    cut.info["cut_by_tokens"] = True
    group = [_traj(1.0), _traj(0.0), cut, _traj(1.0)]
    advs, used = _token_advantages([group], GRPOConfig(mask_truncated=True))
    assert len(used) == 3 and cut not in used
    full, _ = _token_advantages([group], GRPOConfig())
    assert torch.equal(advs[0], full[0]) and torch.equal(advs[1], full[1])  # the cut reward still set the baseline
    assert len(_token_advantages([group], GRPOConfig())[1]) == 4


def test_a_turn_cut_by_the_token_limit_is_marked_even_when_the_env_ends_the_episode_on_it(trained_dir):
    from agentic_rl.runtime.rollout import run_episodes

    env = make_env("tool_use")
    tasks = [t for t in env.tasks("eval", 120) if t.kind == "trivial"][:12]  # answered at once: the cut text ends it
    policy = HFPolicy(trained_dir, SamplingConfig(1.0, 1))
    trajs = run_episodes(lambda: make_env("tool_use"), tasks, policy)
    # one token per turn: every turn is cut but one that is the end-of-turn token itself
    assert all(bool(t.info.get("cut_by_tokens")) == (t.assistant_ids[-1][-1] != policy.renderer.eos_id) for t in trajs)
    assert any(t.outcome == "ok" and t.info.get("cut_by_tokens") for t in trajs)  # the env ended it on a cut turn
    assert {t.outcome for t in trajs} <= {"ok", "truncated"}
    long = run_episodes(lambda: make_env("tool_use"), tasks, HFPolicy(trained_dir, SamplingConfig(0.0, 64)))
    assert not any(t.info.get("cut_by_tokens") for t in long)


def test_groups_count_an_agent_episode_once_for_all_its_segments():
    """G episodes per group, in task order: an agent episode that rewrote its history (several segments with one
    `info["episode"]`) counts once, so a task's group never takes the next task's episodes."""
    from agentic_rl.train.grpo import in_groups

    def seg(episode: str | None):
        t = _traj(1.0)
        if episode is not None:
            t.info["episode"] = episode
        return t

    trajs = [seg("a0"), seg("a0"), seg("a1"), seg("b0"), seg("b1"), seg("b1"), seg("b1")]
    assert [[t.info["episode"] for t in g] for g in in_groups(trajs, 2)] == [["a0", "a0", "a1"],
                                                                           ["b0", "b1", "b1", "b1"]]
    plain = [seg(None) for _ in range(6)]  # the env's episodes: one trajectory each
    assert [len(g) for g in in_groups(plain, 3)] == [3, 3]
