"""Rollout backends side by side: episodes per second with `rollout.backend=local` (one process samples every
episode in lock-step) against `ray` with N workers (each samples its share, its env steps beside the others'
generation), on the same tasks and seeds, with the machine's CPU utilisation during each (/proc/stat: every
process, the workers included). Repeats alternate between the two. With `--grpo-steps N`: GRPO steps per minute on
Ray workers with `rollout.overlap=1` (the next step sampled while this one trains) against without.

    python benchmarks/rollout_backends.py --policy DIR [--env codefix] [--tasks 8] [--group 2] [--workers 2]
                                          [--tokens 96] [--repeats 2] [--grpo-steps 0] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from agentic_rl.envs import make_env
from agentic_rl.policies import HFPolicy, SamplingConfig
from agentic_rl.runtime.rollout import run_episodes
from agentic_rl.scale.ray_rollout import RayRollout


def cpu() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine so far."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def timed(run) -> tuple[float, float, int]:
    """(seconds, CPU utilisation over them, episodes) of one call of `run`."""
    (b0, t0), w0 = cpu(), time.perf_counter()
    n = len(run())
    (b1, t1), w1 = cpu(), time.perf_counter()
    return w1 - w0, (b1 - b0) / max(t1 - t0, 1), n


def grpo_steps_per_minute(args: argparse.Namespace) -> dict[str, object]:
    """GRPO on Ray workers, overlap 0 then 1: steps per minute over the steps' own seconds (sampling to update),
    the machine's CPU utilisation over each run."""
    from agentic_rl.config import load_config
    from agentic_rl.train.grpo import GRPOConfig, train_grpo

    out: dict[str, object] = {}
    for overlap in (0, 1):
        cfg = load_config(GRPOConfig, overrides=[
            f"env={args.env}", f"policy={args.policy}", f"steps={args.grpo_steps}", f"tasks_per_step={args.tasks}",
            f"group_size={max(args.group, 2)}", "eval_tasks=2", "eval_every=0", "rollout.backend=ray",
            f"rollout.workers={args.workers}", f"rollout.overlap={overlap}"])
        run = Path(tempfile.mkdtemp()) / "run"
        b0, t0 = cpu()
        train_grpo(cfg, run)
        b1, t1 = cpu()
        steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        seconds = sum(m["seconds"] for m in steps)
        out[f"overlap_{overlap}"] = {"steps_per_minute": round(60 * len(steps) / seconds, 2),
                                     "step_seconds": [m["seconds"] for m in steps],
                                     "cpu_utilisation": round((b1 - b0) / max(t1 - t0, 1), 2)}
    rates = [out[f"overlap_{k}"]["steps_per_minute"] for k in (0, 1)]  # type: ignore[index]
    out["overlap_over_none"] = round(rates[1] / rates[0], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", required=True, help="a model directory (an SFT model of the env samples real turns)")
    ap.add_argument("--env", default="codefix")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--group", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=None, help="most new tokens per turn (default: the env's)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--grpo-steps", type=int, default=0, help="also time GRPO with and without rollout.overlap=1")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    env = make_env(args.env)
    tokens = args.tokens or env.max_new_tokens
    tasks = env.tasks("eval", args.tasks)
    policy = HFPolicy(args.policy, SamplingConfig(1.0, tokens))
    rows: dict[str, list[tuple[float, float, int]]] = {"local": [], "ray": []}
    with RayRollout(args.env, {}, args.policy, 1.0, tokens, args.workers) as workers:
        workers.run(tasks[:1], 1, seed=0)  # the actors load their model before the clock starts
        for k in range(args.repeats):
            rows["local"].append(timed(lambda k=k: run_episodes(lambda: make_env(args.env), tasks, policy,
                                                                args.group, seed=k)))
            rows["ray"].append(timed(lambda k=k: workers.run(tasks, args.group, seed=k)))
    rate = {name: statistics.median(n / s for s, _, n in r) for name, r in rows.items()}
    result = {"env": args.env, "policy": args.policy, "episodes": args.tasks * args.group, "workers": args.workers,
              "local_episodes_per_s": round(rate["local"], 3), "ray_episodes_per_s": round(rate["ray"], 3),
              "ray_over_local": round(rate["ray"] / rate["local"], 2),
              "cpu_utilisation": {name: [round(u, 2) for _, u, _ in r] for name, r in rows.items()},
              "seconds": {name: [round(s, 2) for s, _, _ in r] for name, r in rows.items()}}
    if args.grpo_steps:
        result["grpo"] = grpo_steps_per_minute(args)
    for key, value in result.items():
        print(f"{key:22s} {value}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
