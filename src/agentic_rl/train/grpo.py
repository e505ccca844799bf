"""Agentic GRPO: G trajectories per task, group-relative advantages, a clipped update on the policy's tokens only.

Readable top to bottom. Each step: sample B tasks × G multi-turn trajectories with the agent loop → rewards from
the env → advantages A_i = (r_i − mean_group) / (std_group + ε) (or per turn, see `grpo_math.turn_advantages`) →
μ passes of the clipped surrogate against the sampling logprobs, in micro-batches → log the learning signal.
The seed's §6: "same question, many samples, compare within the group; raise the better, lower the worse".
"""

from __future__ import annotations

import math
import random
import shutil
import time
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field, field_validator, model_validator

from ..atomic import atomic_write_json
from ..config import Config, ConfigError, used_only_with
from ..device import autocast, resolve_precision
from ..envs.base import stable_hash
from ..evaluation.summary import evaluation_episodes, summarize
from ..policies import HFPolicy, SamplingConfig
from ..runtime.rollout import run_episodes
from ..runtime.trajectory import Trajectory
from ..ui import console, progress
from .agent import AgentEpisodes, episodes_of, load_agent, read_tasks_file
from .checkpoint import load_trainer_state, save_checkpoint, save_model_dir
from .config import TrainerConfig
from .distributed import DataParallel, launched_by_torchrun
from .grpo_math import advantages, turn_advantages
from .learner import learner_plan, loss_backward
from .logprobs import sequence_logprobs
from .lora import Trainee
from .rundir import prepare_run_dir
from .tracking import Reporter


class LogprobMismatchError(RuntimeError):
    """Recomputed logprobs disagree with the sampling logprobs: what would be trained is not what the policy
    sampled."""


class RolloutSettings(Config):
    """Where the env path's episodes are sampled."""

    engine: Literal["local", "gateway", "vllm"] = "local"
    """`local`: the policy in this process; `gateway`: the same policy behind the gateway on a loopback port, each
    episode a rollout sampled over HTTP (policies/gateway.py): the same trajectories, through the boundary that
    lets generation move to another process; `vllm`: vLLM on the trainer's GPU, given the weights (or the LoRA
    adapter) after every step (policies/vllm.py; a CUDA GPU and the vllm extra)."""
    vllm_gpu_memory: float = Field(0.3, gt=0, lt=1)
    """With engine=vllm: the share of the GPU's memory vLLM takes (weights and KV cache); the trainer has the rest."""
    backend: Literal["local", "ray"] = "local"
    """`local`: episodes are sampled in this process; `ray`: by `workers` Ray actors, each with a copy of the policy
    (updated after every step) and its own envs (scale/ray_rollout.py): the same trajectories, in other processes.
    Needs the ray extra."""
    workers: int = Field(2, ge=1)
    """With backend=ray: how many rollout actors."""
    ray_address: str | None = None
    """With backend=ray: the cluster to join (else RAY_ADDRESS, else a local one started and stopped with the run)."""
    retries: int = Field(1, ge=0)
    """With backend=ray: how often a lost worker's share of a step is sampled again (by a new worker) before its
    episodes count as infrastructure failures."""
    worker_timeout_s: float | None = Field(None, gt=0)
    """With backend=ray: a worker with work out whose model runs no forward pass for this long (an env or tool stuck)
    is taken for hung and replaced (None: never); a slow worker still makes them, and start-up does not count."""
    overlap: int = Field(0, ge=0, le=1)
    """With backend=ray: 1 samples step k+1 while the learner trains on step k (one step off-policy, as verl's and
    prime-rl's async modes): the workers sample with the weights one update old, and the loss's ratio is taken
    against the logprobs they recorded. 0: every step samples with the newest weights."""
    max_staleness: int = Field(1, ge=0)
    """The most updates a trajectory's weights may lag the learner's: `overlap` may not exceed it. Each trajectory
    records its lag (`info.staleness`) and each step its largest (`staleness_max` in metrics.jsonl)."""

    def inapplicable(self) -> dict[str, str]:
        ray = self.backend == "ray"
        return super().inapplicable() | used_only_with(*[(key, "rollout.backend=ray", ray) for key in (
            "workers", "ray_address", "retries", "worker_timeout_s", "max_staleness")],
            ("vllm_gpu_memory", "rollout.engine=vllm", self.engine == "vllm"))

    @model_validator(mode="after")
    def _one_place(self) -> RolloutSettings:
        if self.backend == "ray" and self.engine != "local":
            raise ValueError(f"rollout.backend=ray samples in Ray actors; rollout.engine={self.engine} samples in "
                             "this process: choose one")
        if self.overlap and self.backend != "ray":
            raise ValueError("rollout.overlap=1 samples in Ray workers while this process trains: set "
                             "rollout.backend=ray")
        if self.overlap > self.max_staleness:
            raise ValueError(f"rollout.overlap={self.overlap} samples with weights {self.overlap} update(s) old, more "
                             f"than rollout.max_staleness={self.max_staleness} allows")
        return self


class GRPOConfig(TrainerConfig):
    """`agentic-rl grpo`: agentic GRPO from `policy` on the env's train tasks."""

    policy: str = "runs/sft/model"
    """The starting policy: usually the SFT output directory; any model spec works (a preset, .gguf, Hub id)."""
    steps: int = Field(25, ge=1)
    """Optimizer batches (each: sample, score, μ update passes). 25: on tool_use, more steps gain little, and
    `agentic-rl run` stays within its time budget (docs/design-notes.md#grpo-defaults)."""
    tasks_per_step: int = Field(16, ge=1)
    """B: distinct tasks in each step. 16 rather than 8: rare task kinds get twice as many groups in each step, which
    lifts the success rate on held-out tool_use tasks for a little more time (docs/design-notes.md#grpo-defaults)."""
    group_size: int = 8
    """G: trajectories per task; advantages compare within these groups."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature; the loss uses the same temperature so the ratio compares like with like."""
    lr: float = Field(1e-4, gt=0)
    """AdamW learning rate (constant). Higher rates can collapse a run (the policy stops calling tools within a
    step); see docs/design-notes.md#grpo-defaults."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradient clipping norm."""
    epsilon_low: float = Field(0.2, ge=0, lt=1)
    """Lower clip: the ratio may fall to 1 − ε_low."""
    epsilon_high: float = Field(0.28, ge=0)
    """Upper clip: the ratio may rise to 1 + ε_high (DAPO's clip-higher)."""
    beta: float = Field(0.0, ge=0)
    """KL penalty to the frozen starting policy; 0 loads no reference model (with LoRA the reference is the model
    with its adapter disabled: no second copy)."""
    kl_estimator: Literal["k3", "k3_ratio"] = "k3"
    """The KL penalty's per-token estimate: Schulman's k3 (GRPO's paper, verl's low_var_kl), or k3 × π/π_old, the
    unbiased estimate for tokens sampled from π_old (DeepSeek-V3.2; TRL's `use_bias_correction_kl`). k3 is the
    default because samples here are fresh each step (μ = 1 by default), where both have the same value."""
    scale_rewards: Literal["group", "batch", "none"] = "group"
    """Divide centred rewards by the group std, the batch std, or nothing (Dr. GRPO); with `advantage: turn`, the
    std of the group's (or the batch's) per-turn rewards."""
    loss_agg: Literal["seq_mean", "token_mean", "constant"] = "token_mean"
    """Loss aggregation: per-sequence mean (GRPO), token mean over the batch (DAPO), or sum / (B·G·max_new_tokens)."""
    advantage: Literal["trajectory", "turn"] = "trajectory"
    """One advantage per trajectory, or per turn from discounted returns-to-go (see grpo_math.turn_advantages)."""
    gamma: float = Field(1.0, ge=0, le=1)
    """Discount for per-turn returns-to-go (advantage: turn)."""
    mu: int = Field(1, ge=1)
    """Optimisation passes over each sampled batch."""
    micro_batch_size: int = Field(16, ge=1)
    """At most this many trajectories per forward/backward."""
    micro_batch_tokens: int | None = Field(2048, ge=1)
    """At most this many padded tokens (beyond the shared prompt prefix) per forward/backward, trajectories sorted
    by length (None: rows alone decide); see logprobs.micro_batches."""
    shared_prompt: Literal["group", "batch"] = "batch"
    """What the learner computes once: `batch` — the prefix the whole batch shares (an env's common system prompt),
    each row running the rest of its prompt; `group` — each group's prompt (a task's own system prompt and request,
    which its G samples share token for token) once per pass, in the forward and backward of the policy and of the
    reference model: for envs whose prompts differ per task (toolcall's recipe sets it). Same loss and gradients
    either way (benchmarks/grpo_step.py measures the two)."""
    episode_timeout_s: float | None = Field(None, gt=0)
    """Wall-clock limit of an episode, counted from the start of the sampling round it belongs to and checked after
    each of its turns (None: none). An episode over it ends as `timeout`: an infrastructure failure (a hung tool, a
    stuck sandbox), counted in `infra_excluded` and left out of the loss and of its group's advantages."""
    mask_truncated: bool = False
    """Leave trajectories cut by the token limit (a turn reached `max_new_tokens`) out of the loss, as TRL's
    `mask_truncated_completions` (DAPO's overlong filtering): their rewards still set their group's baseline, but a
    cut turn is neither reinforced nor punished — a long answer that was going right is not taught "stop sooner"."""
    dynamic_sampling: bool = False
    """Drop zero-variance groups and sample more tasks to refill the batch (DAPO), up to `max_resample` rounds.
    Off by default: on tool_use it costs sampling time without a reliable gain (docs/design-notes.md#grpo-defaults)."""
    max_resample: int = Field(3, ge=0)
    """Extra sampling rounds a step may take with dynamic sampling."""
    zero_variance_patience: int = Field(5, ge=1)
    """Stop when every group has zero reward variance for this many steps in a row."""
    logprob_tolerance: float | None = Field(None, gt=0)
    """Largest allowed |sampling logprob − recomputed logprob| in the start-of-run check (None: 1e-3 in fp32, 0.1
    under bf16, whose rounding differs between the sampler's cached decode and one full forward)."""
    eval_every: int = Field(10, ge=0)
    """Evaluate on held-out tasks every this many steps (0: only at the end)."""
    eval_tasks: int = Field(100, ge=1)
    """Held-out tasks per evaluation."""
    eval_temperature: float = Field(1.0, ge=0)
    """Sampling temperature for evaluation."""
    checkpoint_every: int = Field(10, ge=1)
    """Save a resumable checkpoint every this many steps."""
    rollout: RolloutSettings = Field(default_factory=RolloutSettings)
    """How episodes are sampled (`rollout.engine`)."""
    agent: str | None = None
    """Train your own agent instead of the env's turn loop: `module:function` or `file.py:function`, called as
    `function(task, client) -> reward` with an `openai.OpenAI` client pointed at the gateway under the episode's
    rollout id; every request it makes is recorded token for token and trained on (train/agent.py). Needs the
    serve extra and openai."""
    tasks_file: str | None = None
    """With `agent`: a JSONL file of task dicts to train on instead of the env's tasks; a line with
    "split": "eval" is held out for evaluation."""
    agent_workers: int = Field(32, ge=1)
    """With `agent`: episodes run at once, each in a thread of its own; the gateway samples their turns as
    batches."""

    @model_validator(mode="after")
    def _agent_advantages(self) -> GRPOConfig:
        if self.agent and self.advantage == "turn":
            raise ValueError("advantage=turn needs the env's per-turn rewards; an agent function returns one reward "
                             "per episode: use advantage=trajectory with agent")
        if self.rollout.overlap and self.dynamic_sampling:
            raise ValueError("rollout.overlap=1 samples the next step's tasks ahead; dynamic_sampling decides them "
                             "after each round: use one")
        if self.agent and self.rollout.engine == "vllm":
            raise ValueError("agent episodes are sampled through this process's gateway, not vLLM: leave "
                             "rollout.engine=vllm out with agent")
        return self

    @field_validator("group_size")
    @classmethod
    def _a_group_compares(cls, value: int) -> int:
        if value < 2:
            raise ValueError(f"GRPO compares the trajectories of one task with each other, so a group needs at "
                             f"least 2 (got {value})")
        return value

    def inapplicable(self) -> dict[str, str]:
        return super().inapplicable() | used_only_with(
            ("kl_estimator", "beta > 0", self.beta > 0), ("gamma", "advantage=turn", self.advantage == "turn"),
            ("max_resample", "dynamic_sampling=true", self.dynamic_sampling),
            ("tasks_file", "agent", bool(self.agent)), ("agent_workers", "agent", bool(self.agent)))


def train_grpo(cfg: GRPOConfig, out: str | Path, resume: bool = False) -> dict[str, Any]:
    """Train, under one process or several (torchrun / accelerate launch: train/distributed.py)."""
    if launched_by_torchrun() and (cfg.agent or cfg.rollout.backend != "local" or cfg.rollout.engine != "local"):
        raise ConfigError("several training processes (torchrun, accelerate launch) sample the env's episodes in "
                          "their own processes, each a share of the step's tasks: not with " + (
                              "agent" if cfg.agent else f"rollout.backend={cfg.rollout.backend}"
                              if cfg.rollout.backend != "local" else f"rollout.engine={cfg.rollout.engine}")
                          + " yet. Run one process, or leave that setting out")
    dp = DataParallel.start(cfg.device)
    try:
        return _train_grpo(cfg, Path(out), resume, dp)
    finally:
        dp.close()


def _train_grpo(cfg: GRPOConfig, out: Path, resume: bool, dp: DataParallel) -> dict[str, Any]:
    t_start = time.time()
    cfg, env_factory, env = cfg.open_env()  # the config as it runs (the env's turn budget filled in) is the one saved
    agent_fn = load_agent(cfg.agent) if cfg.agent else None  # a bad spec or tasks file is refused before any write
    if cfg.rollout.engine == "vllm":
        from ..policies.vllm import check_vllm

        check_vllm()  # a GPU and the extra, before any write
    n_pool = cfg.steps * cfg.tasks_per_step * (1 + (cfg.max_resample if cfg.dynamic_sampling else 0))
    pool, eval_tasks = _task_pools(cfg, env, n_pool)  # step k draws its tasks from its own slice: resumable
    ckpt = dp.on_main(prepare_run_dir, "GRPO", cfg, out, resume)  # rank 0 writes; every rank resumes
    lora = cfg.finetune == "lora"  # a LoRA checkpoint holds the adapter: the model comes from `policy` again
    policy = HFPolicy(cfg.policy if lora else ckpt or cfg.policy, SamplingConfig(cfg.temperature, cfg.max_new_tokens),
                      device=cfg.device, dtype=torch.float32, precision=cfg.precision)
    model, tok, device = policy.model, policy.tokenizer, policy.device
    console.print(f"training on {device} in {resolve_precision(cfg.precision, device)}")
    trainee = Trainee.prepare(model, cfg.finetune, cfg.lora, resume_from=ckpt, seed=cfg.seed)
    ref: Any = None  # the starting policy, only when the KL term is on: LoRA's disabled adapter, or a frozen copy
    if cfg.beta > 0:
        ref = trainee if lora else HFPolicy(cfg.policy, device=device).model.eval().requires_grad_(False)
    opt = torch.optim.AdamW(trainee.parameters(), lr=cfg.lr, weight_decay=0.0)
    step, best, zero_streak, stopped = 0, -math.inf, 0, None
    if ckpt is not None:
        state = load_trainer_state(ckpt)
        opt.load_state_dict(state["optimizer"])
        step, best, zero_streak = state["step"], state["best"], state["zero_streak"]
        console.print(f"resumed from {ckpt.name} at step {step}")
    eval_policy = HFPolicy(cfg.policy, SamplingConfig(cfg.eval_temperature, cfg.max_new_tokens), model=model,
                           tokenizer=tok, precision=cfg.precision)
    # the user's agent through the gateway (train/agent.py), or the env's turn loop — in-process, or over HTTP
    agent = AgentEpisodes(agent_fn, policy, cfg.env, cfg.agent_workers, cfg.episode_timeout_s) if agent_fn else None
    server = _local_gateway(policy) if cfg.rollout.engine == "gateway" and agent is None else None
    sampling_policy = _over_http(server, cfg) if server else policy
    if cfg.rollout.engine == "vllm":  # given the weights below, at every step
        sampling_policy = _vllm(cfg, policy.path if lora or ckpt is None else ckpt)
    workers = _ray_rollout(cfg, cfg.policy if lora else str(ckpt or cfg.policy)) if cfg.rollout.backend == "ray" \
        else None
    ahead: Any = None  # rollout.overlap: the next step's sampling, started before this step trains
    if workers is not None and (step or lora):  # a resumed run's weights, or the learner's adapter, as `step`
        workers.publish(step, model)
    if cfg.rollout.engine == "vllm" and step and lora:  # a resumed run's adapter
        _to_vllm(sampling_policy, step, trainee, out)

    def sample(tasks: list[Any], key: tuple[Any, ...]) -> list[Trajectory]:
        if workers is not None:  # the env's loop or the user's agent, in the Ray actors
            return workers.run(tasks, cfg.group_size, stable_hash("grpo", *key) % 2**31, cfg.episode_timeout_s)
        if agent is not None:
            return agent.run(tasks, cfg.group_size, "-".join(map(str, key)), cfg.temperature)
        # several training processes: each samples a share of the tasks, and every one gets all the trajectories
        return dp.map_shards(lambda share: run_episodes(
            env_factory, share, sampling_policy, cfg.group_size, seed=stable_hash("grpo", *key) % 2**31,
            episode_timeout_s=cfg.episode_timeout_s), tasks)

    def evaluate() -> dict[str, Any]:
        if agent is None:
            return summarize(dp.map_shards(lambda share: evaluation_episodes(env_factory, share, eval_policy,
                                                                             cfg.seed), eval_tasks))
        model.eval()
        return summarize(episodes_of(agent.run(eval_tasks, 1, f"eval-{step}", cfg.eval_temperature)))

    try:
        if step == 0:
            if agent is None:
                check_trajectory_logprobs(policy, run_episodes(env_factory, pool[:2], sampling_policy, 2,
                                                               seed=cfg.seed), cfg)
            else:
                check_trajectory_logprobs(policy, agent.run(pool[:1], 2, "check", cfg.temperature), cfg)

        with Reporter(out, cfg.report_to, cfg.model_dump(mode="json"), name=f"grpo:{out.name}",
                      enabled=dp.main) as reporter, progress() as bar:
            job = bar.add_task("GRPO", total=cfg.steps, completed=step)
            while step < cfg.steps:
                t0 = time.time()
                # 1. Sample B tasks × G trajectories (more with dynamic sampling) and score them in the env.
                model.eval()
                groups, n_sampled, round_ = [], 0, 0
                per_round = cfg.tasks_per_step
                while True:
                    lo = (step * (1 + (cfg.max_resample if cfg.dynamic_sampling else 0)) + round_) * per_round
                    tasks = pool[lo:lo + per_round]
                    if workers is not None and cfg.rollout.overlap:  # this step's, sampled while the last trained
                        trajs = workers.collect(ahead) if ahead is not None else sample(tasks, (cfg.seed, step, 0))
                        nxt = pool[lo + per_round:lo + 2 * per_round]
                        ahead = workers.submit(nxt, cfg.group_size, stable_hash("grpo", cfg.seed, step + 1, 0) % 2**31,
                                               cfg.episode_timeout_s) if step + 1 < cfg.steps else None
                    else:
                        trajs = sample(tasks, (cfg.seed, step, round_))
                    for t in trajs:  # how many updates behind the learner's weights its own were (≤ overlap)
                        t.info["staleness"] = step - t.info.get("weights_version", step)
                    n_sampled += len(trajs)
                    new = in_groups(trajs, cfg.group_size)
                    if cfg.dynamic_sampling:
                        new = [g for g in new if _has_signal(g, cfg)]
                    groups += new
                    round_ += 1
                    if not cfg.dynamic_sampling or len(groups) >= cfg.tasks_per_step or round_ > cfg.max_resample:
                        break
                groups = groups[: cfg.tasks_per_step] if cfg.dynamic_sampling and groups else groups
                batch = [t for g in groups for t in g]
                t_sampled = time.time()

                # 2. Advantages, group-relative. Infrastructure failures are left out of their group and of the loss.
                adv_tok, used = _token_advantages(groups, cfg)
                signal = [g for g in groups if _has_signal(g, cfg)]
                zero_frac = 1 - len(signal) / max(len(groups), 1)
                zero_streak = zero_streak + 1 if not signal else 0
                if zero_streak >= cfg.zero_variance_patience:  # no signal: stop rather than spend compute on nothing
                    stopped = (f"every group had equal rewards for {zero_streak} steps: no learning signal. Try: "
                               f"more SFT (if all fail), a higher temperature (now {cfg.temperature}), a larger "
                               f"group_size (now {cfg.group_size}), or easier/harder tasks so some samples succeed "
                               "and some fail")
                    console.print(f"[yellow]GRPO stopped at step {step}:[/] {stopped}")
                    break

                # 3. μ passes of the clipped surrogate over the policy's tokens, in micro-batches (none when no
                #    trajectory is left: every one an infrastructure failure, or dynamic sampling kept no group).
                #    With several processes each trains on its rows, and the gradients are summed.
                model.train()
                stats: dict[str, float] = {"loss": 0.0, "clip_frac": 0.0, "kl_old": 0.0, "entropy": 0.0, "kl_ref": 0.0}
                n_tokens = sum(sum(t.mask) for t in used)  # the whole batch's, on every rank
                mine = dp.rows(len(used))
                plan = learner_plan([used[i] for i in mine], mine, cfg)
                if not used:
                    console.print(f"[yellow]GRPO step {step + 1}: no update[/] — "
                                  + (f"all {len(batch)} trajectories were infrastructure failures "
                                     f"({summarize(batch)['infra_failures']}: env errors or time-outs)" if batch else
                                     f"dynamic sampling kept no group with signal in {round_} rounds"))
                for _ in range(cfg.mu if used else 0):
                    loss_backward(model, ref, used, adv_tok, plan, cfg, n_tokens, stats)
                    dp.reduce_gradients(trainee.parameters())
                    torch.nn.utils.clip_grad_norm_(trainee.parameters(), cfg.max_grad_norm)
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                stats = dp.sum(stats)
                step += 1
                published = workers.publish(step, model) if workers is not None else 0  # the next step's weights
                if cfg.rollout.engine == "vllm":
                    _to_vllm(sampling_policy, step, trainee, out)

                # 4. Log the learning signal.
                s = summarize(episodes_of(batch))
                rewards = torch.tensor([t.reward for t in episodes_of(batch) if not t.is_infra_failure] or [0.0])
                record = {"step": step, "reward_mean": rewards.mean().item(),
                          "reward_std": rewards.std().item() if rewards.numel() > 1 else 0.0,
                          "success_rate": s["success_rate"], "zero_variance_frac": zero_frac,
                          "loss": stats["loss"] / cfg.mu, "clip_frac": stats["clip_frac"] / max(n_tokens * cfg.mu, 1),
                          "approx_kl": stats["kl_old"] / max(n_tokens * cfg.mu, 1),
                          "entropy": stats["entropy"] / max(n_tokens * cfg.mu, 1),
                          "kl_ref": stats["kl_ref"] / max(n_tokens * cfg.mu, 1),
                          "tokens_per_traj": sum(sum(t.mask or []) for t in batch) / max(len(batch), 1),
                          "tool_calls_per_traj": s["tool_calls_per_episode"], "truncation_rate": s["truncation_rate"],
                          "env_error_rate": sum(t.outcome == "env_error" for t in batch) / max(len(batch), 1),
                          "infra_excluded": s["infra_failures"], "trajectories_sampled": n_sampled,
                          "trajectories_trained": len(used),
                          "sample_seconds": round(t_sampled - t0, 2), "seconds": round(time.time() - t0, 2)}
                if workers is not None:
                    record["rollout_events"] = workers.take_events()  # lost workers, replaced (scale/ray_rollout.py)
                    record["staleness_max"] = max((t.info.get("staleness", 0) for t in batch), default=0)
                    record["published_mb"] = round(published / 2**20, 3)  # with LoRA, the adapter alone
                    record["sampled_by_workers"] = len({t.info["worker_pid"] for t in batch if "worker_pid" in t.info})
                if cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.steps:
                    record["eval"] = evaluate()
                    if record["eval"]["success_rate"] > best:
                        best = record["eval"]["success_rate"]
                        dp.on_main(save_model_dir, trainee.to_publish, tok, out / "best")
                reporter.log(record)
                if step % cfg.checkpoint_every == 0 or step == cfg.steps:
                    state = {"optimizer": opt.state_dict(), "step": step, "best": best, "zero_streak": zero_streak}
                    dp.check_in_sync(trainee.parameters())
                    dp.on_main(save_checkpoint, out, step, trainee.to_checkpoint, tok, state, cfg.to_yaml())
                bar.update(job, completed=step, description=f"GRPO r̄ {record['reward_mean']:+.2f} "
                                                            f"succ {record['success_rate']:.2f}")

        # 5. The final policy and its held-out evaluation.
        dp.on_main(save_model_dir, trainee.to_publish, tok, out / "model")
        final = evaluate()
        if final["success_rate"] > best or not dp.on_main(lambda: (out / "best").exists()):
            dp.on_main(save_model_dir, trainee.to_publish, tok, out / "best")
        summary = {"env": cfg.env, "policy": cfg.policy, "model_dir": str(out / "model"), "steps": step,
                   "device": str(device), "precision": resolve_precision(cfg.precision, device),
                   "processes": dp.describe(), "stopped_early": stopped,
                   "wall_seconds": round(time.time() - t_start, 1), "eval": final}
        dp.on_main(atomic_write_json, out / "summary.json", summary)
        console.print(f"GRPO done in {summary['wall_seconds']} s: success {final['success_rate']:.2f}, "
                      f"mean reward {final['mean_reward']:.3f}")
        return summary
    finally:
        if agent is not None:
            agent.close()
        if server is not None:
            sampling_policy.close()
            server.close()
        if workers is not None:
            workers.close()


def _local_gateway(policy: HFPolicy) -> Any:
    """The policy behind the gateway on a free loopback port (rollout.engine=gateway)."""
    from ..serve.local import LocalGateway

    return LocalGateway(policy)


def _ray_rollout(cfg: GRPOConfig, model_dir: str) -> Any:
    """Ray actors that sample the env's episodes, or run the user's agent, with copies of the policy
    (rollout.backend=ray)."""
    from ..scale.ray_rollout import RayRollout

    return RayRollout(cfg.env, cfg.env_args, model_dir, cfg.temperature, cfg.max_new_tokens, cfg.rollout.workers,
                      cfg.rollout.ray_address, cfg.rollout.retries, cfg.rollout.worker_timeout_s,
                      cfg.lora.model_dump() if cfg.finetune == "lora" else None,
                      (cfg.agent, cfg.agent_workers, cfg.episode_timeout_s) if cfg.agent else None)


def _vllm(cfg: GRPOConfig, model_dir: Any) -> Any:
    """vLLM on this process's GPU, sampling the env's episodes from `model_dir` (rollout.engine=vllm)."""
    from ..policies.vllm import VLLMPolicy

    return VLLMPolicy(model_dir, SamplingConfig(cfg.temperature, cfg.max_new_tokens), cfg.rollout.vllm_gpu_memory,
                      lora_rank=cfg.lora.r if cfg.finetune == "lora" else None)


def _to_vllm(engine: Any, step: int, trainee: Trainee, out: Path) -> None:
    """Give vLLM the learner's weights after `step`: the adapter alone with LoRA (saved where vLLM reads it), else
    every weight."""
    if trainee.adapter is None:
        engine.load_weights(step, trainee.model)
        return
    adapter_dir = out / "vllm_adapter" / f"step-{step:07d}"
    trainee.adapter.save_pretrained(adapter_dir)
    engine.load_adapter(step, adapter_dir)
    for old in (out / "vllm_adapter").iterdir():  # the versions before: no request names them any more
        if old != adapter_dir:
            shutil.rmtree(old, ignore_errors=True)


def _over_http(server: Any, cfg: GRPOConfig) -> Any:
    """A policy that samples through `server` over HTTP, at the run's temperature and turn budget."""
    from ..policies.gateway import GatewayPolicy

    return GatewayPolicy(server.url, server.gateway.renderer, server.gateway.model_name,
                         SamplingConfig(cfg.temperature, cfg.max_new_tokens))


def _task_pools(cfg: GRPOConfig, env: Any, n_pool: int) -> tuple[list[Any], list[Any]]:
    """The tasks step k samples from (its own slice of `n_pool`) and the held-out ones: the env's splits, or the
    tasks file's lines, in an order shuffled by the seed, repeated as often as the steps need."""
    if not cfg.tasks_file:
        return env.tasks("train", n_pool, cfg.seed), env.tasks("eval", cfg.eval_tasks, cfg.seed)
    train, held = read_tasks_file(cfg.tasks_file)
    rng, pool = random.Random(cfg.seed), []
    while len(pool) < n_pool:
        rng.shuffle(train)
        pool += train
    return pool[:n_pool], held[:cfg.eval_tasks]


def in_groups(trajs: list[Trajectory], group_size: int) -> list[list[Trajectory]]:
    """Trajectories in task order → one group per task: every `group_size` episodes, an agent episode that rewrote
    its history counting once for all its segments (consecutive trajectories with the same `info["episode"]`)."""
    groups: list[list[Trajectory]] = []
    episode, previous = -1, None
    for t in trajs:
        key = t.info.get("episode")
        if key is None or key != previous:
            episode += 1
        previous = key
        if episode // group_size == len(groups):
            groups.append([])
        groups[-1].append(t)
    return groups


def _has_signal(group: list[Trajectory], cfg: GRPOConfig) -> bool:
    """Whether some trajectory of the group that enters the loss (not an infrastructure failure) gets a non-zero
    advantage: their rewards differ, or with `advantage: turn` their per-turn rewards do."""
    kept = [t for t in group if not t.is_infra_failure]
    r = [x for t in kept for x in t.turn_rewards] if cfg.advantage == "turn" else [t.reward for t in kept]
    return bool(r) and max(r) > min(r)


def _token_advantages(groups: list[list[Trajectory]], cfg: GRPOConfig) -> tuple[list[torch.Tensor], list[Trajectory]]:
    """Per-token advantages (aligned with each trajectory's ids) for the trajectories that enter the loss."""
    used: list[Trajectory] = []
    advs: list[torch.Tensor] = []
    kept = [[t for t in g if not t.is_infra_failure] for g in groups]
    every_turn = torch.tensor([x for g in kept for t in g for x in t.turn_rewards] or [0.0], dtype=torch.float64)
    all_turn_std = float(every_turn.std()) if every_turn.numel() > 1 else 0.0
    kept = [g for g in kept if g]
    # an agent episode that rewrote its history is several trajectories (segments): one reward, one advantage
    episodes = [{t.info.get("episode", i): t.reward for i, t in enumerate(g)} for g in kept]
    episode_adv = advantages([torch.tensor(list(e.values())) for e in episodes], cfg.scale_rewards)
    for g, e, a in zip(kept, episodes, episode_adv):
        if cfg.advantage == "trajectory":
            of = dict(zip(e, a.tolist()))
            per_turn = [[of[t.info.get("episode", i)]] * t.n_turns for i, t in enumerate(g)]
        else:
            turn_r = [t.turn_rewards for t in g]
            if cfg.scale_rewards == "batch":  # centred in the group, over one std of every turn in the batch
                centred = turn_advantages(turn_r, len(g), cfg.gamma, scale="none")
                per_turn = [[a / (all_turn_std + 1e-4) for a in adv] for adv in centred]
            else:
                per_turn = turn_advantages(turn_r, len(g), cfg.gamma, scale=cfg.scale_rewards)
        for t, turn_adv in zip(g, per_turn):
            if cfg.mask_truncated and t.info.get("cut_by_tokens"):
                continue  # in the baseline above, out of the loss
            used.append(t)
            advs.append(_spread_over_tokens(t, turn_adv))
    return advs, used


def _spread_over_tokens(t: Trajectory, turn_adv: list[float]) -> torch.Tensor:
    """Give every token of assistant turn k the advantage turn_adv[k]; 0 on non-policy tokens."""
    out = torch.zeros(len(t.ids))
    k, prev = -1, 0
    for i, m in enumerate(t.mask):
        if m and not prev:
            k += 1
        if m:
            out[i] = turn_adv[min(k, len(turn_adv) - 1)]
        prev = m
    return out


def check_logprobs(policy: HFPolicy, env_factory: Any, tasks: list, cfg: GRPOConfig, seed: int) -> float:
    """Sample a few trajectories and recompute their logprobs with a plain forward; raise on a mismatch.

    Train/sample token drift is the most reported bug class of multi-turn RL: this catches it before training."""
    return check_trajectory_logprobs(policy, run_episodes(env_factory, tasks, policy, 2, seed=seed), cfg)


def check_trajectory_logprobs(policy: HFPolicy, trajs: list[Trajectory], cfg: GRPOConfig) -> float:
    """The largest |sampling − recomputed| logprob over the trajectories' policy tokens; raise past the tolerance."""
    trajs = [t for t in trajs if t.ids is not None and any(t.mask)]
    if not trajs:
        return 0.0
    worst = 0.0
    tolerance = cfg.logprob_tolerance
    if tolerance is None:
        tolerance = 1e-3 if resolve_precision(cfg.precision, policy.device) == "fp32" else 0.1
    with torch.no_grad(), autocast(cfg.precision, policy.device):
        logp, _ = sequence_logprobs(policy.model, [t.ids for t in trajs], cfg.temperature,
                                    masks=[t.mask for t in trajs])
    for b, t in enumerate(trajs):
        for i, (m, lp) in enumerate(zip(t.mask, t.logprobs)):
            if not m:
                continue
            diff = abs(float(logp[b, i]) - lp)
            worst = max(worst, diff)
            if diff > tolerance:
                raise LogprobMismatchError(
                    f"trajectory {t.task_id}#{t.sample}: token {i} (id {t.ids[i]}) has sampling logprob {lp:.5f} "
                    f"but {float(logp[b, i]):.5f} recomputed (tolerance {tolerance})")
    return worst


__all__ = ["GRPOConfig", "LogprobMismatchError", "check_logprobs", "train_grpo"]
