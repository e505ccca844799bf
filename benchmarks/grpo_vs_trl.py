"""Seconds per GRPO step: ours and TRL's GRPOTrainer, side by side in one run.

Same model (same weights), the same single-turn tool_use prompts, the same reward (the env's first-turn reward),
the same G, B, max completion tokens, μ = 1, β = 0, fp32, token-mean loss, ε = 0.2 / 0.28; full fine-tuning, or
the same LoRA adapter on both sides (`--lora-r`). TRL is a benchmark-only extra: `pip install -e '.[bench]'`.

    python benchmarks/grpo_vs_trl.py [--steps 6] [--policy tiny|smollm2-135m|DIR] [--lora-r 16] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from agentic_rl.envs import make_env
from agentic_rl.models import resolve_model
from agentic_rl.models.tiny.build import build_tiny_for_env
from agentic_rl.train.grpo import GRPOConfig, train_grpo
from agentic_rl.train.lora import LoRASettings


def ours(model_dir: Path, args: argparse.Namespace, out: Path) -> float:
    lora = {"finetune": "lora", "lora": LoRASettings(r=args.lora_r, alpha=2 * args.lora_r)} if args.lora_r else {}
    cfg = GRPOConfig(policy=str(model_dir), env_args={"max_turns": 1}, steps=args.steps, tasks_per_step=args.b,
                     group_size=args.g, max_new_tokens=args.max_tokens, lr=args.lr, beta=0.0, mu=1,
                     loss_agg="token_mean", epsilon_low=0.2, epsilon_high=0.28, eval_every=0, eval_tasks=8,
                     checkpoint_every=10**6, zero_variance_patience=10**6, micro_batch_size=16, seed=args.seed,
                     dynamic_sampling=False, **lora)  # TRL samples each batch once; so must we, to compare like with like
    train_grpo(cfg, out)
    secs = [json.loads(line)["seconds"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    return sum(secs[1:]) / len(secs[1:])  # the first step warms up allocators and caches


def trl(model_dir: Path, args: argparse.Namespace, out: Path) -> float:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    env = make_env("tool_use", max_turns=1)
    tasks = env.tasks("train", args.steps * args.b, args.seed)
    data = Dataset.from_list([{"prompt": env.reset(t), "task_index": i} for i, t in enumerate(tasks)])

    def reward(prompts, completions, task_index, **_):  # the env's reward for the single turn
        out = []
        for c, i in zip(completions, task_index):
            e = make_env("tool_use", max_turns=1)
            e.reset(tasks[i])
            out.append(e.step(c[0]["content"] if isinstance(c, list) else c).reward)
        return out

    class Timer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self.t = 0.0

        def on_step_begin(self, *a, **k):
            self.t = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.times.append(time.perf_counter() - self.t)

    timer = Timer()
    cfg = TRLConfig(output_dir=str(out), per_device_train_batch_size=args.b * args.g, num_generations=args.g,
                    max_completion_length=args.max_tokens, beta=0.0, num_iterations=1, learning_rate=args.lr,
                    max_steps=args.steps, logging_steps=1, report_to="none", use_cpu=True, bf16=False,
                    temperature=1.0, save_strategy="no", loss_type="dapo", scale_rewards="group", epsilon=0.2,
                    epsilon_high=0.28, seed=args.seed, disable_tqdm=True, gradient_accumulation_steps=1,
                    shuffle_dataset=False)
    peft = None
    if args.lora_r:
        from peft import LoraConfig

        peft = LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                          reward_funcs=[reward], args=cfg, train_dataset=data, peft_config=peft,
                          processing_class=AutoTokenizer.from_pretrained(model_dir), callbacks=[timer])
    trainer.train()
    return sum(timer.times[1:]) / len(timer.times[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--b", type=int, default=8, help="prompts per step")
    ap.add_argument("--g", type=int, default=8, help="samples per prompt")
    ap.add_argument("--max-tokens", type=int, default=32, help="max completion tokens")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--policy", default="tiny", help="tiny (a fresh tiny model) or any model spec: a preset such as "
                                                     "smollm2-135m, a model directory, a .gguf file")
    ap.add_argument("--lora-r", type=int, default=0, help="train a LoRA adapter of this rank on both sides (0: full)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    model_dir = build_tiny_for_env(make_env("tool_use"), tmp / "tiny") if args.policy == "tiny" else \
        resolve_model(args.policy)
    t_ours = ours(model_dir, args, tmp / "ours")
    t_trl = trl(model_dir, args, tmp / "trl")
    result = {"ours_s_per_step": round(t_ours, 3), "trl_s_per_step": round(t_trl, 3),
              "speedup": round(t_trl / t_ours, 2), "settings": {k: v for k, v in vars(args).items() if k != "json"}
              | {"model": str(model_dir), "mu": 1, "beta": 0.0, "dtype": "float32", "threads": torch.get_num_threads()}}
    print(f"ours {t_ours:.3f} s/step, TRL {t_trl:.3f} s/step, speedup {result['speedup']}x")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
