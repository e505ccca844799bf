"""Gateway throughput: tool_use episodes by 32 concurrent `openai` clients through the gateway, against the same
episodes in-process, on the same policy, side by side in one run.

Gateway: examples/openai_agent.py's agent, one thread and one client per episode (`grpo --agent`'s path), each
request sampled by the gateway's scheduler in whatever batches the concurrent requests make. In-process:
`run_episodes` over the same tasks (`grpo`'s own path), every running episode in one batch per turn. Both sample at
T = 1 with the same turn budget; the rate is sampled tokens per second of wall time (episodes differ in length, so
tokens, not episodes, are the unit). Repeats alternate between the two.

    python benchmarks/gateway.py [--policy tiny|smollm2-135m|DIR] [--episodes 32] [--tokens 48] [--json FILE]
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
from agentic_rl.train.agent import AgentEpisodes, load_agent

EXAMPLE = Path(__file__).parents[1] / "examples" / "openai_agent.py"


def through_gateway(runner: AgentEpisodes, tasks: list, key: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    trajs = runner.run(tasks, 1, key, temperature=1.0)
    seconds = time.perf_counter() - t0
    assert all(t.outcome == "ok" for t in trajs), [t.info.get("error") for t in trajs if t.outcome != "ok"]
    tokens = sum(sum(t.mask) for t in trajs)
    return tokens / seconds, tokens


def in_process(policy: HFPolicy, tasks: list, seed: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    trajs = run_episodes(lambda: make_env("tool_use"), tasks, policy, seed=seed)
    seconds = time.perf_counter() - t0
    tokens = sum(sum(t.mask) for t in trajs)
    return tokens / seconds, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="tiny", help="tiny (built here), a preset or a model directory")
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=48, help="most new tokens per turn")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    env = make_env("tool_use")
    path = args.policy
    if path == "tiny":
        from agentic_rl.models.tiny.build import build_tiny_for_env
        path = str(build_tiny_for_env(env, Path(tempfile.mkdtemp()) / "tiny"))
    policy = HFPolicy(path, SamplingConfig(temperature=1.0, max_new_tokens=args.tokens))
    tasks = env.tasks("eval", args.episodes)
    rates: dict[str, list[float]] = {"gateway": [], "local": []}
    tokens: dict[str, list[int]] = {"gateway": [], "local": []}
    with AgentEpisodes(load_agent(f"{EXAMPLE}:run"), policy, "tool_use", workers=args.episodes) as runner:
        through_gateway(runner, tasks[:2], "warm-up")
        for k in range(args.repeats):
            for name, (rate, n) in (("gateway", through_gateway(runner, tasks, f"r{k}")),
                                    ("local", in_process(policy, tasks, seed=k))):
                rates[name].append(rate)
                tokens[name].append(n)
    g, loc = statistics.median(rates["gateway"]), statistics.median(rates["local"])
    result = {"policy": args.policy, "episodes": args.episodes, "max_new_tokens": args.tokens,
              "gateway_tokens_per_s": round(g, 1), "local_tokens_per_s": round(loc, 1),
              "gateway_over_local": round(g / loc, 2), "tokens": tokens, "repeats": args.repeats}
    paired = [a / b for a, b in zip(rates["gateway"], rates["local"])]  # each repeat's two paths, side by side
    result["paired_ratio"] = {"median": round(statistics.median(paired), 2), "min": round(min(paired), 2),
                              "max": round(max(paired), 2)}
    for k, v in result.items():
        print(f"{k:22s} {v}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
