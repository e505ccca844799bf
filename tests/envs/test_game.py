from functools import partial

import pytest

from agentic_rl.envs import check_env, make_env
from agentic_rl.envs.game import GUESS_COST, feedback
from agentic_rl.policies import RandomPolicy, TeacherPolicy
from agentic_rl.runtime.parsing import format_tool_call
from agentic_rl.runtime.rollout import run_episodes


def test_feedback_counts_bulls_and_cows():
    assert feedback("123", "123") == (3, 0) and feedback("123", "321") == (1, 2) and feedback("123", "456") == (0, 0)
    assert feedback("1234", "4321") == (0, 4)


@pytest.mark.parametrize("digits", [3, 4])
def test_check_env_passes(digits):
    assert check_env(partial(make_env, "game", digits=digits, guesses=digits + 4), n=30) == []


def test_eval_secrets_are_never_trained_on():
    env = make_env("game")
    assert not {t.answer for t in env.tasks("train", 400)} & {t.answer for t in env.tasks("eval", 100)}


def test_teacher_wins_noisy_teacher_errs_random_loses():
    env = make_env("game")
    tasks = env.tasks("eval", 60)
    rate = lambda policy: sum(t.success for t in run_episodes(partial(make_env, "game"), tasks, policy)) / len(tasks)
    assert rate(TeacherPolicy()) >= 0.95 and rate(RandomPolicy()) <= 0.1
    noisy = run_episodes(partial(make_env, "game"), tasks, TeacherPolicy(noise={"repeat_guess": 1.0}))
    assert all(any(turn["stuck"] for turn in t.info["turn_info"]) for t in noisy)  # a repeat is a stuck turn


def test_reward_is_the_outcome_minus_the_guesses():
    env = make_env("game", guesses=3)
    task = env.tasks("eval", 1)[0]
    env.reset(task)
    wrong = "012" if task.answer != "012" else "345"
    obs = env.step(format_tool_call("guess", {"number": wrong})).observation[0]["content"]
    assert obs == f"{wrong}: {feedback(task.answer, wrong)[0]} bulls, {feedback(task.answer, wrong)[1]} cows"
    r = env.step(task.answer)
    assert r.episode.success and r.episode.episode_reward == pytest.approx(1 - GUESS_COST)
    env.reset(task)
    results = [env.step(format_tool_call("guess", {"number": wrong})) for _ in range(4)]
    assert results[-1].truncated and not results[-1].episode.success
    assert sum(x.reward for x in results) == pytest.approx(-4 * GUESS_COST)  # a loss still pays for its guesses
    env.reset(task)
    for _ in range(3):
        env.step(format_tool_call("guess", {"number": wrong}))
    assert env.tools.call("guess", {"number": wrong}).content.startswith("error: no guesses left")


@pytest.mark.parametrize("bad", ["11", "112", "abc", "0123", "secret", "１２３", "¹²³"])
def test_guesses_outside_the_rules_get_no_feedback_and_cost_a_guess(bad):
    env = make_env("game")
    task = env.tasks("eval", 1)[0]
    env.reset(task)
    obs = env.step(format_tool_call("guess", {"number": bad})).observation[0]["content"]
    assert obs.startswith("error: invalid guess") and "bulls" not in obs and env._guesses == 1


def test_exploit_probes_earn_no_more_than_giving_up():
    env = make_env("game")
    rows = env.probe_hacks(env.tasks("eval", 3))
    assert {r["exploit"] for r in rows} >= {"wrong_length", "repeated_digits", "not_digits", "ask_for_the_secret",
                                            "unicode_digits", "past_the_budget", "every_candidate_as_answer"}
    assert all(r["guarded_reward"] <= r["noop_reward"] + 1e-9 and not r["env_error"] for r in rows)
