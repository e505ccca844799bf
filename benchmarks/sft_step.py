"""SFT step time: micro-batches in arrival order vs rows sorted by length under a token budget, and the shared
system prompt run once per micro-batch vs once per step, and fp32 vs bf16 matrix products.

An SFT step on tool_use runs 32 noisy-teacher demonstrations (forward + backward). Demonstrations differ a lot in
length, so micro-batches taken in arrival order are mostly padding; `logprobs.micro_batches` sorts the rows by
length and packs them under a padded-token budget. `sequence_logprobs` runs the rows' common prefix (the system
prompt) once per micro-batch; with a `logprobs.SharedPrefix` (what sft.py and grpo.py use) it runs once per step.
Last, that step under bf16 autocast (sft.py's `precision=bf16`). All four are measured interleaved in one run, on
the same batches; the gradients are the same sum (in bf16, to bf16's rounding). The bf16 column flatters bf16 on a
CPU: over a real run its gain fades while oneDNN's per-shape kernel cache grows (docs/design-notes.md#precision-bf16-on-cpu has the numbers).

    python benchmarks/sft_step.py [--steps 10] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from agentic_rl.device import autocast
from agentic_rl.envs import make_env
from agentic_rl.models.tiny.build import build_tiny_for_env
from agentic_rl.policies import HFPolicy, TeacherPolicy
from agentic_rl.runtime.render import Renderer
from agentic_rl.runtime.rollout import run_episodes
from agentic_rl.train.logprobs import SharedPrefix, common_prefix_len, micro_batches, sequence_logprobs


def step_seconds(model, batch, groups: list[list[int]], prefix_once: bool = False, bf16: bool = False) -> float:
    """Seconds for one forward/backward over `batch` in the micro-batches `groups` (row indices); with
    `prefix_once`, the batch's common prefix runs once for all of them (a SharedPrefix); with `bf16`, the forwards
    run under bf16 autocast."""
    t0 = time.perf_counter()
    dev, precision = torch.device("cpu"), "bf16" if bf16 else "fp32"
    with autocast(precision, dev):
        shared = SharedPrefix(model, [d.ids for d in batch]) if prefix_once else None
    for rows in groups:
        micro = [batch[i] for i in rows]
        with autocast(precision, dev):
            logp, _ = sequence_logprobs(model, [d.ids for d in micro], masks=[d.mask for d in micro],
                                        prefix=shared)
        logp.sum().backward()
    if shared is not None:
        shared.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10, help="batches measured (each with both micro-batchings)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rows", type=int, default=16, help="rows per micro-batch in arrival order (the old default)")
    ap.add_argument("--tokens", type=int, default=2048, help="padded-token budget of the sorted micro-batches")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    env = make_env("tool_use")
    policy = HFPolicy(build_tiny_for_env(env, Path(tempfile.mkdtemp()) / "tiny"))
    model = policy.model
    model.train()
    demos = run_episodes(lambda: make_env("tool_use"), env.tasks("train", args.steps * args.batch, 0),
                         TeacherPolicy(dict(env.default_noise)), seed=0)
    renderer = Renderer(policy.tokenizer)
    data = [renderer.render(d.messages) for d in demos]
    batches = [data[k * args.batch:(k + 1) * args.batch] for k in range(args.steps)]

    def arrival(batch):
        return [list(range(j, min(j + args.rows, len(batch)))) for j in range(0, len(batch), args.rows)]

    def by_length(batch):
        return micro_batches([d.ids for d in batch], args.batch, args.tokens)

    step_seconds(model, batches[0], arrival(batches[0]))  # warm-up
    step_seconds(model, batches[0], by_length(batches[0]), prefix_once=True, bf16=True)  # and the bf16 kernels
    times: dict[str, list[float]] = {"arrival": [], "sorted": [], "prefix_once": [], "bf16": []}
    for batch in batches:  # interleaved: a 2-core machine drifts between back-to-back runs
        times["arrival"].append(step_seconds(model, batch, arrival(batch)))
        times["sorted"].append(step_seconds(model, batch, by_length(batch)))
        times["prefix_once"].append(step_seconds(model, batch, by_length(batch), prefix_once=True))
        times["bf16"].append(step_seconds(model, batch, by_length(batch), prefix_once=True, bf16=True))
    # Positions run beyond each batch's shared prefix (which is computed once), padded vs real.
    shared = [common_prefix_len([d.ids for d in b]) for b in batches]
    real = sum(len(d.ids) - p for b, p in zip(batches, shared) for d in b)
    padded = {name: sum(len(g) * (max(len(b[i].ids) for i in g) - p) for b, p in zip(batches, shared) for g in fn(b))
              for name, fn in (("arrival", arrival), ("sorted", by_length))}
    mean = {k: sum(v) / len(v) for k, v in times.items()}
    result = {"arrival_s_per_step": round(mean["arrival"], 3), "sorted_s_per_step": round(mean["sorted"], 3),
              "speedup": round(mean["arrival"] / mean["sorted"], 2),
              "prefix_once_s_per_step": round(mean["prefix_once"], 3),
              "prefix_once_speedup": round(mean["sorted"] / mean["prefix_once"], 2),
              "bf16_s_per_step": round(mean["bf16"], 3), "bf16_speedup": round(mean["prefix_once"] / mean["bf16"], 2),
              "padded_over_real_suffix_tokens": {k: round(v / real, 2) for k, v in padded.items()},
              "batch": args.batch, "rows": args.rows, "tokens": args.tokens, "steps": args.steps,
              "threads": torch.get_num_threads()}
    print(f"arrival order, {args.rows} rows per micro-batch: {mean['arrival']:.3f} s/step")
    print(f"sorted by length, ≤ {args.tokens} padded tokens:  {mean['sorted']:.3f} s/step")
    print(f"  + the system prompt once per step:    {mean['prefix_once']:.3f} s/step")
    print(f"speedup = {result['speedup']}  (padded/real positions after the prompt: "
          f"{result['padded_over_real_suffix_tokens']}); prefix once: {result['prefix_once_speedup']}× more")
    print(f"  + bf16 matrix products (autocast):    {mean['bf16']:.3f} s/step  ({result['bf16_speedup']}× more, "
          f"on these few batches; not over a real run, see docs/design-notes.md)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
