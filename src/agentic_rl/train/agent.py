"""GRPO's episodes from the user's own agent: `function(task, client) -> reward`, run through the gateway.

The trainer serves its policy through the gateway (serve/) on a free loopback port. For each task × G it calls the
function in a thread of its own with an `openai.OpenAI` client whose base_url is that episode's rollout route
(/rollouts/{id}/v1): the agent runs however it likes — its own loop, a framework — and every request it makes is
recorded token for token, sampled at the trainer's temperature whatever model name or temperature it asks for. What
the function returns is the episode's reward (success: a reward above 0). None, an exception, or running past
`episode_timeout_s` is an infrastructure failure, left out of the loss as env errors are. The threads' requests meet
in the gateway's scheduler, which samples them as batches. Each record becomes `Trajectory`s — one per segment (an
agent that rewrote its history has several, each trained with the episode's advantage) — that go down the same GRPO
code path as the env's episodes.

Tasks come from an env's splits (the function gets the `Task`: its prompt, answer and reference, usable with the
env's own `score`) or from a JSONL file of task dicts (`read_tasks_file`).
"""

from __future__ import annotations

import importlib.util
import json
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from ..envs import import_here_too
from ..policies.hf.sampler import HFPolicy
from ..runtime.trajectory import Trajectory
from ..serve.records import Rollout

AgentFn = Callable[[Any, Any], float | None]  # (task, openai client) -> reward, or None for an infrastructure failure


def load_agent(spec: str) -> AgentFn:
    """The function `spec` names: `package.module:function`, or `path/to/file.py:function`."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise ValueError(f"agent {spec!r}: give module:function — a module on the Python path or a .py file, e.g. "
                         "examples/openai_agent.py:run")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise ValueError(f"agent {spec!r}: there is no file {path}")
        loader = importlib.util.spec_from_file_location(f"agentic_rl_agent_{path.stem}", path)
        assert loader is not None and loader.loader is not None
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
    else:
        try:
            module = import_here_too(where)  # examples.openai_agent from the repository's root works too
        except ImportError as e:
            raise ValueError(f"agent {spec!r}: cannot import {where} ({e})") from e
    fn = getattr(module, name, None)
    if not callable(fn):
        found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise ValueError(f"agent {spec!r}: {where} has no function {name!r} (it has: {', '.join(found) or 'none'})")
    return fn


def read_tasks_file(path: str | Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train tasks, eval tasks) of a JSONL file, one JSON object per line; a line with "split": "eval" is held out
    for evaluation, every other line is trained on. A task without an "id" gets FILE:LINE."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"tasks_file {path}: there is no such file (give a JSONL file, one task object per line)")
    train, held = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            task = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"tasks_file {path} line {n}: not JSON ({e})") from None
        if not isinstance(task, dict):
            raise ValueError(f"tasks_file {path} line {n}: a task must be a JSON object, got {type(task).__name__}")
        split = task.get("split", "train")
        if split not in ("train", "eval"):
            raise ValueError(f"tasks_file {path} line {n}: split must be 'train' or 'eval', got {split!r}")
        task.setdefault("id", f"{path.name}:{n}")
        (held if split == "eval" else train).append(task)
    if not train:
        raise ValueError(f"tasks_file {path}: no training task (every line is split 'eval', or the file is empty)")
    return train, held


def task_id(task: Any) -> str:
    return str(task["id"]) if isinstance(task, dict) else str(task.id)


def task_kind(task: Any) -> str:
    return str(task.get("kind", "")) if isinstance(task, dict) else str(task.kind)


def episodes_of(trajs: Sequence[Trajectory]) -> list[Trajectory]:
    """One trajectory per episode (an agent episode's last segment): what success rates and means count."""
    return [t for t in trajs if t.info.get("segment", 0) == t.info.get("segments", 1) - 1]


class AgentEpisodes:
    """Runs an agent function over tasks × G through a gateway over `policy`; a context manager."""

    def __init__(self, agent: AgentFn, policy: HFPolicy, env_name: str, workers: int = 32,
                 timeout_s: float | None = None):
        from ..serve.local import LocalGateway

        try:
            import openai
        except ImportError as e:
            raise ImportError("an agent function gets an openai client: pip install -e '.[serve]' openai") from e
        self._openai = openai
        self.agent, self.env_name, self.timeout_s = agent, env_name, timeout_s
        self.server = LocalGateway(policy)
        self.server.gateway.any_model = True  # the agent's own model name is served by the policy in training
        self.renderer = policy.renderer
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agentic-rl-agent")

    def run(self, tasks: Sequence[Any], group_size: int, key: str, temperature: float) -> list[Trajectory]:
        """G episodes of each task (task-major, as `run_episodes` orders them), sampled at `temperature`; `key`
        names this batch (a step) and makes the rollout ids unique."""
        gateway = self.server.gateway
        gateway.record_temperature = temperature
        # each episode's rollout id is an unguessable token (no other client can read or steer it); its name is
        # what trajectories carry
        jobs = [(task, j, gateway.open(f"{key}-{i}-{j}")) for i, task in enumerate(tasks) for j in range(group_size)]
        started: dict[str, float] = {}
        futures = {self.pool.submit(self._episode, task, r.id, started): r.id for task, _, r in jobs}
        results = self._gather(futures, started)
        out: list[Trajectory] = []
        for task, j, r in jobs:
            reward, outcome, error = results[r.id]
            out += self._trajectories(task, j, r.name, gateway.take(r.id), reward, outcome, error)
        if not gateway.engine.wait_idle():  # a timed-out agent's last request must not sample during the update
            raise RuntimeError("the gateway's sampler did not finish its last batch within 60 s")
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.server.close()

    def __enter__(self) -> AgentEpisodes:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- one episode --

    def _episode(self, task: Any, rid: str, started: dict[str, float]) -> float | None:
        started[rid] = time.monotonic()
        client = self._openai.OpenAI(base_url=f"{self.server.url}/rollouts/{rid}/v1", api_key="agentic-rl",
                                     max_retries=2)
        try:
            reward = self.agent(task, client)
        finally:
            client.close()
        if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))
                                   or not math.isfinite(reward)):
            raise AgentReturnError(f"the agent returned {reward!r} ({type(reward).__name__}): it must return the "
                                   "episode's reward as a finite number, or None for an infrastructure failure")
        return None if reward is None else float(reward)

    def _gather(self, futures: dict[Future[float | None], str], started: dict[str, float]
                ) -> dict[str, tuple[float | None, str, str | None]]:
        """rollout id → (reward, outcome, error) once every episode has returned, failed or timed out."""
        results: dict[str, tuple[float | None, str, str | None]] = {}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            for f in done:
                rid = futures[f]
                if rid in results:
                    continue  # timed out before it returned
                error = f.exception()
                if isinstance(error, AgentReturnError):
                    raise ValueError(str(error))
                if error is not None:
                    results[rid] = (None, "env_error", f"the agent raised {type(error).__name__}: {error}")
                elif f.result() is None:
                    results[rid] = (None, "env_error", "the agent returned None (an infrastructure failure)")
                else:
                    results[rid] = (f.result(), "ok", None)
            if self.timeout_s is not None:
                now = time.monotonic()
                for f in list(pending):
                    rid = futures[f]
                    if rid in started and now - started[rid] > self.timeout_s:
                        self.server.gateway.close(rid, f"the episode ran past episode_timeout_s={self.timeout_s}")
                        # its next request is refused: the thread ends soon
                        results[rid] = (None, "timeout", f"the agent ran past episode_timeout_s={self.timeout_s}")
                        pending.discard(f)
        return results

    def _trajectories(self, task: Any, j: int, name: str, rollout: Rollout | None, reward: float | None,
                      outcome: str, error: str | None) -> list[Trajectory]:
        """The episode's segments as Trajectories, each carrying the episode's reward; one without tokens when the
        agent failed or never called the model."""
        if rollout is None or not any(s.turns for s in rollout.segments):
            if outcome == "ok":
                outcome, error = "env_error", "the agent made no request to the model: nothing to train on"
            return [Trajectory(self.env_name, task_id(task), task_kind(task), j, [], [], 0.0, outcome,  # type: ignore[arg-type]
                               False, {"episode": name, "error": error})]
        rollout.reward = reward if reward is not None else 0.0
        segments = rollout.trajectories(self.renderer, env=self.env_name)
        out = []
        for k, t in enumerate(segments):
            r = rollout.reward if outcome == "ok" else 0.0
            out.append(replace(t, task_id=task_id(task), task_kind=task_kind(task), sample=j, reward=r,
                               turn_rewards=[0.0] * (len(t.turn_rewards) - 1) + [r], outcome=outcome,
                               success=outcome == "ok" and r > 0,
                               info={**t.info, "episode": name, "segment": k, "segments": len(segments),
                                     **({"error": error} if error else {})}))
        return out


class AgentReturnError(TypeError):
    """The agent function returned something that is not a reward: a bug to report, not an episode to skip."""


__all__ = ["AgentEpisodes", "AgentFn", "episodes_of", "load_agent", "read_tasks_file"]
