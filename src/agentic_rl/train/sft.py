"""SFT: imitate demonstrations. L = −Σ_t log Pθ(y_t | y_<t, x) over the agent's own tokens only (seed §2).

Readable top to bottom: config → demonstrations → render (ids + mask) → Muon + AdamW with warmup + cosine,
gradient clipping and micro-batches → periodic held-out evaluation with the agent loop → atomic checkpoints →
summary.
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field

from ..atomic import atomic_write_json
from ..config import ConfigError, used_only_with
from ..device import autocast, resolve_precision
from ..evaluation.summary import evaluation_episodes, summarize
from ..models.tiny.build import TinyConfig, build_tiny_for_env
from ..policies import HFPolicy, SamplingConfig, TeacherPolicy
from ..runtime.render import Rendered, Renderer, longest_assistant_turn
from ..runtime.rollout import run_episodes
from ..runtime.trajectory import save_jsonl
from ..ui import console, eval_table, progress
from .checkpoint import load_trainer_state, save_checkpoint, save_model_dir
from .config import TrainerConfig
from .distributed import DataParallel
from .logprobs import SharedPrefix, micro_batches, sequence_logprobs
from .lora import Trainee
from .muon import Muon
from .rundir import prepare_run_dir
from .tracking import Reporter


class SFTConfig(TrainerConfig):
    """`agentic-rl sft`: imitate the env's noisy teacher, starting from `policy`."""

    policy: str = "tiny"
    """Starting policy: `tiny` (built here from a config and a locally trained tokenizer), a preset
    (smollm2-135m), a model directory, a .gguf file or a Hub id."""
    tiny: TinyConfig = Field(default_factory=TinyConfig)
    """Size of the tiny model, when policy is `tiny`."""
    demos: int = Field(3000, ge=1)
    """Number of noisy-teacher demonstration episodes, one per train task."""
    noise: dict[str, float] | None = None
    """Mistake rates of the noisy teacher (None: the env's defaults)."""
    only_successful: bool = False
    """Keep only the demonstrations that succeed (rejection-sampling SFT)."""
    epochs: float = Field(5.0, gt=0)
    """Passes over the demonstrations (fractions allowed). 5: on tool_use the success rate on held-out tasks still
    rises up to the fifth pass, and `agentic-rl run` stays within its time budget
    (docs/design-notes.md#sft-defaults)."""
    batch_size: int = Field(32, ge=1)
    """Demonstrations per optimizer step."""
    micro_batch_size: int = Field(32, ge=1)
    """At most this many demonstrations per forward/backward; gradients accumulate up to batch_size."""
    micro_batch_tokens: int | None = Field(2048, ge=1)
    """At most this many padded tokens (beyond the shared prompt prefix) per forward/backward, rows sorted by
    length (None: rows alone decide). One huge forward is slow on CPU, and so is padding; see
    logprobs.micro_batches."""
    lr: float = Field(2e-3, gt=0)
    """Peak learning rate (of AdamW, and of Muon, whose updates are scaled to AdamW's RMS)."""
    optimizer: Literal["adamw", "muon"] = "muon"
    """`muon`: Muon (orthogonalised momentum) on the decoder layers' weight matrices, AdamW on the rest; `adamw`:
    AdamW on everything. Muon is the default: in the same number of steps it reaches a clearly higher held-out
    success on tool_use (docs/design-notes.md#sft-defaults)."""
    muon_dtype: Literal["auto", "bfloat16", "float32"] = "auto"
    """What Muon's Newton–Schulz runs in: `auto` is bfloat16 on CUDA and float32 elsewhere (most CPUs emulate
    bfloat16 matmuls, many times slower: benchmarks/muon_step.py); `bfloat16` is `torch.optim.Muon`'s numerics exactly."""
    weight_decay: float = Field(0.01, ge=0)
    """Decoupled weight decay."""
    warmup_ratio: float = Field(0.05, ge=0, le=1)
    """Fraction of steps with linear warmup; then cosine decay to 10% of the peak."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradient clipping norm."""
    eval_every: int = Field(100, ge=0)
    """Evaluate on held-out tasks every this many steps (0: only at the end)."""
    eval_tasks: int = Field(100, ge=1)
    """Held-out tasks per evaluation."""
    final_eval_samples: int = Field(4, ge=1)
    """Episodes of the trained policy per held-out task in the final `eval` (the periodic ones run one each): one
    sampled episode per task gives a noisy estimate of a policy that samples, and a few more cost little
    (docs/design-notes.md#sft-defaults)."""
    teacher_samples: int = Field(8, ge=1)
    """Episodes of the noisy teacher per held-out task in `teacher_eval`, each with its own draw of mistakes: its
    success rate is an average over its noise, which one draw per task estimates poorly; scripted, the draws are
    cheap (docs/design-notes.md#sft-defaults)."""
    eval_temperature: float = Field(1.0, ge=0)
    """Sampling temperature for evaluation (the policy as it samples; 0 for greedy)."""
    checkpoint_every: int = Field(50, ge=1)
    """Save a resumable checkpoint every this many steps."""
    max_steps: int | None = Field(None, ge=1)
    """Stop after this many optimizer steps (None: as many as `epochs` gives)."""

    def inapplicable(self) -> dict[str, str]:
        out = super().inapplicable()
        if self.policy != "tiny":
            out["tiny"] = f"it sizes the built-in tiny model, but policy={self.policy}, so {{key}}= would be ignored"
        return out | used_only_with(
            ("optimizer", "finetune=full (a LoRA adapter trains with AdamW alone)",
             self.finetune == "full" or self.optimizer == "adamw"),
            ("epochs", "max_steps=null (max_steps sets the length)", self.max_steps is None))


def train_sft(cfg: SFTConfig, out: str | Path, resume: bool = False) -> dict[str, Any]:
    """Train, under one process or several (torchrun / accelerate launch: train/distributed.py)."""
    dp = DataParallel.start(cfg.device)
    try:
        return _train_sft(cfg, Path(out), resume, dp)
    finally:
        dp.close()


def _train_sft(cfg: SFTConfig, out: Path, resume: bool, dp: DataParallel) -> dict[str, Any]:
    t_start = time.time()
    cfg, env_factory, env = cfg.open_env()  # the config as it runs (the env's turn budget filled in) is the one saved
    ckpt = dp.on_main(prepare_run_dir, "SFT", cfg, out, resume)  # rank 0 writes; every rank resumes

    # 1. The starting policy: the tiny model is built from a config, its tokenizer trained on the env's text.
    init = dp.on_main(lambda: build_tiny_for_env(env, out / "init", seed=cfg.seed, vocab_size=cfg.tiny.vocab_size,
                                                 **cfg.tiny.model_dump(exclude={"vocab_size"}))
                      ) if cfg.policy == "tiny" else Path(cfg.policy)
    lora = cfg.finetune == "lora"  # a LoRA checkpoint holds the adapter: the model comes from `init` again
    policy = HFPolicy(init if lora else ckpt or init, SamplingConfig(cfg.eval_temperature, cfg.max_new_tokens),
                      device=cfg.device, dtype=torch.float32, precision=cfg.precision)
    model, tok = policy.model, policy.tokenizer
    trainee = Trainee.prepare(model, cfg.finetune, cfg.lora, resume_from=ckpt, seed=cfg.seed)
    renderer = Renderer(tok)
    device = policy.device
    console.print(f"training on {device} in {resolve_precision(cfg.precision, device)}")

    # 2. Demonstrations: the noisy teacher on train tasks, rendered once; the loss mask is the assistant's tokens.
    teacher = TeacherPolicy(cfg.noise if cfg.noise is not None else dict(env.default_noise))
    #    With several processes each runs a share of them, and every one gets them all.
    demos = dp.map_shards(lambda tasks: run_episodes(env_factory, tasks, teacher, seed=cfg.seed),
                          env.tasks("train", cfg.demos, cfg.seed))
    dp.on_main(save_jsonl, demos, out / "demos.jsonl")
    if cfg.only_successful:
        demos = [d for d in demos if d.success]
    data = [renderer.render(d.messages) for d in demos]
    check_turn_budget(data, cfg.max_new_tokens)
    console.print(f"{len(data)} demonstrations, {sum(len(d.ids) for d in data)} tokens "
                  f"({sum(sum(d.mask) for d in data)} trained on); teacher success "
                  f"{sum(d.success for d in demos) / max(len(demos), 1):.2f}")

    # 3. Optimisers (see build_optimizers) and one schedule for each: linear warmup, cosine decay to 10 % of the peak.
    steps_per_epoch = math.ceil(len(data) / cfg.batch_size)
    total = cfg.max_steps if cfg.max_steps is not None else max(1, int(cfg.epochs * steps_per_epoch))
    opts = build_optimizers(trainee, cfg)
    warm = max(1, int(cfg.warmup_ratio * total))
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: min(1.0, (s + 1) / warm) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, max(0, s - warm) / max(1, total - warm)))))) for o in opts]
    step = 0
    if ckpt is not None:
        state = load_trainer_state(ckpt)
        for o, sc, o_state, sc_state in zip(opts, scheds, state["optimizers"], state["schedulers"], strict=True):
            o.load_state_dict(o_state)
            sc.load_state_dict(sc_state)
        step = state["step"]
        console.print(f"resumed from {ckpt.name} at step {step}")

    # 4. Train. The order of demonstrations is a function of (seed, epoch) alone, so a resumed run sees the same.
    #    With several processes each trains on its rows of every batch and the gradients are summed.
    eval_tasks = env.tasks("eval", cfg.eval_tasks, cfg.seed)

    def evaluate(who: Any, samples: int = 1) -> dict[str, Any]:
        return summarize(dp.map_shards(lambda tasks: evaluation_episodes(env_factory, tasks, who, cfg.seed, samples),
                                       eval_tasks))

    model.train()
    with Reporter(out, cfg.report_to, cfg.model_dump(mode="json"), name=f"sft:{out.name}", enabled=dp.main) \
            as reporter, progress() as bar:
        job = bar.add_task("SFT", total=total, completed=step)
        while step < total:
            epoch, k = divmod(step, steps_per_epoch)
            order = list(range(len(data)))
            random.Random(cfg.seed * 1000 + epoch).shuffle(order)
            batch = [data[i] for i in order[k * cfg.batch_size:(k + 1) * cfg.batch_size]]
            n_tokens = sum(sum(d.mask) for d in batch)  # the whole batch's, on every rank
            mine = [batch[i] for i in dp.rows(len(batch))]
            loss_sum = 0.0
            with autocast(cfg.precision, device):
                shared = SharedPrefix(model, [d.ids for d in mine])  # the system prompt, run once for the step
            for rows in micro_batches([d.ids for d in mine], cfg.micro_batch_size, cfg.micro_batch_tokens):
                micro = [mine[i] for i in rows]
                with autocast(cfg.precision, device):
                    logp, _ = sequence_logprobs(model, [d.ids for d in micro], masks=[d.mask for d in micro],
                                                prefix=shared)  # (B, T)
                mask = torch.zeros(logp.shape, dtype=logp.dtype)
                for b, d in enumerate(micro):
                    mask[b, : len(d.mask)] = torch.tensor(d.mask, dtype=logp.dtype)
                mask = mask.to(device)
                # −Σ log p over the assistant's tokens, normalised by the batch's assistant-token count
                loss = -(logp * mask).sum() / n_tokens
                loss.backward()
                loss_sum += loss.item()
            shared.backward()
            dp.reduce_gradients(trainee.parameters())
            loss_sum = dp.sum({"loss": loss_sum})["loss"]
            grad_norm = torch.nn.utils.clip_grad_norm_(trainee.parameters(), cfg.max_grad_norm)
            for o, sc in zip(opts, scheds, strict=True):
                o.step()
                sc.step()
                o.zero_grad(set_to_none=True)
            step += 1
            record: dict[str, Any] = {"step": step, "loss": loss_sum, "lr": scheds[0].get_last_lr()[0],
                                      "grad_norm": float(grad_norm), "epoch": step / steps_per_epoch}
            if cfg.eval_every and step % cfg.eval_every == 0 and step < total:
                record["eval"] = evaluate(policy)
                console.print(f"step {step}: loss {loss_sum:.3f}, eval success {record['eval']['success_rate']:.2f}")
            reporter.log(record)
            if step % cfg.checkpoint_every == 0 or step == total:
                dp.check_in_sync(trainee.parameters())
                dp.on_main(save_checkpoint, out, step, trainee.to_checkpoint, tok, _state(opts, scheds, step),
                           cfg.to_yaml())
            bar.update(job, completed=step, description=f"SFT loss {loss_sum:.3f}")

    # 5. The final policy, its held-out evaluation, and the noisy teacher on the same tasks for comparison (each
    #    averaged over several sampled episodes per task: `final_eval_samples`, `teacher_samples`).
    dp.on_main(save_model_dir, trainee.to_publish, tok, out / "model")
    final = evaluate(policy, cfg.final_eval_samples)
    teacher_eval = evaluate(teacher, cfg.teacher_samples)
    summary = {"env": cfg.env, "policy": cfg.policy, "model_dir": str(out / "model"), "steps": step,
               "device": str(device), "precision": resolve_precision(cfg.precision, device),
               "processes": dp.describe(), "wall_seconds": round(time.time() - t_start, 1), "eval": final,
               "teacher_eval": teacher_eval}
    dp.on_main(atomic_write_json, out / "summary.json", summary)
    console.print(eval_table({"noisy teacher": teacher_eval, "sft": final}))
    console.print(f"SFT done in {summary['wall_seconds']} s: success {final['success_rate']:.2f} "
                  f"(noisy teacher {teacher_eval['success_rate']:.2f}), mean reward {final['mean_reward']:.3f}")
    return summary


def check_turn_budget(data: list[Rendered], max_new_tokens: int) -> None:
    """Refuse demonstrations with an assistant turn longer than the sampler's per-turn limit.

    SFT would teach turns the policy can never finish when it samples: every such turn is cut at the limit (codefix's
    long edit_file calls are the usual case: docs/design-notes.md#codefix-turn-budget)."""
    longest = longest_assistant_turn(data)
    if longest > max_new_tokens:
        raise ConfigError(f"a demonstration has an assistant turn of {longest} tokens (with its end-of-turn token), "
                          f"but max_new_tokens is {max_new_tokens}: sampling would cut it off. Set "
                          f"max_new_tokens={longest} or more.")


def build_optimizers(trainee: Trainee, cfg: SFTConfig) -> list[torch.optim.Optimizer]:
    """AdamW over everything, or Muon over the decoder layers' weight matrices and AdamW over the rest. A LoRA
    adapter trains with AdamW alone (its A and B are low-rank factors, not the matrices Muon orthogonalises).

    Muon orthogonalises each matrix's momentum (Newton–Schulz), so every direction of the update moves at the same
    rate instead of the few that dominate the gradient. Embeddings (tied to the output layer), norms and biases are
    not matrices acting on hidden states and stay with AdamW, as in Muon's reference setup. `match_rms_adamw` scales
    Muon's update to AdamW's typical RMS, so both use `lr` (Moonshot, "Muon is Scalable for LLM Training")."""
    if cfg.optimizer == "adamw" or trainee.adapter is not None:
        return [torch.optim.AdamW(trainee.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))]
    hidden: list[torch.nn.Parameter] = []
    rest: list[torch.nn.Parameter] = []
    for name, p in trainee.model.named_parameters():
        (hidden if p.ndim == 2 and ".layers." in name else rest).append(p)
    return [torch.optim.AdamW(rest, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95)),
            Muon(hidden, lr=cfg.lr, weight_decay=cfg.weight_decay, adjust_lr_fn="match_rms_adamw",
                 ns_dtype=None if cfg.muon_dtype == "auto" else getattr(torch, cfg.muon_dtype))]


def _state(opts: list[torch.optim.Optimizer], scheds: list[Any], step: int) -> dict[str, Any]:
    return {"optimizers": [o.state_dict() for o in opts], "schedulers": [s.state_dict() for s in scheds], "step": step}
