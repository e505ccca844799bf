"""`agentic-rl doctor`: the seed's readiness checklist passes on a sound env and names what is wrong otherwise."""

from __future__ import annotations

import json
import random

import pytest
from typer.testing import CliRunner

from agentic_rl.cli import app
from agentic_rl.envs import make_env
from agentic_rl.envs.codefix.sandbox import isolation_available
from agentic_rl.envs.tool_env import Score
from agentic_rl.envs.tool_use import ToolUseEnv
from agentic_rl.evaluation.doctor import run_doctor
from agentic_rl.policies import HFPolicy, SamplingConfig, TeacherPolicy


def _by_name(checks):
    return {c.name: c for c in checks}


def test_sound_env_passes_and_cli_exits_zero(tmp_path):
    checks = _by_name(run_doctor(lambda: make_env("tool_use"), n=8))
    assert all(c.verdict == "PASS" for c in checks.values()), [c for c in checks.values() if c.verdict != "PASS"]
    out = tmp_path / "doctor.json"
    r = CliRunner().invoke(app, ["doctor", "--env", "tool_use", "--n", "6", "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert {c["verdict"] for c in json.loads(out.read_text())} == {"PASS"}


class NoisyRewardEnv(ToolUseEnv):
    """A broken env: the reward has noise in it, so the same trajectory scores differently."""

    def step(self, action):
        result = super().step(action)
        result.reward += random.random() * 0.01
        return result


class UnsolvableEnv(ToolUseEnv):
    """A broken env: every answer is judged wrong."""

    def score(self, task, answer):
        return Score(0.0, False)


def test_broken_envs_fail_with_a_next_step():
    checks = _by_name(run_doctor(NoisyRewardEnv, n=6))
    assert checks["reward is deterministic"].verdict == "FAIL"
    assert "randomness" in checks["reward is deterministic"].next_step
    checks = _by_name(run_doctor(UnsolvableEnv, n=6))
    assert checks["env is solvable"].verdict == "FAIL" and checks["reward discriminates"].verdict != "PASS"


def test_untrained_policy_is_told_to_do_sft_first(tiny_dir):
    policy = HFPolicy(tiny_dir, SamplingConfig(temperature=1.0, max_new_tokens=24))
    checks = _by_name(run_doctor(lambda: make_env("tool_use"), policy, n=4, group=2))
    assert checks["policy's turns parse"].verdict == "FAIL"
    assert "do SFT first" in checks["policy's turns parse"].next_step
    r = CliRunner().invoke(app, ["doctor", "--env", "tool_use", "--policy", str(tiny_dir), "--n", "3", "--group", "2"])
    assert r.exit_code == 1 and "FAIL" in r.output


def test_turns_the_sampler_would_cut_off_fail_with_the_limit_to_set(tiny_dir):
    from agentic_rl.evaluation.doctor import check_turn_limit
    from agentic_rl.runtime.rollout import run_episodes

    env = make_env("tool_use")
    tasks = [t for t in env.tasks("eval", 40) if t.kind == "two_step"][:3]  # calls with arguments: the long turns
    teacher = run_episodes(lambda: make_env("tool_use"), tasks, TeacherPolicy(), seed=0)
    short = check_turn_limit(teacher, HFPolicy(tiny_dir, SamplingConfig(max_new_tokens=8)))
    assert short.verdict == "FAIL" and "samples at most 8" in short.observed
    longest = int(short.next_step.rsplit(" ", 1)[1])
    assert longest > 8 and f"longest turn is {longest} tokens" in short.observed
    assert check_turn_limit(teacher, HFPolicy(tiny_dir, SamplingConfig(max_new_tokens=longest))).verdict == "PASS"
    assert check_turn_limit(teacher, TeacherPolicy()) is None  # no tokens, no limit
    checks = _by_name(run_doctor(lambda: make_env("tool_use"), HFPolicy(tiny_dir, SamplingConfig(max_new_tokens=8)),
                                 n=3, group=2))
    assert checks["turns fit the sampler"].verdict == "FAIL"


def test_variance_from_shaping_alone_is_not_a_learning_signal():
    from agentic_rl.evaluation.doctor import check_grpo_signal
    from agentic_rl.runtime.trajectory import Trajectory

    def traj(reward, success):
        return Trajectory("tool_use", "t", "calc", 0, [], [reward], reward, "ok", success)

    no_success = [traj(-0.1, False), traj(0.0, False)] * 4  # every group varies, by call costs only
    c = check_grpo_signal(no_success, group=2, temperature=1.0)
    assert c.verdict == "WARN" and "more SFT" in c.next_step
    mixed = [traj(1.0, True), traj(0.0, False)] * 4
    assert check_grpo_signal(mixed, group=2, temperature=1.0).verdict == "PASS"
    flat = [traj(0.0, False)] * 8
    assert check_grpo_signal(flat, group=2, temperature=1.0).verdict == "FAIL"


@pytest.mark.skipif(not isolation_available(), reason="the probes run exploit code: only in the full sandbox")
def test_exploit_probes_are_a_check_where_the_env_has_them():
    from agentic_rl.envs.codefix.env import CodeFixEnv
    from agentic_rl.evaluation.doctor import check_exploits

    assert check_exploits(make_env("tool_use"), make_env("tool_use").tasks("eval", 2, 0)) is None
    env = CodeFixEnv()
    task = next(t for t in env.tasks("eval", 6, 0) if t.get("module") == "truncate")  # a mutant that halts
    check = check_exploits(env, [task])
    assert check.verdict == "PASS" and "exploit probes ≤ no-op" in check.observed


def test_a_random_agent_is_told_to_do_sft_first_and_a_competent_one_passes():
    r = CliRunner().invoke(app, ["doctor", "--env", "tool_use", "--policy", "random", "--n", "12"])
    assert r.exit_code == 1 and "do SFT first" in " ".join(r.output.split())
    checks = _by_name(run_doctor(lambda: make_env("tool_use"), TeacherPolicy(dict(ToolUseEnv.default_noise)), n=12))
    assert all(c.verdict != "FAIL" for c in checks.values()), [c for c in checks.values() if c.verdict == "FAIL"]
    assert checks["policy beats random"].verdict == "PASS"


def test_an_exploit_that_ends_episodes_as_env_errors_fails_the_check():
    from agentic_rl.envs.math.env import MathEnv
    from agentic_rl.evaluation.doctor import check_exploits

    class CrashesOnLongAnswers(MathEnv):  # a reward that a 30 KB answer makes raise: the agent could opt out
        def score(self, task, answer):
            if len(answer) > 1000:
                raise MemoryError("the grader ran out of memory")
            return super().score(task, answer)

    env = CrashesOnLongAnswers(mode="direct")
    check = check_exploits(env, env.tasks("eval", 2))
    assert check.verdict == "FAIL" and "huge_answer" in check.observed and "env error" in check.observed
    assert check_exploits(MathEnv(mode="direct"), env.tasks("eval", 2)).verdict == "PASS"
