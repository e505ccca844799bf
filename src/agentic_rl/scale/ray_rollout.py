"""Rollout workers on Ray (`rollout.backend=ray`): tasks × G split across actors, the same trajectories as local.

Each actor holds a copy of the policy and builds its own envs; `run` splits the tasks into contiguous shares (the G
samples of a task stay together), the actors sample them at once, and the trajectories come back in task order.
Every episode draws from its own random stream (run seed, step, task id, sample: `policies/hf/sampler.py`), so
where it runs does not change what it samples. After each optimizer step the learner `publish`es its weights once
to Ray's object store and every actor loads them — with LoRA, the adapter alone: each actor holds the base model
with an adapter of the same shape; each trajectory records the weights version it was sampled with, and an actor
refuses to sample with another version than the one asked for.

A worker that dies mid-step, or hangs — no forward pass of its model for `hang_s` seconds while it has work (a
slow worker on a loaded machine still makes them; the actors answer that count on a thread of their own, and the
clock starts once an actor is up) — loses no run: it is replaced by a new actor with the current weights, its
share is sampled again, and past `retries` its episodes come back as infrastructure failures
(`outcome="env_error"`, left out of the loss like any env crash); each event is kept in `events` for the step's
metrics. `RAY_ADDRESS` (or `rollout.ray_address`) joins an existing cluster; otherwise a local one is started and
shut down with the run. Ray is an extra (`pip install -e '.[ray]'`), imported only here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import torch

from ..envs.base import Task
from ..runtime.trajectory import Trajectory

# Several torch processes on one machine: each samples on its own threads, and OpenMP threads that wait do not spin
# (spinning threads slow every other process's work: issue 42).
WORKER_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}
# How long an actor may take to come up (import torch, load the model) on a loaded machine before the run stops.
START_S = 600.0


class RolloutWorker:
    """One actor's state: a policy copy, the env to build, and the weights version it holds."""

    def __init__(self, env: str, env_args: dict[str, Any], model_dir: str, temperature: float,
                 max_new_tokens: int | None, threads: int, lora: dict[str, Any] | None = None,
                 agent: tuple[str, int, float | None] | None = None):
        """agent: (spec, threads, episode time limit): run the user's agent function through a gateway of this
        actor's own instead of the env's turn loop (train/agent.py)."""
        from ..envs import make_env
        from ..policies import HFPolicy, SamplingConfig

        torch.set_num_threads(threads)
        self.env_factory = lambda: make_env(env, **env_args)
        self.policy = HFPolicy(model_dir, SamplingConfig(temperature, max_new_tokens), dtype=torch.float32)
        self.temperature, self.agent = temperature, None
        if agent is not None:
            from ..train.agent import AgentEpisodes, load_agent

            spec, agent_threads, timeout_s = agent
            self.agent = AgentEpisodes(load_agent(spec), self.policy, env, agent_threads, timeout_s)
        if lora is not None:  # the learner's adapter shape, zero until the first publish (B = 0: the base model)
            from ..train.lora import LoRASettings, add_adapter

            add_adapter(self.policy.model, LoRASettings(**lora))
        self.lora = lora is not None
        self.version = 0
        self.pulse = 0  # forward passes, runs and loads so far: a worker whose pulse stops is hung
        self.policy.model.register_forward_hook(self._beat)

    def _beat(self, *_: object) -> None:
        self.pulse += 1

    def heartbeat(self) -> int:
        """The pulse, answered on the actor's "beat" thread while `run` works on the default one."""
        return self.pulse

    def load(self, version: int, state: dict[str, torch.Tensor]) -> int:
        """Take the learner's weights of `version`: all of them, or with LoRA its adapter's."""
        self._beat()
        missing, unexpected = self.policy.model.load_state_dict(state, strict=not self.lora)
        if unexpected or (self.lora and any(".lora_" in k for k in missing)):
            raise RuntimeError(f"the published weights do not fit this worker's model: unexpected {unexpected[:3]}, "
                               f"missing {[k for k in missing if '.lora_' in k][:3]}")
        self.version = version
        return version

    def run(self, tasks: Sequence[Task], group_size: int, seed: int, version: int,
            episode_timeout_s: float | None) -> list[Trajectory]:
        from ..runtime.rollout import run_episodes

        self._beat()
        if version != self.version:
            raise RuntimeError(f"asked to sample with weights version {version}, but this worker holds {self.version}")
        self.policy.model.eval()
        if self.agent is not None:  # rollout ids unique per step (its seed) and per retry of a share
            trajs = self.agent.run(tasks, group_size, f"s{seed}-v{version}-{os.getpid()}", self.temperature)
        else:
            trajs = run_episodes(self.env_factory, tasks, self.policy, group_size, seed, episode_timeout_s)
        for t in trajs:
            t.info["weights_version"] = version
            t.info["worker_pid"] = os.getpid()
        return trajs

    def checksum(self) -> float:
        """A sum over every weight: tests compare it with the learner's."""
        return float(sum(p.double().sum() for p in self.policy.model.state_dict().values()))


def _lost(task: Task | dict[str, Any], sample: int, version: int) -> Trajectory:
    """An episode whose worker was lost past the retries: an infrastructure failure, out of the loss."""
    from ..train.agent import task_id, task_kind

    return Trajectory(env="", task_id=task_id(task), task_kind=task_kind(task), sample=sample, messages=[],
                      turn_rewards=[],
                      reward=0.0, outcome="env_error", success=False,
                      info={"error": "its rollout worker was lost", "weights_version": version})


class RayRollout:
    """`workers` Ray actors sampling the env's episodes; `close` (or leaving the `with`) ends them."""

    def __init__(self, env: str, env_args: dict[str, Any], model_dir: str, temperature: float,
                 max_new_tokens: int | None, workers: int, address: str | None = None, retries: int = 1,
                 hang_s: float | None = None, lora: dict[str, Any] | None = None,
                 agent: tuple[str, int, float | None] | None = None):
        """model_dir: what the actors load (with `lora`, the LoRA settings' dump, the base model: they add an adapter
        of that shape and take only the adapter's weights from `publish`); agent: (spec, threads, episode time limit)
        of the user's agent function, which each actor runs through a gateway of its own."""
        try:
            import ray
        except ImportError as e:
            raise ImportError("rollout.backend=ray needs Ray: pip install -e '.[ray]'") from e
        self.ray = ray
        self.started = not ray.is_initialized()
        if self.started:
            address = address or os.environ.get("RAY_ADDRESS") or None
            # a cluster of our own gets one CPU per worker; joining one, its resources are what it has
            try:
                ray.init(address=address, num_cpus=None if address else max(workers, os.cpu_count() or 1),
                         include_dashboard=False, log_to_driver=False, configure_logging=False,
                         runtime_env={"env_vars": WORKER_ENV})
            except (ConnectionError, RuntimeError) as e:
                causes, cause = [], e  # the reason is in the exception's causes
                while cause is not None and len(causes) < 8:
                    causes.append(str(cause))
                    cause = cause.__cause__ or cause.__context__
                hint = (" It uses token authentication (`ray start` turns it on): run with RAY_AUTH_MODE=token, the "
                        "token in ~/.ray/auth_token." if "authentication" in " ".join(causes).lower() else "")
                raise ConnectionError(f"cannot join the Ray cluster at {address}.{hint} ({type(e).__name__}: "
                                      f"{str(e).splitlines()[0]})") from e
        threads = max(1, (os.cpu_count() or 1) // workers)
        # `run` and `load` take turns on the default thread; `heartbeat` answers on a thread of its own
        actor = ray.remote(num_cpus=1, max_restarts=0, concurrency_groups={"beat": 1})(RolloutWorker)
        self._new_actor = lambda: actor.remote(env, env_args, model_dir, temperature, max_new_tokens, threads, lora,
                                               agent)
        self.lora = lora is not None
        self.actors = [self._new_actor() for _ in range(workers)]
        self._wait_up(self.actors)
        self.retries, self.hang_s = retries, hang_s
        self.version, self._state = 0, None
        self.events: list[str] = []  # lost workers since the caller last took them (`take_events`)

    def publish(self, version: int, model: torch.nn.Module) -> int:
        """Every actor takes `model`'s weights (with LoRA, its adapter's alone), put once in the object store, as
        `version`; returns how many bytes that is. It does not wait: an actor loads them after the sampling it is
        doing, before any it is asked for later."""
        weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()
                   if not self.lora or ".lora_" in k}
        state = self.ray.put(weights)
        for a in self.actors:
            a.load.remote(version, state)
        self.version, self._state = version, state
        return sum(v.numel() * v.element_size() for v in weights.values())

    def run(self, tasks: Sequence[Task], group_size: int, seed: int,
            episode_timeout_s: float | None = None) -> list[Trajectory]:
        """`group_size` episodes of every task, split across the actors; grouped by task, samples in order."""
        return self.collect(self.submit(tasks, group_size, seed, episode_timeout_s))

    def submit(self, tasks: Sequence[Task], group_size: int, seed: int,
               episode_timeout_s: float | None = None) -> dict[str, Any]:
        """Start sampling (with the weights published last) and return at once; `collect` gathers the result."""
        tasks = list(tasks)
        n = len(self.actors)
        shares = [tasks[len(tasks) * k // n:len(tasks) * (k + 1) // n] for k in range(n)]
        args = (group_size, seed, episode_timeout_s)
        pending = {self.actors[k].run.remote(shares[k], group_size, seed, self.version, episode_timeout_s): (k, 0)
                   for k in range(n) if shares[k]}
        return {"shares": shares, "args": args, "pending": pending}

    def collect(self, batch: dict[str, Any]) -> list[Trajectory]:
        """The trajectories of a `submit`, in task order; lost workers replaced and their shares sampled again."""
        shares, (group_size, seed, episode_timeout_s), pending = batch["shares"], batch["args"], batch["pending"]
        done: dict[int, list[Trajectory]] = {}
        clock = {ref: (-1, time.monotonic()) for ref in pending}  # per call out: (pulse seen, when it last moved)
        while pending:
            poll = None if self.hang_s is None else min(1.0, self.hang_s / 4)
            ready, _ = self.ray.wait(list(pending), num_returns=1, timeout=poll)
            for ref in ready or self._hung(pending, clock):
                k, tries = pending.pop(ref)
                try:
                    if not ready:
                        raise TimeoutError(f"no forward pass within {self.hang_s:g} s")
                    done[k] = self.ray.get(ref)
                    continue
                except self.ray.exceptions.RayTaskError:
                    raise  # the worker raised: a bug to report, not a lost process
                except (self.ray.exceptions.RayActorError, TimeoutError) as e:
                    self._replace(k, f"worker {k} lost while sampling {len(shares[k])} tasks "
                                     f"(try {tries + 1} of {self.retries + 1}): {type(e).__name__}")
                if tries < self.retries:  # again, by the new actor, with the weights it was given
                    again = self.actors[k].run.remote(shares[k], group_size, seed, self.version, episode_timeout_s)
                    pending[again] = (k, tries + 1)
                    clock[again] = (-1, time.monotonic())
                else:
                    done[k] = [_lost(t, j, self.version) for t in shares[k] for j in range(group_size)]
        return [t for k in sorted(done) for t in done[k]]

    def _hung(self, pending: dict[Any, tuple[int, int]], clock: dict[Any, tuple[int, float]]) -> list[Any]:
        """The calls out whose actor's pulse has not moved for `hang_s` (an actor that cannot answer has not)."""
        asks = {self.actors[k].heartbeat.options(concurrency_group="beat").remote(): ref
                for ref, (k, _) in pending.items()}
        answered, _ = self.ray.wait(list(asks), num_returns=len(asks), timeout=min(1.0, self.hang_s / 4))
        now = time.monotonic()
        for ask in answered:
            try:
                pulse = self.ray.get(ask)
            except self.ray.exceptions.RayActorError:
                continue  # dead: its call out fails on its own
            ref = asks[ask]
            if pulse != clock[ref][0]:
                clock[ref] = (pulse, now)
        return [ref for ref in pending if now - clock[ref][1] > self.hang_s]

    def _wait_up(self, actors: list[Any]) -> None:
        """Until every actor has built its policy: start-up is not sampling, and load cannot be allowed to eat
        `hang_s`; one that fails to start stops the run with its reason."""
        try:
            self.ray.get([a.heartbeat.options(concurrency_group="beat").remote() for a in actors], timeout=START_S)
        except self.ray.exceptions.GetTimeoutError as e:
            raise TimeoutError(f"Ray rollout workers did not start within {START_S:g} s") from e

    def _replace(self, k: int, event: str) -> None:
        """A new actor in place of actor k, holding the current weights."""
        self.events.append(event)
        self.ray.kill(self.actors[k])
        self.actors[k] = self._new_actor()
        self._wait_up([self.actors[k]])
        if self._state is not None:
            self.ray.get(self.actors[k].load.remote(self.version, self._state))

    def take_events(self) -> list[str]:
        events, self.events = self.events, []
        return events

    def checksums(self) -> list[float]:
        return self.ray.get([a.checksum.remote() for a in self.actors])

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()

    def __enter__(self) -> RayRollout:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
