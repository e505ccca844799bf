"""`agentic-rl eval`: the six families, their definitions on hand-made episodes, the bootstrap, and --compare."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentic_rl.cli import app
from agentic_rl.envs import make_env
from agentic_rl.envs.base import PERTURBATIONS
from agentic_rl.evaluation import families as ev
from agentic_rl.policies import HFPolicy, RandomPolicy, SamplingConfig, ScriptPolicy, TeacherPolicy
from agentic_rl.runtime.parsing import format_tool_call
from agentic_rl.runtime.rollout import run_episodes

factory = lambda **kw: make_env("tool_use", **kw)


def _metric(result, family, name):
    return result["overall"][family][name]["value"]


@pytest.fixture(scope="module")
def results():
    tasks = factory().tasks("eval", 40, 0)
    env = factory()
    out = {}
    for name, policy in {"teacher": TeacherPolicy(), "noisy": TeacherPolicy(dict(env.default_noise)),
                         "random": RandomPolicy()}.items():
        out[name], _ = ev.evaluate(factory, policy, tasks, k=2, seed=0)
    return out


def test_policies_are_ordered_and_every_family_is_in_the_json(results):
    s = {n: _metric(r, "final_answer", "success_rate") for n, r in results.items()}
    assert s["teacher"] == 1.0 and s["teacher"] >= s["noisy"] > s["random"] + 0.3
    r = json.loads(json.dumps(results["noisy"]))  # the result is plain JSON
    assert r["schema"] == ev.SCHEMA and r["families"] == list(ev.FAMILIES)
    assert set(r["overall"]) | {"regression"} == set(ev.FAMILIES) and "worse" in r["regression"]
    for m in ev.METRICS:
        entry = r["overall"][m.family][m.name]
        assert set(entry) == {"value", "ci95", "n", "better"}, m.name
    assert set(r["by_kind"]) == {"calc", "search", "trivial", "weather", "temperature", "two_step"}
    for kind in r["by_kind"].values():
        assert set(kind) == set(r["overall"]) - {"regression"}
    # the teacher is perfect where the metric has a direction; the noisy teacher's mistakes show up
    t, n = results["teacher"], results["noisy"]
    assert _metric(t, "robustness", "success_fault_0.5") == 1.0 and _metric(t, "robustness", "recovery_rate") == 1.0
    assert _metric(n, "robustness", "retry_after_fault_rate") < 0.8
    assert _metric(n, "trajectory", "premature_stop_rate") > 0 and _metric(t, "trajectory", "overdue_stop_rate") == 0
    assert all(_metric(t, "robustness", f"success_{how}") == 1.0 for how in PERTURBATIONS)
    assert _metric(n, "final_answer", "pass_hat_k") <= _metric(n, "final_answer", "success_rate") \
        <= _metric(n, "final_answer", "pass_at_k")


def test_intervals_contain_the_value_and_are_reproducible(results):
    for metrics in results["noisy"]["overall"].values():
        for name, m in metrics.items():
            if m["ci95"] is not None:
                assert m["ci95"][0] - 1e-9 <= m["value"] <= m["ci95"][1] + 1e-9, name
    rows = [(i % 10, {"x": (float(i % 3 == 0), 1.0)}) for i in range(40)]
    assert ev.aggregate(rows, seed=1) == ev.aggregate(rows, seed=1)
    assert ev.aggregate([(0, {"x": (1.0, 0.0)})])["x"]["value"] is None  # nothing to measure is null, not 0


def _one(task_kind: str, turns: list[str], tmp_path):
    """Play a script on the first held-out task of a kind (no faults) and return the episode's facts."""
    env = make_env("tool_use", fault_rate=0.0)
    task = next(t for t in env.tasks("eval", 60, 0) if t.kind == task_kind)
    path = tmp_path / "script.json"
    path.write_text(json.dumps(turns(task) if callable(turns) else turns))
    (traj,) = run_episodes(lambda: make_env("tool_use", fault_rate=0.0), [task], ScriptPolicy(path))
    return ev.episode_facts(traj, task, env, None)


def test_metric_definitions_on_hand_made_episodes(tmp_path):
    calc = lambda t: format_tool_call(*t.reference_calls[0])
    # read the question, call twice the same, then answer right: one redundant call, a loop, an overdue stop
    f = _one("calc", lambda t: [calc(t), calc(t), t.answer], tmp_path)
    assert f["success_rate"] == (1.0, 1.0) and f["redundant_calls_per_episode"] == (1, 1.0)
    assert f["loop_rate"] == (1.0, 1.0) and f["overdue_stop_rate"] == (1.0, 1.0)
    assert f["right_tool_rate"] == (1.0, 1.0) and f["argument_accuracy"] == (2, 2)
    # guessing without the tool: a premature stop, the wrong tool never called
    f = _one("calc", ["12345"], tmp_path)
    assert f["premature_stop_rate"] == (1.0, 1.0) and f["right_tool_rate"] == (0.0, 1.0)
    # a malformed call, then the right tool with wrong arguments
    f = _one("calc", ['<tool_call>{"name": "calculator"</tool_call>',
                      format_tool_call("calculator", {"expression": "1 + 1"}), "2"], tmp_path)
    assert f["valid_call_rate"] == (1, 2) and f["argument_accuracy"] == (0, 1)
    # a tool-free task: calling a tool breaks restraint; never answering is no answer
    f = _one("trivial", [format_tool_call("calculator", {"expression": "1 + 1"})] * 6, tmp_path)
    assert f["restraint_rate"] == (0.0, 1.0) and f["no_answer_rate"] == (1.0, 1.0)


def test_model_policy_cost_counts_its_own_tokens(tiny_dir):
    tasks = factory().tasks("eval", 4, 0)
    result, trajs = ev.evaluate(factory, HFPolicy(tiny_dir, SamplingConfig(max_new_tokens=16)), tasks, k=1,
                                robustness=False)
    gen = _metric(result, "cost", "generated_tokens_per_episode")
    assert gen == sum(sum(t.mask) for t in trajs) / len(trajs) > 0
    assert _metric(result, "cost", "prompt_tokens_per_episode") > 100  # the system prompt alone
    assert _metric(result, "robustness", "success_fault_0") is None  # robustness=False: not run, not zero


def test_perturbations_change_the_prompt_and_keep_the_task():
    for name in ("tool_use", "codefix"):
        env = make_env(name)
        for task in env.tasks("eval", 6, 0):
            for how in PERTURBATIONS:
                p = env.perturb(task, how)
                if p is None:
                    assert (name, how, task.get("lang")) == ("tool_use", "casing", "zh")  # no case in Chinese
                    continue
                assert p.prompt != task.prompt, (name, how)
                assert (p.id, p.answer, p.reference) == (task.id, task.answer, task.reference)
    with pytest.raises(ValueError, match="valid: rephrase"):
        make_env("tool_use").perturb(task, "shouting")


def test_compare_flags_a_worse_run_and_passes_itself(results, tmp_path):
    assert ev.compare(results["noisy"], results["noisy"]) == []
    worse = ev.compare(results["teacher"], results["random"])
    assert {"success_rate", "mean_reward"} <= {w["metric"] for w in worse}
    assert all(w["metric"] not in ("wall_seconds_per_episode", "tool_calls_per_episode") for w in worse)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(results["teacher"]))
    b.write_text(json.dumps(results["random"]))
    runner = CliRunner()
    r = runner.invoke(app, ["eval", "--compare", str(a), str(b)])
    assert r.exit_code == 1 and "success_rate" in r.output
    assert runner.invoke(app, ["eval", "--compare", str(a), str(a)]).exit_code == 0
    r = runner.invoke(app, ["eval", "--compare", str(a), str(tmp_path / "missing.json")])
    assert r.exit_code == 2 and "not found" in r.output


def test_eval_cli_writes_the_json_and_gates_on_a_baseline(results, tmp_path):
    base = tmp_path / "teacher.json"
    base.write_text(json.dumps(results["teacher"]))
    out = tmp_path / "random.json"
    r = CliRunner().invoke(app, ["eval", "--policy", "random", "--n", "10", "--k", "1", "--no-robustness",
                                 "--json", str(out), "--baseline", str(base)])
    assert r.exit_code == 1, r.output
    saved = json.loads(out.read_text())
    assert saved["policy"] == "random" and saved["regression"]["baseline"] == str(base)
    assert any(w["metric"] == "success_rate" for w in saved["regression"]["worse"])
    r = CliRunner().invoke(app, ["eval", "--policy", "nonsense"])
    assert r.exit_code == 2 and "valid:" in r.output


def test_codefix_teacher_stops_on_time_and_finish_is_not_an_overdue_call():
    from agentic_rl.envs.codefix.env import CodeFixEnv

    env = CodeFixEnv()
    tasks = env.tasks("eval", 3, 0)
    (traj, *_) = run_episodes(CodeFixEnv, tasks, TeacherPolicy())
    f = ev.episode_facts(traj, tasks[0], env, None)
    assert f["success_rate"] == (1.0, 1.0) and f["overdue_stop_rate"] == (0.0, 1.0)
    assert env.solved_at(tasks[0], traj.messages) == traj.n_turns - 1  # the passing test run, then finish()
    assert "right_tool_rate" not in f and "restraint_rate" not in f  # codefix has no reference calls
