"""`agentic-rl doctor`: the seed's §8 ("when not to do agentic RL") as checks with a verdict and one next step each.

Before training, the prompt, the tool schemas, the agent loop, an eval set and a verifiable reward must be right.
Each check returns PASS, WARN or FAIL with what it found and the concrete next step; any FAIL makes the command
exit non-zero, so it can gate a training job in CI.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

import jsonschema

from ..envs.base import Env, check_env
from ..policies import Policy, RandomPolicy, TeacherPolicy
from ..runtime.parsing import ParseError, message_text, parse_turn
from ..runtime.render import longest_assistant_turn
from ..runtime.rollout import run_episodes
from ..runtime.trajectory import Trajectory

Verdict = Literal["PASS", "WARN", "FAIL"]
TEACHER_BAR = 0.95  # the env must be solvable: the scripted teacher solves this share of held-out tasks
PARSE_BAR = 0.90  # below this share of parseable turns, the policy is not ready for RL
SIGNAL_BAR = 0.25  # GRPO needs groups with reward variance; below this share most of a step is wasted
BEAT_RANDOM_BY = 0.05  # the policy's success rate must beat a random agent's by this much before RL is worth it


@dataclass
class Check:
    name: str
    verdict: Verdict
    observed: str
    next_step: str


def check_tool_schemas(env: Env, tasks: list[Any] | None = None) -> Check:
    """Every tool's schema is valid JSON Schema and described: the env's fixed tools, and the tools the first ten of
    `tasks` bring where tools change with the task (toolcall)."""
    schemas = {json.dumps(s, sort_keys=True): s for s in env.tools.schemas}
    for task in (tasks or [])[:10]:
        env.reset(task)
        schemas.update({json.dumps(s, sort_keys=True): s for s in env.tools.schemas})
        env.close()
    problems = []
    for schema in schemas.values():
        fn = schema.get("function", {})
        try:
            jsonschema.Draft202012Validator.check_schema(fn.get("parameters", {}))
        except jsonschema.SchemaError as e:
            problems.append(f"{fn.get('name')}: {e.message}")
        if not fn.get("description"):
            problems.append(f"{fn.get('name')}: no description (the model reads it to choose the tool)")
    n = len(schemas)
    if problems:
        return Check("tool schemas valid", "FAIL", "; ".join(problems), "fix the tool's type hints and docstring")
    return Check("tool schemas valid", "PASS", f"{n} tools, valid JSON Schema, each described", "")


def check_agent_loop(factory: Callable[[], Env], tasks: list[Any]) -> Check:
    try:
        trajs = run_episodes(factory, tasks, RandomPolicy(), seed=0)
    except Exception as e:  # the point of the check: the loop must not crash on arbitrary actions
        return Check("agent loop runs", "FAIL", f"{type(e).__name__}: {e}", "fix the env's step() for bad actions")
    errors = [t for t in trajs if t.outcome == "env_error"]
    if errors:
        return Check("agent loop runs", "FAIL", f"{len(errors)}/{len(trajs)} random-policy episodes ended in env_error",
                     "the env must turn any action into an observation, never an exception")
    return Check("agent loop runs", "PASS", f"{len(trajs)} random-policy episodes ended cleanly", "")


def check_teacher(teacher: list[Trajectory]) -> Check:
    rate = sum(t.success for t in teacher) / len(teacher)
    if rate >= TEACHER_BAR:
        return Check("env is solvable", "PASS", f"teacher solves {rate:.0%} of held-out tasks", "")
    return Check("env is solvable", "FAIL", f"teacher solves {rate:.0%} (< {TEACHER_BAR:.0%})",
                 "fix the tasks or the reward: some held-out tasks cannot be solved as specified")


def check_determinism(factory: Callable[[], Env], tasks: list[Any], teacher: list[Trajectory]) -> Check:
    again = run_episodes(factory, tasks, TeacherPolicy(), seed=0)
    diff = [a.task_id for a, b in zip(teacher, again) if abs(a.reward - b.reward) > 1e-9 or a.messages != b.messages]
    if diff:
        return Check("reward is deterministic", "FAIL", f"{len(diff)} tasks scored differently twice, e.g. {diff[0]}",
                     "remove randomness from step(): seed it from the task and the turn")
    return Check("reward is deterministic", "PASS", f"{len(tasks)} teacher episodes scored the same twice", "")


def check_discrimination(teacher: list[Trajectory], random_: list[Trajectory]) -> Check:
    t, r = statistics.mean(x.reward for x in teacher), statistics.mean(x.reward for x in random_)
    gap = t - r
    if gap >= 0.3:
        return Check("reward discriminates", "PASS", f"teacher {t:.2f} vs random {r:.2f}", "")
    verdict: Verdict = "WARN" if gap > 0 else "FAIL"
    return Check("reward discriminates", verdict, f"teacher {t:.2f} vs random {r:.2f} (gap {gap:.2f} < 0.30)",
                 "make the reward depend on what matters: a random agent should score far below the teacher")


def check_exploits(env: Env, tasks: list[Any]) -> Check | None:
    """The env's known reward hacks, scripted, must earn no more than doing nothing and never end an episode as an
    env error, which a trainer drops from the loss (None: the env has no probes)."""
    rows = env.probe_hacks(tasks)
    if rows is None:
        return None
    noop = next(r["guarded_reward"] for r in rows if r["exploit"] == "noop")
    paying = [r for r in rows if r["guarded_reward"] > r["noop_reward"] + 1e-9]
    crashing = [str(r["exploit"]) for r in rows if r.get("env_error") or r.get("env_errors")]
    if crashing:
        return Check("exploits do not pay", "FAIL", f"ended episodes as env errors: {', '.join(crashing)}",
                     "make the env score what the agent caused as a failure: an env error is dropped from the loss, "
                     "so the agent could opt out of a bad grade")
    if paying:
        names = ", ".join(f"{r['exploit']} {r['guarded_reward']:.2f}" for r in paying)
        return Check("exploits do not pay", "FAIL", f"above the no-op's {noop:.2f}: {names}",
                     "guard the reward against these (see `agentic-rl probe-hacks`) before training on it")
    best = max((r for r in rows if r["exploit"] != "noop"), key=lambda r: r["guarded_reward"])
    return Check("exploits do not pay", "PASS", f"{len(rows) - 1} exploit probes ≤ no-op {noop:.2f} (best: "
                 f"{best['exploit']} {best['guarded_reward']:.2f})", "")


def check_splits(factory: Callable[[], Env], n: int) -> Check:
    env = factory()
    train, evals = env.tasks("train", n, 0), env.tasks("eval", n, 0)
    if not evals:
        return Check("eval split exists", "FAIL", "no eval tasks", "add a held-out generator")
    overlap = {(t.prompt, t.answer) for t in train} & {(t.prompt, t.answer) for t in evals}
    if overlap or {t.id for t in train} & {t.id for t in evals}:
        return Check("eval split exists", "FAIL", f"train and eval share {len(overlap)} tasks",
                     "generate eval tasks from disjoint content (see split_of)")
    return Check("eval split exists", "PASS", f"{len(evals)} eval tasks, disjoint from {len(train)} train tasks", "")


def check_parse_rate(trajs: list[Trajectory], env: Env, eos_id: int | None = None) -> Check:
    """A turn is well-formed when it parses (a valid call, or an answer) and, for a model, ended on its own (EOS)
    rather than at the token limit: any text parses as an "answer", so an untrained model's babble must not pass."""
    ok, n = 0, 0
    for t in trajs:
        turns = [m for m in t.messages if m["role"] == "assistant"]
        for i, m in enumerate(turns):
            n += 1
            ended = eos_id is None or not t.assistant_ids or (i < len(t.assistant_ids) and t.assistant_ids[i][-1:]
                                                              == [eos_id])
            ok += ended and not isinstance(parse_turn(message_text(m), env.tools), ParseError)
    rate = ok / max(n, 1)
    if rate >= PARSE_BAR:
        return Check("policy's turns parse", "PASS", f"{rate:.0%} of {n} turns well-formed", "")
    return Check("policy's turns parse", "FAIL", f"{rate:.0%} of {n} turns well-formed (< {PARSE_BAR:.0%})",
                 "do SFT first: RL cannot reward calls the policy cannot yet write")


def check_beats_random(sampled: list[Trajectory], random_: list[Trajectory]) -> Check:
    """RL sharpens what a policy can already sometimes do; a policy no better than random has nothing to sharpen."""
    p = sum(t.success for t in sampled) / max(len(sampled), 1)
    r = sum(t.success for t in random_) / max(len(random_), 1)
    observed = f"policy succeeds on {p:.0%} of samples, a random agent on {r:.0%}"
    if p >= r + BEAT_RANDOM_BY:
        return Check("policy beats random", "PASS", observed, "")
    return Check("policy beats random", "FAIL", observed + f" (needs +{BEAT_RANDOM_BY:.0%})",
                 "do SFT first: RL needs a policy that already succeeds sometimes")


def check_grpo_signal(trajs: list[Trajectory], group: int, temperature: float) -> Check:
    groups = [trajs[i:i + group] for i in range(0, len(trajs), group)]
    live = sum(len({round(t.reward, 9) for t in g}) > 1 for g in groups) / max(len(groups), 1)
    mean_success = sum(t.success for t in trajs) / max(len(trajs), 1)
    observed = f"{live:.0%} of {len(groups)} groups (G={group}, T={temperature}) have reward variance"
    if live >= SIGNAL_BAR and mean_success == 0:
        # the variance is all shaping (call costs, penalties): GRPO would only learn to do less
        return Check("GRPO has a learning signal", "WARN", observed + ", but no sample succeeds",
                     "more SFT first: rewards differ only by shaping costs, so GRPO would learn to act less")
    if live >= SIGNAL_BAR:
        return Check("GRPO has a learning signal", "PASS", observed + f"; success {mean_success:.0%}", "")
    if mean_success < 0.1:
        step = "more SFT, or easier tasks: almost every sample fails the same way"
    elif mean_success > 0.9:
        step = "harder tasks: almost every sample succeeds"
    else:
        step = f"raise group_size (now {group}) or temperature (now {temperature})"
    return Check("GRPO has a learning signal", "WARN" if live > 0 else "FAIL", observed, step)


def check_turn_limit(teacher: list[Trajectory], policy: Policy) -> Check | None:
    """The teacher's turns, in the policy's tokens, must fit the policy's per-turn sampling limit: a turn the
    sampler cuts off is a broken action however good the policy is (codefix's edit_file calls are long turns)."""
    renderer, sampling = getattr(policy, "renderer", None), getattr(policy, "sampling", None)
    if renderer is None or sampling is None:
        return None
    longest = longest_assistant_turn(renderer.render(t.messages) for t in teacher)
    observed = f"the teacher's longest turn is {longest} tokens; the policy samples at most {sampling.max_new_tokens}"
    if longest <= sampling.max_new_tokens:
        return Check("turns fit the sampler", "PASS", observed, "")
    return Check("turns fit the sampler", "FAIL", observed, f"sample with max_new_tokens ≥ {longest}")


def run_doctor(factory: Callable[[], Env], policy: Policy | None = None, n: int = 20, group: int = 4,
               temperature: float = 1.0, seed: int = 0) -> list[Check]:
    """Every check for the env built by `factory` (and `policy`'s, when one is given), on `n` held-out tasks."""
    env = factory()
    tasks = env.tasks("eval", n, seed)
    teacher = run_episodes(factory, tasks, TeacherPolicy(), seed=seed)
    random_ = run_episodes(factory, tasks, RandomPolicy(), seed=seed)
    checks = [check_tool_schemas(env, tasks), check_agent_loop(factory, tasks[: min(5, n)]), check_teacher(teacher),
              check_determinism(factory, tasks, teacher), check_discrimination(teacher, random_),
              check_splits(factory, 4 * n)]
    exploits = check_exploits(env, tasks[: min(n, 3)])
    if exploits is not None:
        checks.append(exploits)
    problems = check_env(factory, n=min(n, 5))
    checks.append(Check("env contract (check_env)", "FAIL" if problems else "PASS",
                        "; ".join(problems[:3]) if problems else "reset/step/types/teacher hold",
                        "fix what check_env lists" if problems else ""))
    if policy is not None:
        sampled = run_episodes(factory, tasks, policy, group_size=group, seed=seed)
        eos = getattr(getattr(policy, "renderer", None), "eos_id", None)
        checks += [check_parse_rate(sampled, env, eos), check_beats_random(sampled, random_),
                   check_grpo_signal(sampled, group, temperature)]
        limit = check_turn_limit(teacher, policy)
        if limit is not None:
            checks.append(limit)
    return checks


def as_json(checks: list[Check]) -> list[dict[str, str]]:
    return [asdict(c) for c in checks]
