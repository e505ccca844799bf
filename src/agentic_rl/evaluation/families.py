"""`agentic-rl eval`: a policy on the held-out split, scored in the six families of agent evaluation.

  final_answer  success rate, pass@k and pass^k (all k attempts succeed, as in τ-bench), mean reward
  tool_calling  valid-call rate, right-tool rate and argument accuracy against the reference solution, restraint
  trajectory    turns and tool calls per episode, redundant calls, loop rate; stopping: premature, overdue, no answer
  robustness    success with tool faults injected at 0 / 0.2 / 0.5 and under four prompt perturbations; recovery
  cost          generated and prompt tokens, tool calls and wall seconds, per episode and per success
  regression    this run against a baseline JSON (`compare`): every metric that got worse beyond its interval

Every metric but the wall-clock ones is a ratio of sums over episodes, Σ num / Σ den (a rate: den counts the episodes it
applies to; a per-episode mean: den = 1 each), so one bootstrap serves all of them: tasks are resampled with replacement
(an episode's k samples stay together, since they share a task) and the 2.5th and 97.5th percentiles of the resampled
ratios are the 95 % interval. A metric with nothing to measure (restraint on an env without tool-free tasks) has value
null; a run with one task has no interval.

The JSON schema (`SCHEMA`, documented in README): {"schema", "env", "policy", "split", "tasks", "k", "seed",
"temperature", "wall_seconds", "families", "overall": {family: {metric: {"value", "ci95", "n", "better"}}},
"by_kind": {kind: same as overall}, "regression": {"baseline", "worse": [...]}} — `better` is "higher", "lower"
or null (informational: not compared).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..envs.base import FAULT_TEXT, PERTURBATIONS, Env, Task
from ..policies.base import Policy
from ..runtime.render import Renderer
from ..runtime.rollout import run_episodes
from ..runtime.trajectory import Trajectory
from ..ui import progress_line
from .summary import (
    EVAL_SEED_OFFSET,  # the same sampling stream as training-time evaluation
)

SCHEMA = "agentic-rl.eval/1"
FAMILIES = ("final_answer", "tool_calling", "trajectory", "robustness", "cost", "regression")
FAULT_LEVELS = (0.0, 0.2, 0.5)
BOOTSTRAP = 1000

Better = Literal["higher", "lower"] | None


@dataclass(frozen=True)
class Metric:
    family: str
    name: str
    better: Better
    doc: str


METRICS: tuple[Metric, ...] = (
    Metric("final_answer", "success_rate", "higher", "episodes whose final answer is correct"),
    Metric("final_answer", "pass_at_k", "higher", "tasks where at least one of k attempts succeeds"),
    Metric("final_answer", "pass_hat_k", "higher", "tasks where all k attempts succeed (τ-bench's pass^k)"),
    Metric("final_answer", "mean_reward", "higher", "episode reward, shaping included"),
    Metric("tool_calling", "valid_call_rate", "higher", "turns that try to call a tool and parse and match its schema"),
    Metric("tool_calling", "right_tool_rate", "higher", "tool-needing episodes whose first call is the reference's"),
    Metric("tool_calling", "argument_accuracy", "higher", "calls of a reference tool with the reference's arguments"),
    Metric("tool_calling", "restraint_rate", "higher", "episodes of tool-free tasks without any tool call"),
    Metric("trajectory", "turns_per_episode", "lower", "assistant turns"),
    Metric("trajectory", "tool_calls_per_episode", None, "valid tool calls (faulted ones included)"),
    Metric("trajectory", "redundant_calls_per_episode", "lower", "calls repeating an earlier call that got through"),
    Metric("trajectory", "loop_rate", "lower", "episodes where the env's stuck detector fired (a repeated action with "
                                               "the same observation, A-B-A-B, a re-read of what is unchanged)"),
    Metric("trajectory", "premature_stop_rate", "lower", "episodes that stopped without success before the answer "
                                                         "could be known"),
    Metric("trajectory", "overdue_stop_rate", "lower", "episodes that made tool calls after the answer was known"),
    Metric("trajectory", "no_answer_rate", "lower", "episodes with no answer: turn or token limit, or an empty one"),
    *(Metric("robustness", f"success_fault_{p:g}", "higher", f"success with transient tool faults at rate {p:g}")
      for p in FAULT_LEVELS),
    *(Metric("robustness", f"success_{how}", "higher", f"success with the prompt perturbed ({how}), no faults")
      for how in PERTURBATIONS),
    Metric("robustness", "recovery_rate", "higher", "episodes that met a fault (at 0.2 and 0.5) and still succeeded"),
    Metric("robustness", "retry_after_fault_rate", "higher", "faults answered by calling the same tool again"),
    Metric("cost", "generated_tokens_per_episode", "lower", "tokens the policy generated (null without a tokenizer)"),
    Metric("cost", "prompt_tokens_per_episode", None, "context tokens: system, user and tool observations"),
    Metric("cost", "tool_calls_per_success", "lower", "valid tool calls per successful episode"),
    Metric("cost", "generated_tokens_per_success", "lower", "generated tokens per successful episode"),
)
BY_NAME = {m.name: m for m in METRICS}


# --- per-episode facts: (num, den) for every metric an episode contributes to --------------------------------------

def _calls(t: Trajectory) -> list[tuple[int, str, Any, str]]:
    """(turn, tool name, arguments, observation) of each valid tool call, in order."""
    out, turn = [], 0
    for i, m in enumerate(t.messages):
        if m["role"] != "assistant":
            continue
        turn += 1
        for j, c in enumerate(m.get("tool_calls") or []):  # parallel calls: the j-th tool message answers the j-th
            k = i + 1 + j
            obs = t.messages[k]["content"] if k < len(t.messages) and t.messages[k]["role"] == "tool" else ""
            out.append((turn, c["function"]["name"], c["function"]["arguments"], str(obs)))
    return out


def _key(name: str, args: Any) -> tuple[str, str]:
    """A call as a hashable action: the tool and its arguments in a canonical order."""
    return name, json.dumps(args, sort_keys=True, ensure_ascii=False)


def episode_facts(t: Trajectory, task: Task, env: Env, renderer: Renderer | None) -> dict[str, tuple[float, float]]:
    """What one episode contributes to the main-run metrics, as (num, den) pairs."""
    f: dict[str, tuple[float, float]] = {}
    turns = t.info.get("turn_info") or []
    calls = _calls(t)
    f["success_rate"] = (float(t.success), 1.0)
    f["mean_reward"] = (t.reward, 1.0)
    attempts = [x for x in turns if x.get("parsed") in ("ToolCall", "ParseError")]
    f["valid_call_rate"] = (sum(x.get("parsed") == "ToolCall" for x in attempts), len(attempts))
    if env.reference_solutions:
        ref = task.reference_calls
        if ref:
            f["right_tool_rate"] = (float(bool(calls) and calls[0][1] == ref[0][0]), 1.0)
            ref_args = {name: [a for n, a in ref if n == name] for name, _ in ref}
            on_ref = [(name, args) for _, name, args, _ in calls if name in ref_args]
            f["argument_accuracy"] = (sum(args in ref_args[name] for name, args in on_ref), len(on_ref))
        else:
            f["restraint_rate"] = (float(not calls), 1.0)
    f["turns_per_episode"] = (t.n_turns, 1.0)
    f["tool_calls_per_episode"] = (len(calls), 1.0)
    through = set()
    redundant = 0
    for _, name, args, obs in calls:
        key = _key(name, args)
        redundant += key in through
        if obs != FAULT_TEXT:
            through.add(key)
    f["redundant_calls_per_episode"] = (redundant, 1.0)
    f["loop_rate"] = (float(any(x.get("stuck") for x in turns)), 1.0)
    known = env.solved_at(task, t.messages)
    stopped = t.outcome == "ok"
    f["premature_stop_rate"] = (float(stopped and not t.success and (known is None or t.n_turns <= known)), 1.0)
    if known is not None:
        # a call once the answer is known, other than the call that ended the episode (codefix's finish())
        ended_by_call = stopped and bool(calls) and calls[-1][0] == t.n_turns
        after = [c for c in (calls[:-1] if ended_by_call else calls) if c[0] > known]
        f["overdue_stop_rate"] = (float(bool(after)), 1.0)
    f["no_answer_rate"] = (float(t.outcome == "truncated" or bool(t.info.get("no_answer"))), 1.0)
    gen, prompt = _tokens(t, renderer)
    if gen is not None:
        f["generated_tokens_per_episode"] = (gen, 1.0)
        f["prompt_tokens_per_episode"] = (prompt, 1.0)
        f["generated_tokens_per_success"] = (gen, float(t.success))
    f["tool_calls_per_success"] = (len(calls), float(t.success))
    return f


def _tokens(t: Trajectory, renderer: Renderer | None) -> tuple[int | None, int | None]:
    """Generated and context tokens: as sampled for a model policy, else rendered with `renderer` (same template)."""
    if t.mask is not None and t.ids is not None:
        return sum(t.mask), len(t.ids) - sum(t.mask)
    if renderer is None:
        return None, None
    r = renderer.render(t.messages)
    return sum(r.mask), len(r.ids) - sum(r.mask)


def fault_facts(t: Trajectory) -> dict[str, tuple[float, float]]:
    """Recovery: whether an episode that met a fault succeeded, and how many faults the same tool answered next."""
    turns = t.info.get("turn_info") or []
    faults = [i for i, x in enumerate(turns) if x.get("fault")]
    if not faults:
        return {}
    repeated = sum(i + 1 < len(turns) and turns[i + 1].get("tool") == turns[i].get("tool") for i in faults)
    return {"recovery_rate": (float(t.success), 1.0), "retry_after_fault_rate": (repeated, len(faults))}


# --- aggregation with a task-level bootstrap -----------------------------------------------------------------------

def aggregate(rows: Sequence[tuple[int, dict[str, tuple[float, float]]]], seed: int = 0) -> dict[str, dict[str, Any]]:
    """rows: (task index, facts) → {metric: {"value", "ci95", "n"}} with the bootstrap over tasks."""
    tasks = sorted({i for i, _ in rows})
    pos = {t: j for j, t in enumerate(tasks)}
    names = sorted({k for _, f in rows for k in f})
    num = np.zeros((len(tasks), len(names)))
    den = np.zeros((len(tasks), len(names)))
    col = {n: j for j, n in enumerate(names)}
    for i, f in rows:
        for k, (a, b) in f.items():
            num[pos[i], col[k]] += a
            den[pos[i], col[k]] += b
    out: dict[str, dict[str, Any]] = {}
    if not tasks:
        return out
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(tasks), size=(BOOTSTRAP, len(tasks)))
    bn, bd = num[idx].sum(axis=1), den[idx].sum(axis=1)  # (BOOTSTRAP, metrics)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = np.where(bd > 0, bn / np.where(bd > 0, bd, 1), np.nan)
    for n, j in col.items():
        total = den[:, j].sum()
        if total <= 0:
            out[n] = {"value": None, "ci95": None, "n": 0}
            continue
        value = float(num[:, j].sum() / total)
        r = ratios[:, j][~np.isnan(ratios[:, j])]
        ci = [float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))] if len(tasks) > 1 and len(r) else None
        out[n] = {"value": value, "ci95": ci, "n": round(total) if float(total).is_integer() else float(total)}
    return out


def _families(values: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Metric values → {family: {metric: {..., "better"}}}; every metric listed, null where no episode counts."""
    out: dict[str, dict[str, Any]] = {f: {} for f in FAMILIES if f != "regression"}
    for m in METRICS:
        v = values.get(m.name, {"value": None, "ci95": None, "n": 0})
        out[m.family][m.name] = {**v, "better": m.better}
    return out


# --- the evaluation ------------------------------------------------------------------------------------------------

def evaluate(env_factory: Callable[..., Env], policy: Policy, tasks: Sequence[Task], k: int = 1, seed: int = 0,
             renderer: Renderer | None = None, robustness: bool = True, robustness_tasks: int | None = None,
             progress: Callable[[str], None] | None = None) -> tuple[dict[str, Any], list[Trajectory]]:
    """Run the six-family evaluation; return the result dict (the JSON schema above) and the main run's trajectories.

    `env_factory(**overrides)` builds the env; robustness passes `fault_rate` where the env supports faults.
    The main run samples k attempts per task; each robustness condition runs the first `robustness_tasks` tasks
    (default: all) once.
    """
    if k < 1:
        raise ValueError(f"k must be ≥ 1, got {k}")
    say = progress or (lambda _msg: None)
    env = env_factory()
    t0 = time.monotonic()
    say(f"main run: {len(tasks)} tasks × k={k}")
    main = run_episodes(env_factory, tasks, policy, group_size=k, seed=seed + EVAL_SEED_OFFSET,
                        progress=_counting(say, "main run: episodes"))
    wall = time.monotonic() - t0
    by_id = {t.id: (i, t) for i, t in enumerate(tasks)}
    rows = [(by_id[t.task_id][0], episode_facts(t, by_id[t.task_id][1], env, renderer)) for t in main]
    kinds = {i: t.kind for i, t in enumerate(tasks)}
    for task_i in range(len(tasks)):  # pass@k and pass^k are per task
        got = [t.success for t in main if by_id[t.task_id][0] == task_i]
        rows.append((task_i, {"pass_at_k": (float(any(got)), 1.0), "pass_hat_k": (float(all(got)), 1.0)}))
    if robustness:
        rows += _robustness(env_factory, env, policy, tasks[:robustness_tasks], seed, say)
    overall = _families(aggregate(rows, seed))
    by_kind = {kd: _families(aggregate([r for r in rows if kinds[r[0]] == kd], seed))
               for kd in sorted(set(kinds.values()))}
    successes = sum(t.success for t in main)
    overall["cost"]["wall_seconds_per_episode"] = {"value": wall / max(len(main), 1), "ci95": None, "n": len(main),
                                                   "better": None}
    overall["cost"]["wall_seconds_per_success"] = {"value": wall / successes if successes else None, "ci95": None,
                                                   "n": successes, "better": None}
    result = {"schema": SCHEMA, "env": env.name, "policy": getattr(policy, "name", type(policy).__name__),
              "split": tasks[0].split if tasks else "eval", "tasks": len(tasks), "k": k, "seed": seed,
              "temperature": getattr(getattr(policy, "sampling", None), "temperature", None),
              "robustness_tasks": len(tasks[:robustness_tasks]) if robustness else 0,
              "wall_seconds": round(time.monotonic() - t0, 2), "families": list(FAMILIES),
              "overall": overall, "by_kind": by_kind, "regression": {"baseline": None, "worse": []}}
    env.close()
    return result, main


def _counting(say: Callable[[str], None], what: str) -> Callable[[int, int], None]:
    """A `run_episodes` progress callback that says how many episodes are done, the time so far and an ETA."""
    started = time.monotonic()
    return lambda done, total: say(progress_line(what, done, total, started))


def _robustness(env_factory: Callable[..., Env], env: Env, policy: Policy, tasks: Sequence[Task], seed: int,
                say: Callable[[str], None]) -> list[tuple[int, dict[str, tuple[float, float]]]]:
    rows: list[tuple[int, dict[str, tuple[float, float]]]] = []
    pos = {t.id: i for i, t in enumerate(tasks)}
    takes_faults = env.supports_faults
    for p in FAULT_LEVELS if takes_faults else ():
        say(f"robustness: tool faults at {p:g}")
        factory = lambda p=p: env_factory(fault_rate=p)
        for t in run_episodes(factory, tasks, policy, seed=seed + EVAL_SEED_OFFSET + 1,
                              progress=_counting(say, f"robustness, tool faults at {p:g}: episodes")):
            facts = {f"success_fault_{p:g}": (float(t.success), 1.0)}
            if p > 0:
                facts.update(fault_facts(t))
            rows.append((pos[t.task_id], facts))
    for how in PERTURBATIONS:
        perturbed = [(i, env.perturb(t, how)) for i, t in enumerate(tasks)]
        pairs = [(i, pt) for i, pt in perturbed if pt is not None]
        if not pairs:
            continue
        say(f"robustness: prompt {how}")
        # without faults where the env has them, so the perturbation is the only change from success_fault_0
        factory = (lambda: env_factory(fault_rate=0.0)) if takes_faults else env_factory
        trajs = run_episodes(factory, [pt for _, pt in pairs], policy, seed=seed + EVAL_SEED_OFFSET + 2,
                             progress=_counting(say, f"robustness, prompt {how}: episodes"))
        rows += [(i, {f"success_{how}": (float(t.success), 1.0)}) for (i, _), t in zip(pairs, trajs)]
    return rows


# --- regression ----------------------------------------------------------------------------------------------------

def compare(baseline: dict[str, Any], candidate: dict[str, Any]) -> list[dict[str, Any]]:
    """Every overall metric where `candidate` is worse than `baseline` beyond the baseline's 95 % interval.

    Worse means: for a higher-is-better metric, the candidate's value is below the interval's low end; for a
    lower-is-better one, above its high end. Informational metrics (better = null) and metrics either side did not
    measure are skipped. Without an interval (a one-task run) any change in the bad direction counts.
    """
    for name, d in (("baseline", baseline), ("candidate", candidate)):
        if d.get("schema") != SCHEMA:
            raise ValueError(f"{name} is not an agentic-rl eval result (schema {d.get('schema')!r}, want {SCHEMA!r})")
    if baseline["env"] != candidate["env"]:
        raise ValueError(f"cannot compare runs on different envs: {baseline['env']} vs {candidate['env']}")
    worse = []
    for family, metrics in baseline["overall"].items():
        for name, a in metrics.items():
            b = candidate["overall"].get(family, {}).get(name)
            if a.get("better") is None or b is None or a["value"] is None or b["value"] is None:
                continue
            lo, hi = a["ci95"] or (a["value"], a["value"])
            bad = b["value"] < lo - 1e-12 if a["better"] == "higher" else b["value"] > hi + 1e-12
            if bad:
                worse.append({"family": family, "metric": name, "baseline": a["value"], "baseline_ci95": [lo, hi],
                              "candidate": b["value"], "better": a["better"]})
    return worse


def load_result(path: str | Path) -> dict[str, Any]:
    """An eval result written by `agentic-rl eval --json` (or a run's eval/<stage>.json), checked to be one: valid
    JSON alone is not enough to compare."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"eval result not found: {path}") from None
    except IsADirectoryError:
        raise ValueError(f"{path} is a directory, not an eval result (a JSON file from agentic-rl eval --json)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from None
    what = f"{path} is not an agentic-rl eval result (a JSON file from agentic-rl eval --json)"
    if not isinstance(data, dict):
        raise ValueError(f"{what}: it holds a JSON {type(data).__name__}, not an object")
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{what}: its schema is {data.get('schema')!r}, want {SCHEMA!r}")
    overall = data.get("overall")
    metric_ok = lambda m: isinstance(m, dict) and {"value", "ci95", "better"} <= set(m)
    if not isinstance(data.get("env"), str) or not isinstance(overall, dict) or not all(
            isinstance(ms, dict) and all(metric_ok(m) for m in ms.values()) for ms in overall.values()):
        raise ValueError(f"{what}: it lacks the schema's env or overall metrics (value, ci95, better)")
    return data


def summary_table(result: dict[str, Any]) -> Any:
    """The overall metrics as a rich table: family, metric, value and its 95 % interval; success per task kind."""
    from rich.table import Table

    table = Table(title=f"eval: {result['policy']} on {result['env']} ({result['tasks']} held-out tasks, "
                        f"k={result['k']})")
    for col in ("family", "metric", "value", "95% interval"):
        table.add_column(col, justify="right" if col in ("value", "95% interval") else "left")
    for family, metrics in result["overall"].items():
        for name, m in metrics.items():
            ci = m.get("ci95")
            table.add_row(family, name, "—" if m["value"] is None else f"{m['value']:.4g}",
                          f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
            family = ""
    for kind, fams in result["by_kind"].items():
        m = fams["final_answer"]["success_rate"]
        table.add_row("by kind" if kind == next(iter(result["by_kind"])) else "", f"success_rate ({kind})",
                      "—" if m["value"] is None else f"{m['value']:.3f}",
                      f"[{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}]" if m["ci95"] else "")
    worse = result["regression"]["worse"]
    if result["regression"]["baseline"]:
        table.add_row("regression", "worse than baseline", str(len(worse)), ", ".join(w["metric"] for w in worse))
    return table
