"""Summary metrics over a set of trajectories, for training-time evaluation (`families.py` is the full, six-family
evaluation)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..runtime.trajectory import Trajectory

EVAL_SEED_OFFSET = 7919  # evaluation samples from its own stream, apart from training's


def evaluate_policy(env_factory: Callable[[], Any], tasks: Sequence[Any], policy: Any, seed: int,
                    samples: int = 1) -> dict[str, Any]:
    """Run `policy` `samples` times on each task and summarize all the episodes together (success_rate is then the
    mean over the samples)."""
    return summarize(evaluation_episodes(env_factory, tasks, policy, seed, samples))


def evaluation_episodes(env_factory: Callable[[], Any], tasks: Sequence[Any], policy: Any, seed: int,
                        samples: int = 1) -> list[Trajectory]:
    """`evaluate_policy`'s episodes, before the summary (each draws from its own stream, so a share of the tasks gives
    that share's episodes). A model policy is put in eval mode for the run only."""
    from ..runtime.rollout import run_episodes

    model = getattr(policy, "model", None)
    was_training = bool(model is not None and model.training)
    if model is not None:
        model.eval()
    try:
        return run_episodes(env_factory, tasks, policy, group_size=samples, seed=seed + EVAL_SEED_OFFSET)
    finally:
        if was_training:
            model.train()


def summarize(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """success_rate, mean_reward, tool_calls_per_episode and outcome rates; infra failures are counted apart."""
    n = len(trajs)
    scored = [t for t in trajs if not t.is_infra_failure]
    k = max(len(scored), 1)
    out: dict[str, Any] = {
        "episodes": n,
        "success_rate": sum(t.success for t in scored) / k,
        "mean_reward": sum(t.reward for t in scored) / k,
        "tool_calls_per_episode": sum(t.n_tool_calls for t in scored) / k,
        "turns_per_episode": sum(t.n_turns for t in scored) / k,
        "truncation_rate": sum(t.outcome == "truncated" for t in trajs) / max(n, 1),
        # recovery: of the episodes that met a transient tool fault, the share that still succeeded
        "recovery_rate": _share([t.success for t in scored if t.info.get("faults", 0) > 0]),
        # correct stop: a success without tool calls beyond the reference solution's (the env's `extra_calls`)
        "correct_stop_rate": sum(t.success and t.info.get("extra_calls", 0) == 0 for t in scored) / k,
        "infra_failures": n - len(scored),
    }
    kinds = sorted({t.task_kind for t in scored})
    out["success_by_kind"] = {kd: sum(t.success for t in scored if t.task_kind == kd) /
                              sum(t.task_kind == kd for t in scored) for kd in kinds}
    return out


def _share(flags: list[bool]) -> float | None:
    """The fraction of True, or None when there is nothing to measure (so a missing rate is not a zero)."""
    return sum(flags) / len(flags) if flags else None
