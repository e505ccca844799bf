"""The agent loop: run many episodes at once (tasks × G samples) and record each as a Trajectory.

Each turn, every running episode gets one assistant turn from the policy (batched), the env steps on it, and the
observation is appended. An episode ends on its own, with one of four outcomes: `ok` when the env terminates it (a
final answer, or a submitting tool such as codefix's finish()); `truncated` when the env's own limit ends it (the
turn limit, codefix's time per episode) or the policy's turn is cut by a token limit; `env_error` when the env
raises (an infrastructure error from a tool included); `timeout` when it runs past `episode_timeout_s`, if given,
checked after each turn. A failed episode is data: it is recorded with its outcome, never raised into the trainer.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from ..envs.base import Env, Message, Task
from ..policies.base import Policy
from .parsing import calls_of, parse_turn
from .trajectory import Trajectory, assistant_message


def run_episodes(env_factory: Callable[[], Env], tasks: Sequence[Task], policy: Policy, group_size: int = 1,
                 seed: int = 0, episode_timeout_s: float | None = None,
                 progress: Callable[[int, int], None] | None = None) -> list[Trajectory]:
    """Run `group_size` episodes of every task; return the trajectories grouped by task, samples in order.

    episode_timeout_s: wall-clock seconds an episode may run, counted from the start of this call (None: no limit).
    progress: called with (episodes finished, episodes in all) each time an episode ends."""
    if group_size < 1:
        raise ValueError(f"group_size must be ≥ 1, got {group_size}")
    ep_tasks = [t for t in tasks for _ in range(group_size)]
    samples = [g for _ in tasks for g in range(group_size)]
    envs = [env_factory() for _ in ep_tasks]
    convs: list[list[Message]] = [env.reset(t) for env, t in zip(envs, ep_tasks)]
    rewards: list[list[float]] = [[] for _ in ep_tasks]
    turn_info: list[list[dict[str, Any]]] = [[] for _ in ep_tasks]  # what the env said of each turn (for eval)
    results: list[Trajectory | None] = [None] * len(ep_tasks)
    started = [time.monotonic()] * len(ep_tasks)
    cut: set[int] = set()  # episodes with a turn cut by the token limit
    session = policy.start(envs[0], ep_tasks, samples, seed)
    running = list(range(len(ep_tasks)))
    finished = 0
    try:
        while running:
            turns = session.act(running, [convs[i] for i in running])
            still: list[int] = []
            for i, turn in zip(running, turns):
                env, info, outcome = envs[i], {}, None
                if turn.finish == "length":
                    cut.add(i)
                try:
                    res = env.step(turn.text)
                except Exception as e:  # an env crash ends this episode as infrastructure failure, not reward 0
                    info = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=5)}
                    convs[i].append(_message(turn.text, env))
                    rewards[i].append(0.0)
                    outcome = "env_error"
                else:
                    convs[i].append(_message(turn.text, env))
                    rewards[i].append(res.reward)
                    convs[i].extend(res.observation)
                    info = {**(asdict(res.episode) if res.episode else {}), **res.extra}
                    turn_info[i].append(asdict(res.turn) if res.turn else {})
                    if res.terminated or res.truncated:
                        outcome = "ok" if res.terminated else "truncated"
                    elif turn.finish == "length":  # the policy hit a token limit: the episode cannot go on
                        outcome = "truncated"
                        info = {**info, "truncated_by": "tokens"}
                    elif episode_timeout_s is not None and time.monotonic() - started[i] > episode_timeout_s:
                        outcome = "timeout"
                if outcome is None:
                    still.append(i)
                    continue
                if i in cut:  # a turn hit the token limit, whether or not the env ended the episode on it
                    info = {**info, "cut_by_tokens": True}
                results[i] = _trajectory(env, ep_tasks[i], samples[i], convs[i], rewards[i], outcome,
                                         {**info, "turn_info": turn_info[i]}, session.finish(i, convs[i]))
                finished += 1
                if progress is not None:
                    progress(finished, len(ep_tasks))
            running = still
    finally:
        for env in envs:
            env.close()
    return [t for t in results if t is not None]


def _message(text: str, env: Env) -> dict[str, Any]:
    return assistant_message(text, calls_of(parse_turn(text, env.tools, env.max_calls)))


def _trajectory(env: Env, task: Task, sample: int, messages: list[Message], turn_rewards: list[float], outcome: str,
                info: dict[str, Any], record: Any) -> Trajectory:
    return Trajectory(
        env=env.name, task_id=task.id, task_kind=task.kind, sample=sample, messages=messages,
        turn_rewards=turn_rewards, reward=float(sum(turn_rewards)), outcome=outcome,  # type: ignore[arg-type]
        success=bool(info.get("success", False)) and outcome == "ok", info=info,
        ids=record.ids if record else None, mask=record.mask if record else None,
        logprobs=record.logprobs if record else None, assistant_ids=record.assistant_ids if record else None)
