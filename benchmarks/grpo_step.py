"""GRPO step time on toolcall with a real model: the grouped learner (each group's prompt once) against the per-row
path (each row runs its own prompt), on the same sampled batch, in one run.

One step = sampling B tasks × G episodes (the policy in this process, T = 1, toolcall's turn budget) + the learner:
one pass of the loss over the batch with the reference model's KL (β > 0, as toolcall's recipe), forward and
backward, and the optimizer's step. Both learner paths start from the same weights (restored between them) and
train on the same trajectories, so only the path differs; each repeat samples a new batch and alternates which path
goes first. `learner_over_per_row` and `step_over_per_row` are seconds ratios (grouped / per-row), the median of the
repeats with min and max; CPU steal (/proc/stat) is recorded beside the wall times.

    python benchmarks/grpo_step.py [--policy smollm2-135m] [--tasks 8] [--group 4] [--repeats 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path

import torch

from agentic_rl.envs import make_env
from agentic_rl.policies import HFPolicy, SamplingConfig
from agentic_rl.runtime.rollout import run_episodes
from agentic_rl.train.grpo import GRPOConfig, _token_advantages, in_groups
from agentic_rl.train.learner import learner_plan, loss_backward


def steal() -> tuple[int, int]:
    """(steal jiffies, all jiffies) of the whole machine, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return fields[7], sum(fields)


def learner_seconds(model, ref, used, adv, cfg: GRPOConfig) -> float:
    """One optimizer step over `used` along `cfg.shared_prompt`'s path."""
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    stats = {"loss": 0.0, "clip_frac": 0.0, "kl_old": 0.0, "entropy": 0.0, "kl_ref": 0.0}
    t0 = time.perf_counter()
    model.train()
    plan = learner_plan(used, list(range(len(used))), cfg)
    loss_backward(model, ref, used, adv, plan, cfg, sum(sum(t.mask) for t in used), stats)
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def spread(xs: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="smollm2-135m")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=176)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    policy = HFPolicy(args.policy, SamplingConfig(1.0, args.max_new_tokens))
    model = policy.model
    ref = HFPolicy(args.policy).model.eval().requires_grad_(False)
    start = copy.deepcopy(model.state_dict())
    env = make_env("toolcall")
    pool = env.tasks("train", args.tasks * args.repeats, seed=1)
    # every sampled row enters the loss (turns cut by the token limit too), so the learner's work is the whole batch's
    base = dict(env="toolcall", beta=0.04, lr=2e-5, max_new_tokens=args.max_new_tokens, mask_truncated=False)
    cfgs = {path: GRPOConfig(shared_prompt=path, **base) for path in ("group", "batch")}
    rows = []
    s0 = steal()
    for r in range(args.repeats):
        model.load_state_dict(start)
        model.eval()
        t0 = time.perf_counter()
        with torch.no_grad():
            trajs = run_episodes(lambda: make_env("toolcall"), pool[r * args.tasks:(r + 1) * args.tasks], policy,
                                 args.group, seed=r)
        sample_s = time.perf_counter() - t0
        adv, used = _token_advantages(in_groups(trajs, args.group), cfgs["group"])
        seconds = {}
        for path in (("group", "batch") if r % 2 == 0 else ("batch", "group")):
            model.load_state_dict(start)
            seconds[path] = learner_seconds(model, ref, used, adv, cfgs[path])
        prompt = [len(t.ids) - sum(t.mask) for t in used]
        rows.append({"sample_s": round(sample_s, 2), "learner_group_s": round(seconds["group"], 2),
                     "learner_per_row_s": round(seconds["batch"], 2), "trajectories": len(used),
                     "cut_by_tokens": sum(bool(t.info.get("cut_by_tokens")) for t in trajs),
                     "tokens": sum(len(t.ids) for t in used),
                     "policy_tokens": sum(sum(t.mask) for t in used), "mean_non_policy_tokens": round(
                         sum(prompt) / max(len(prompt), 1), 1)})
        print(json.dumps(rows[-1]), flush=True)
    s1 = steal()
    out = {"policy": args.policy, "tasks": args.tasks, "group": args.group, "repeats": args.repeats,
           "learner_over_per_row": spread([x["learner_group_s"] / x["learner_per_row_s"] for x in rows]),
           "step_over_per_row": spread([(x["sample_s"] + x["learner_group_s"]) / (x["sample_s"] + x["learner_per_row_s"])
                                        for x in rows]),
           "cpu_steal_pct": round(100 * (s1[0] - s0[0]) / max(s1[1] - s0[1], 1), 3), "repeats_detail": rows}
    print(json.dumps({k: v for k, v in out.items() if k != "repeats_detail"}))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
