"""Rollout throughput: our sampler against transformers' `model.generate`, on the same model, prompts and lengths.

A batch of 32 rows (8 tool_use tasks × 4 samples, as a GRPO group samples them) generates exactly `--tokens` new
tokens per row at temperature 1 on both sides: end-of-turn is suppressed (a logit bias on the output layer, for both)
so neither side stops early. Ours: one shared prompt prefill per task, the in-place KV cache, packed GQA attention.
`generate`: the 32 prompts left-padded, its own cache and attention. Repeats alternate between the two.

    python benchmarks/rollout_vs_hf.py [--policy smollm2-135m] [--tasks 8] [--group 4] [--tokens 64] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from agentic_rl.envs import make_env
from agentic_rl.policies import HFPolicy, SamplingConfig


def ours(policy: HFPolicy, env, tasks: list, group: int, tokens: int) -> float:
    policy.sampling = SamplingConfig(temperature=1.0, max_new_tokens=tokens, max_context=8192)
    rows = [t for t in tasks for _ in range(group)]
    convs = [env.reset(t) for t in rows]
    session = policy.start(env, rows, [g for _ in tasks for g in range(group)], seed=0)
    t0 = time.perf_counter()
    session.act(list(range(len(rows))), convs)
    return len(rows) * tokens / (time.perf_counter() - t0)


def hf_generate(policy: HFPolicy, env, tasks: list, group: int, tokens: int) -> float:
    tok = policy.tokenizer
    prompts = [policy.renderer.render(env.reset(t), add_generation_prompt=True).ids for t in tasks for _ in range(group)]
    width = max(len(p) for p in prompts)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    t0 = time.perf_counter()
    with torch.no_grad():
        out = policy.model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                                    max_new_tokens=tokens, min_new_tokens=tokens, pad_token_id=pad)
    assert out.shape[1] - width == tokens
    return len(prompts) * tokens / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="smollm2-135m")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    env = make_env("tool_use")
    policy = HFPolicy(args.policy)
    plain = HFPolicy(args.policy)  # transformers' own attention for generate (ours swaps in the packed kind)
    plain.model.set_attn_implementation("sdpa")
    tasks = env.tasks("eval", args.tasks)
    bias = torch.zeros(policy.model.config.vocab_size)
    bias[policy.renderer.eos_id] = -1e9  # no early stop on either side
    hooks = [p.model.lm_head.register_forward_hook(lambda m, i, o: o + bias) for p in (policy, plain)]
    rates: dict[str, list[float]] = {"ours": [], "hf": []}
    try:
        for _ in range(args.repeats):
            rates["ours"].append(ours(policy, env, tasks, args.group, args.tokens))
            rates["hf"].append(hf_generate(plain, env, tasks, args.group, args.tokens))
    finally:
        for h in hooks:
            h.remove()
    o, h = statistics.median(rates["ours"]), statistics.median(rates["hf"])
    result = {"policy": args.policy, "rows": args.tasks * args.group, "new_tokens": args.tokens,
              "ours_tokens_per_s": round(o, 1), "hf_tokens_per_s": round(h, 1), "speedup": round(o / h, 2),
              "repeats": args.repeats}
    for k, v in result.items():
        print(f"{k:18s} {v}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
