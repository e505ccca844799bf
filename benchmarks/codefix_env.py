"""Latency of the codefix environment: run_test (warm fork server, sandboxed), grading, plain pytest, an episode.

All measured side by side in one run, interleaved, medians reported:
  run_test_median_ms      the env's run_test tool (sandbox on: own uid, namespaces, rlimits) through the warm runner
  cold_run_test_median_ms the same jail with a fresh interpreter per run (Sandbox(warm=False))
  plain_pytest_median_ms  `python -m pytest -q` in a subprocess, no sandbox, as a user would type it
  grade_median_ms         grading a finished workspace (pristine copy, pytest + junit, two out-of-process value runs)
  episode_median_ms       a teacher episode: reset, read, run_test, edit, run_test, finish (with grading)

    python benchmarks/codefix_env.py [--repeats 15] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from agentic_rl.envs.codefix.env import CodeFixEnv
from agentic_rl.envs.codefix.grading import grade
from agentic_rl.envs.codefix.sandbox import Sandbox


def _ms(f) -> float:
    t0 = time.perf_counter()
    f()
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    env = CodeFixEnv()
    task = env.tasks("eval", 1, 0)[0]
    module, source = env.task_source(task)
    env.reset(task)
    ws = env.workspace
    assert ws is not None
    cold = Sandbox(ws.root, env.limits, warm=False)
    times: dict[str, list[float]] = {k: [] for k in ("run_test", "cold_run_test", "plain_pytest", "grade", "episode")}
    env.run_test()  # start the fork server
    for _ in range(args.repeats):
        times["run_test"].append(_ms(env.run_test))
        times["cold_run_test"].append(_ms(lambda: cold.run(["python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                                            "--tb=line"])))
        times["plain_pytest"].append(_ms(lambda: subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=ws.root,
                                                                capture_output=True)))
        times["grade"].append(_ms(lambda: grade(module, source, ws.snapshot()[0], env.limits)))
    env.close()
    episode_env = CodeFixEnv()
    for _ in range(max(3, args.repeats // 3)):
        def episode() -> None:
            messages = episode_env.reset(task)
            while True:
                action = episode_env.teacher_turn(task, messages)
                result = episode_env.step(action)
                messages = messages + [{"role": "assistant", "content": action}, *result.observation]
                if result.terminated or result.truncated:
                    return
        times["episode"].append(_ms(episode))
    med = {k: round(sorted(v)[len(v) // 2], 1) for k, v in times.items()}
    result = {"run_test_median_ms": med["run_test"], "cold_run_test_median_ms": med["cold_run_test"],
              "plain_pytest_median_ms": med["plain_pytest"], "grade_median_ms": med["grade"],
              "episode_median_ms": med["episode"],
              "speedup_vs_plain_pytest": round(med["plain_pytest"] / med["run_test"], 2),
              "sandbox": cold.isolation,
              "repeats": args.repeats, "task": task.id}
    for k, v in result.items():
        print(f"{k:28s} {v}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
