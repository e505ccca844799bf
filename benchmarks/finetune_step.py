"""SFT step time on a real model: full fine-tuning against a LoRA adapter, on the same batches, interleaved.

One step = forward + backward over a batch of tool_use noisy-teacher demonstrations (the shared system prompt run
once, `logprobs.SharedPrefix`, as sft.py does) + the optimizer's step (AdamW over every weight, or over the
adapter alone). Medians over `--steps` batches; both modes see each batch in turn, so a slow moment of the machine
hits both.

    python benchmarks/finetune_step.py [--policy smollm2-135m] [--batch 16] [--steps 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from agentic_rl.envs import make_env
from agentic_rl.policies import HFPolicy, TeacherPolicy
from agentic_rl.runtime.rollout import run_episodes
from agentic_rl.train.logprobs import SharedPrefix, micro_batches, sequence_logprobs
from agentic_rl.train.lora import LoRASettings, Trainee


def step_seconds(trainee: Trainee, opt: torch.optim.Optimizer, batch: list, micro_tokens: int) -> float:
    t0 = time.perf_counter()
    model = trainee.model
    n_tokens = sum(sum(r.mask) for r in batch)
    shared = SharedPrefix(model, [r.ids for r in batch])
    for rows in micro_batches([r.ids for r in batch], len(batch), micro_tokens):
        micro = [batch[i] for i in rows]
        logp, _ = sequence_logprobs(model, [r.ids for r in micro], masks=[r.mask for r in micro], prefix=shared)
        mask = torch.zeros_like(logp)
        for b, r in enumerate(micro):
            mask[b, : len(r.mask)] = torch.tensor(r.mask, dtype=logp.dtype)
        (-(logp * mask).sum() / n_tokens).backward()
    shared.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="smollm2-135m")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--micro-batch-tokens", type=int, default=2048)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    env = make_env("tool_use")
    demos = run_episodes(lambda: make_env("tool_use"), env.tasks("train", args.batch * args.steps), TeacherPolicy(
        dict(env.default_noise)))
    full = HFPolicy(args.policy)
    lora_policy = HFPolicy(args.policy)
    rendered = [full.renderer.render(d.messages) for d in demos]
    modes = {"full": Trainee(full.model.train()),
             "lora": Trainee.prepare(lora_policy.model.train(), "lora", LoRASettings(r=args.lora_r))}
    opts = {k: torch.optim.AdamW(t.parameters(), lr=1e-5) for k, t in modes.items()}
    times: dict[str, list[float]] = {k: [] for k in modes}
    for s in range(args.steps):
        batch = rendered[s * args.batch:(s + 1) * args.batch]
        for k, t in modes.items():
            times[k].append(step_seconds(t, opts[k], batch, args.micro_batch_tokens))
    med = {k: statistics.median(v[1:] if len(v) > 2 else v) for k, v in times.items()}  # the first step warms up
    result = {"policy": args.policy, "batch": args.batch, "steps": args.steps,
              "tokens_per_demo": round(sum(len(r.ids) for r in rendered) / len(rendered), 1),
              "full_step_s": round(med["full"], 3), "lora_step_s": round(med["lora"], 3),
              "lora_speedup": round(med["full"] / med["lora"], 2),
              "full_trainable": sum(p.numel() for p in modes["full"].parameters()),
              "lora_trainable": sum(p.numel() for p in modes["lora"].parameters()), "lora_r": args.lora_r}
    for k, v in result.items():
        print(f"{k:20s} {v}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
