"""Exploit probes: a scripted agent plays each known reward hack through the env's own `step`, and the table compares
what it earns there (guarded) with what a naive reward would pay and with the no-op (an honest failure). An exploit
that makes the env raise is an `env_error` (which a trainer would drop from the loss, so the agent could opt out of
a bad grade); each row says whether that happened and how long its slowest episode took."""

from __future__ import annotations

import time
from collections.abc import Callable

from .base import Env, Task

Script = Callable[[Task], list[str]]  # the exploit's assistant turns for one task


def play(env: Env, task: Task, actions: list[str]) -> tuple[float, list[str], dict[str, object]]:
    """Play `actions` (until the episode ends); return the episode's reward, the turns played and the last step's
    extras, with `env_error` (the env raised) and `seconds` (the episode's wall time) added."""
    t0 = time.monotonic()
    env.reset(task)
    total, played, extra = 0.0, [], {}
    try:
        for action in actions:
            result = env.step(action)
            total, extra = total + result.reward, result.extra
            played.append(action)
            if result.terminated or result.truncated:
                break
        error = False
    except Exception:  # what the rollout loop would record as env_error
        error = True
    finally:
        env.close()
    return total, played, {**extra, "env_error": error, "seconds": time.monotonic() - t0}


def probe_table(env: Env, tasks: list[Task], exploits: dict[str, Script], noop: Script,
                naive: Callable[[Task, list[str]], float] | None = None, intact: str | None = None
                ) -> list[dict[str, object]]:
    """One row per exploit: its mean naive reward (None without a naive reward to compare), its mean guarded
    reward, the no-op's guarded reward, whether any episode ended as an env error, its slowest episode's seconds,
    and — given `intact`, an end-of-episode fact — whether it held every time."""
    runs = {name: [(t, *play(env, t, script(t))) for t in tasks] for name, script in {"noop": noop, **exploits}.items()}
    noop_reward = sum(r for _, r, _, _ in runs["noop"]) / len(tasks)
    return [{"exploit": name,
             "naive_reward": round(sum(naive(t, p) for t, _, p, _ in rs) / len(tasks), 4) if naive else None,
             "guarded_reward": round(sum(r for _, r, _, _ in rs) / len(tasks), 4), "noop_reward": round(noop_reward, 4),
             "env_error": any(bool(x["env_error"]) for _, _, _, x in rs),
             "slowest_s": round(max(float(x["seconds"]) for _, _, _, x in rs), 2),  # type: ignore[arg-type]
             **({intact: all(bool(x.get(intact)) for _, _, _, x in rs)} if intact else {})}
            for name, rs in runs.items()]
