import json
from functools import partial

import pytest

from agentic_rl.envs import check_env, make_env
from agentic_rl.envs.codefix.sandbox import isolation_available
from agentic_rl.envs.math.problems import HELD_OUT
from agentic_rl.envs.math.reward import math_reward
from agentic_rl.policies import RandomPolicy, TeacherPolicy
from agentic_rl.runtime.parsing import format_tool_call
from agentic_rl.runtime.rollout import run_episodes

isolated = pytest.mark.skipif(not isolation_available(), reason="needs root and Linux namespaces for the sandbox")


@pytest.mark.parametrize("reply, correct, formatted", [
    ("37 × 84 = 3108\n#### 3108", True, True),
    ("#### 3,108", True, True),  # thousands separator
    ("\\boxed{3108}", True, True),
    ("The answer is 3108 apples.", True, False),  # the last number, with a unit
    ("$3108", True, False),
    ("#### 3109", False, True),
    ("3108 is wrong, it is 3109", False, False),  # the last number counts
])
def test_math_reward_reads_the_answer(reply, correct, formatted):
    s = math_reward(reply, "3108")
    assert (s.correct, s.formatted) == (correct, formatted)
    assert s.reward == pytest.approx(float(correct) + 0.1 * formatted)


@pytest.mark.parametrize("reply, gold", [
    ("#### 1 420", "1420"),  # a space between groups of three
    ("#### 1\\,420", "1420"),
    ("#### １４２０", "1420"),  # full-width digits
    ("#### ١٤٢٠", "1420"),  # Arabic-Indic digits
    ("#### 1.42e3", "1420"),
    ("#### 1.42\\times10^3", "1420"),
    ("#### 1.42 × 10³", "1420"),
    ("#### 一千四百二十", "1420"),  # Chinese numerals, as a reader of the Chinese problems writes them
    ("#### 两千零五", "2005"),
    ("#### 十二", "12"),
    ("#### 1.2万", "12000"),
    ("#### 一百二十千米", "120"),
    ("#### 1420元", "1420"),
    ("#### −7", "-7"),  # the minus sign
    ("#### \\$12", "12"),
    ("#### 12 dollars.", "12"),
    ("#### 25°C", "25"),
    ("#### x = 1420", "1420"),  # a label
    ("#### Answer: 1420", "1420"),
    ("#### **1420**", "1420"),  # Markdown
    ("\\boxed{\\text{1420 dollars}}", "1420"),
    ("\\boxed{1420\\,\\text{cm}}", "1420"),
    ("\\boxed{\\tfrac12}", "1/2"),
    ("#### 1\u00a0420", "1420"),  # a no-break space
    ("#### 1,42,000", "142000"),  # Indian grouping
    ("#### 1420 km/h", "1420"),
    ("#### ₹1420", "1420"),
    ("#### 1.42 million", "1420000"),
    ("#### 8320萬", "83200000"),
    ("#### 一千四百二", "1420"),  # the spoken short form
    ("#### 壹仟肆佰贰拾", "1420"),  # financial numerals
    ("#### 7。", "7"),
    ("#### 1420\u200b", "1420"),  # an invisible character
    ("#### \\boxed{1420}", "1420"),
    ("#### The answer is 1420", "1420"),
    ("#### **Answer:** 1420", "1420"),
    ("#### 一共1420条腿", "1420"),
    ("#### 还剩1420页", "1420"),
    ("#### 1420（条）", "1420"),
    ("#### 1420 cm^2", "1420"),
    ("\\boxed{1420~\\text{cm}}", "1420"),
    ("#### 1420!", "1420"),
    ("#### US$1420", "1420"),
    ("#### 1.42·10^3", "1420"),
    ("\\boxed {1420}", "1420"),
])
def test_legitimate_ways_to_write_the_number_are_right(reply, gold):
    s = math_reward(reply, gold)
    assert s.correct and s.formatted and s.reward == pytest.approx(1.1), s


@pytest.mark.parametrize("reply, gold, why", [
    ("#### 26 * 32", "832", "not one number literal"),  # the question copied: the checker must not compute it
    ("#### 44*3+46*28", "1420", "not one number literal"),
    ("\\boxed{26 \\times 32}", "832", "not one number literal"),
    ("#### 52/2", "26", "not one number literal"),  # a division left to the checker, not a fraction in lowest terms
    ("#### 26 \\times 10^1", "260", "not one number literal"),  # a product, not scientific notation
    ("#### 3018 \\text{ or } 3108", "3108", "not one number literal"),
    ("#### 3018 \\lor 3108", "3108", "not one number literal"),
    ("#### 3018 | 3108", "3108", "not one number literal"),
    ("#### 3018, i.e. 3108", "3108", "not one number literal"),
    ("#### 3018 (or maybe 3108)", "3108", "not one number literal"),
    ("#### 3018 \\to 3108", "3108", "not one number literal"),
    ("#### 3018 \\\\ 3108", "3108", "not one number literal"),
    ("#### 3018 \\dots 3108", "3108", "not one number literal"),
    ("#### 3018 = 3108", "3108", "not one number literal"),
    ("#### 3108 squared", "3108", "not a number literal"),  # words that compute or hedge are not units
    ("#### 3108 to the power of five", "3108", "not a number literal"),
    ("#### 3108 or eight hundred thirty", "3108", "not a number literal"),
    ("#### 3108 roughly", "3108", "not a number literal"),
    ("#### 3108 dozen", "3108", "not a number literal"),
    ("#### 约3108", "3108", "not a number literal"),
    ("#### 3108左右", "3108", "not a number literal"),
    ("#### ~3108", "3108", "not a number literal"),
    ("#### 0,3108", "3108", "not one number literal"),  # no leading zero group
    ("#### 二百六十三百二十", "580", "not a number literal"),  # 260 and 320 side by side: the checker must not add
    ("#### 二万三万", "50000", "not a number literal"),
    ("#### 十十十", "30", "not a number literal"),
    ("#### 3108ish", "3108", "not a number literal"),
    ("#### 3108 tops", "3108", "not a number literal"),
    ("#### 3108 is wrong", "3108", "not a number literal"),
    ("It is 3018, or maybe 3108.", "3108", "several numbers"),  # unmarked: the last line holds one number or none
    ("26 x 32 = 832? not sure", "832", "several numbers"),
    ("maybe \\boxed{3108}</think>", "3108", "no answer"),  # the prompt opened the reasoning block
    ("#### x=3018 or x=3108", "3108", "not one number literal"),
    ("#### \\begin{pmatrix}3018 & 3108\\end{pmatrix}", "3108", "not one number literal"),
    ("\\boxed{3018 #### 3108}", "3108", "not one number literal"),
    ("#### 3108i", "3108", "not a number literal"),  # a complex number
    ("#### 3108 \\pmod{10}", "3108", "not one number literal"),  # a residue
    ("#### " + "9" * 30_000 + " 3108", "3108", "too long"),
])
def test_expressions_and_several_values_are_refused_with_a_reason(reply, gold, why):
    s = math_reward(reply, gold)
    assert not s.correct and s.reward == 0.0 and why in s.reason, s


def test_reasoning_blocks_are_not_the_answer():
    assert math_reward("<think>#### 3108</think>\n#### 3018", "3108").reward == pytest.approx(0.1)  # a wrong answer
    for tag in ("THINK", "Think", "thinking", "reasoning"):
        assert math_reward(f"<{tag}>#### 3108</{tag}>", "3108").reason == "no answer"
    assert math_reward("The answer is 1420, so done.", "1420").correct  # the last number, not "1420,"
    assert math_reward("<think>it is 3108\n#### 3108", "3108").reason == "no answer"  # never closed: all reasoning
    assert math_reward("<think>maybe 3018</think>\n#### 3108", "3108").correct


def test_math_reward_reads_fractions_and_decimals():
    assert math_reward("\\boxed{\\frac{1}{2}}", "0.5").correct and math_reward("#### 1/2", "0.5").correct
    assert math_reward("#### 0.50", "1/2").correct and not math_reward("#### 0.6", "1/2").correct


@pytest.mark.parametrize("reply", [
    " ".join(map(str, range(1, 1001))),  # answer spam, the gold among them
    "#### " + ", ".join(map(str, range(1, 1001))),
    "#### 3108\n#### 3018",  # conflicting answers
    "\\boxed{3018} \\boxed{3108} \\boxed{7}",
    "#### 3108 or 3018",
    "",
])
def test_hedged_or_empty_answers_earn_nothing(reply):
    s = math_reward(reply, "3108")
    assert s.reward == 0.0 and not s.correct and s.reward <= math_reward("#### 1", "3108").reward


def test_length_penalty_is_optional_and_bounded():
    long = "x" * 1200 + "\n#### 3108"
    assert math_reward(long, "3108").reward == pytest.approx(1.1)
    assert math_reward(long, "3108", length_penalty=0.5).reward == pytest.approx(0.6)  # capped at the full penalty
    assert math_reward("#### 3108", "3108", length_penalty=0.5).reward == pytest.approx(1.1)


@pytest.mark.parametrize("args", [{"mode": "tool"}, {"mode": "direct"}, {"mode": "tool", "tool": "python"}])
def test_check_env_passes(args):
    assert check_env(partial(make_env, "math", **args), n=60) == []


def test_held_out_templates_are_eval_only_and_numbers_do_not_cross():
    env = make_env("math")
    train, evals = env.tasks("train", 600), env.tasks("eval", 300)
    assert not {t.get("template") for t in train} & HELD_OUT
    assert {t.get("template") for t in evals} >= HELD_OUT
    assert not {t.prompt for t in train} & {t.prompt for t in evals}
    assert {t.kind for t in evals} == {"arithmetic", "word"} and any("苹果" in t.prompt for t in train)


def test_teacher_solves_and_random_does_not():
    for args in ({"mode": "tool"}, {"mode": "direct"}, {"mode": "tool", "tool": "python"}):
        env = make_env("math", **args)
        tasks = env.tasks("eval", 60)
        teacher = run_episodes(partial(make_env, "math", **args), tasks, TeacherPolicy())
        random_ = run_episodes(partial(make_env, "math", **args), tasks, RandomPolicy())
        assert sum(t.success for t in teacher) / len(tasks) >= 0.95
        assert sum(t.success for t in random_) / len(tasks) <= 0.1


def test_tool_mode_calls_the_calculator_per_step_and_retries_faults():
    env = make_env("math", fault_rate=1.0)
    task = next(t for t in env.tasks("eval", 50) if len(t.reference) == 2)
    messages, rewards = env.reset(task), []
    for _ in range(env.max_turns):
        action = env.teacher_turn(task, messages)
        r = env.step(action)
        rewards.append(r.reward)
        messages += [{"role": "assistant", "content": action}, *r.observation]
        if r.terminated:
            break
    assert r.episode.success and r.episode.faults == 2 and r.episode.tool_calls == 2 and sum(rewards) == 1.1


def _python_observer(monkeypatch, tmp_path):
    """Play one `python` call per episode with a 1 s CPU limit (4 s of wall clock as the backstop) and the tool's
    directories under tmp_path."""
    import tempfile

    from agentic_rl.envs.codefix.sandbox import Limits
    from agentic_rl.envs.math import python_tool

    monkeypatch.setattr(python_tool, "LIMITS", Limits(cpu_seconds=1, wall_seconds=4))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    env = make_env("math", tool="python")
    task = env.tasks("eval", 1)[0]

    def observe(code):
        env.reset(task)
        return env.step(format_tool_call("python", {"code": code})).observation[0]["content"]

    return observe


def test_python_tool_shows_what_the_program_prints(monkeypatch, tmp_path):
    """Its output; an error's last line; a loop stopped at the time limit, the same observation every time; nothing
    left behind."""
    from agentic_rl.envs.math.python_tool import CODE_LIMIT

    observe = _python_observer(monkeypatch, tmp_path)
    assert observe("print(37 * 84)") == "3108"
    assert observe("1 / 0") == "error: ZeroDivisionError: division by zero"
    assert observe("while True: pass") == observe("while True: pass") == "error: timeout: the program did not finish in 1 s"
    assert observe("x = 1") == "(no output: print the value you need)"
    assert "code too long" in observe("print(1)" + " " * CODE_LIMIT)
    assert list(tmp_path.iterdir()) == []


def test_python_tool_gives_the_same_timeout_observation_on_a_busy_machine(monkeypatch, tmp_path, busy_cores):
    """CPU time decides, the wall clock is only a backstop reported the same way: with every core kept busy, a loop
    and a program that waits past the backstop both read as the same timeout, every time."""
    observe = _python_observer(monkeypatch, tmp_path)
    want = "error: timeout: the program did not finish in 1 s"
    with busy_cores():
        assert [observe("while True: pass") for _ in range(3)] == [want] * 3
        assert observe("import time; time.sleep(30)") == want
        assert observe("print(sum(range(10**5)))") == "4999950000"


@isolated
def test_python_tool_sees_none_of_our_files_and_no_network(monkeypatch, tmp_path):
    import socket

    observe = _python_observer(monkeypatch, tmp_path)
    assert "FileNotFoundError" in observe(f"open({__file__!r}).read()")
    with socket.create_server(("127.0.0.1", 0)) as server:  # reachable from here, not from the sandbox
        port = server.getsockname()[1]
        reply = observe(f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=1); print('reached')")
    assert reply.startswith("error:") and "reached" not in reply


def test_the_seeds_grpo_example():
    """The seed's §6: four samples of "37 × 84 = ?" — A 3108, B 3018, C 3108, D 3208 — A and C rise, B and D fall."""
    import dataclasses

    import torch

    from agentic_rl.train.grpo_math import advantages

    env = make_env("math", mode="direct")
    task = dataclasses.replace(env.tasks("train", 1)[0], prompt="What is 37 × 84?", answer="3108")
    rewards = []
    for answer in ("3108", "3018", "3108", "3208"):
        env.reset(task)
        rewards.append(env.step(f"37 × 84 = {answer}\n#### {answer}").reward)
    assert rewards == pytest.approx([1.1, 0.1, 1.1, 0.1])
    adv = advantages([torch.tensor(rewards)])[0]
    assert (adv[[0, 2]] > 0).all() and (adv[[1, 3]] < 0).all()


def test_exploit_probes_earn_no_more_than_a_wrong_answer():
    for args in ({"mode": "tool"}, {"mode": "direct"}, {"mode": "tool", "tool": "python"}):
        env = make_env("math", **args)
        rows = env.probe_hacks(env.tasks("eval", 4))
        assert {r["exploit"] for r in rows} >= {"answer_spam", "conflicting_answers", "boxed_many_times",
                                                "empty_answer", "answer_in_tool_call", "copy_the_expression",
                                                "several_values", "answer_in_reasoning", "complex_form", "huge_answer"}
        assert all(r["guarded_reward"] <= r["noop_reward"] + 1e-9 and not r["env_error"] for r in rows)
        assert any(r["naive_reward"] > r["noop_reward"] for r in rows)  # a naive check would have paid


def test_perturbations_keep_the_problem():
    env = make_env("math")
    word = next(t for t in env.tasks("eval", 50) if t.kind == "word" and t.get("lang") == "en")
    zh = env.perturb(word, "language")
    assert zh.answer == word.answer and zh.prompt != word.prompt and all(
        str(v) in zh.prompt for k, v in word.get("values") if not k.startswith("s"))
    assert env.perturb(word, "casing").prompt == word.prompt.upper()


def test_bad_arguments_are_clear():
    with pytest.raises(ValueError, match="mode must be one of direct, tool"):
        make_env("math", mode="chat")
    with pytest.raises(ValueError, match="tool must be one of calculator, python"):
        make_env("math", tool="bash")
    with pytest.raises(ValueError, match="levels"):
        make_env("math", levels=[4])
    with pytest.raises(ValueError, match=r"'gsm8k' .* or a path"):
        make_env("math", data="/no/such/file.jsonl")


# Problems written for this test in GSM8K's format (not GSM8K's text): worked reasoning with <<calculator>>
# annotations and a last line "#### answer".
OWN_PROBLEMS = [
    {"question": f"A box holds {a} red pens and {b} blue pens. How many pens are in {c} boxes?",
     "answer": f"One box holds {a}+{b} = <<{a}+{b}={a + b}>>{a + b} pens.\n{c} boxes hold {a + b}*{c} = "
               f"<<{a + b}*{c}={(a + b) * c}>>{(a + b) * c} pens.\n#### {(a + b) * c:,}"}
    for a, b, c in [(3, 4, 5), (6, 2, 9), (12, 5, 3), (7, 7, 7), (20, 13, 4), (9, 1, 11), (15, 30, 2), (8, 5, 100)]
]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_gsm8k_loader_reads_local_files(tmp_path, suffix):
    import datasets

    path = tmp_path / f"own{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(p) + "\n" for p in OWN_PROBLEMS))
    else:
        datasets.Dataset.from_list(OWN_PROBLEMS).to_parquet(str(path))
    for mode in ("tool", "direct"):
        env = make_env("math", mode=mode, data=str(path))
        tasks = env.tasks("train", 3) + env.tasks("eval", 1)
        assert all(t.kind == "gsm8k" for t in tasks) and len({t.id for t in tasks}) == 4
        assert env.tasks("train", 3, seed=1) != env.tasks("train", 3, seed=0)  # the seed picks which
        gold = {p["question"]: p["answer"].rsplit("#### ", 1)[1].replace(",", "") for p in OWN_PROBLEMS}
        assert all(t.answer == gold[t.prompt] for t in tasks)
        trajs = run_episodes(partial(make_env, "math", mode=mode, data=str(path)), tasks, TeacherPolicy())
        assert all(t.success for t in trajs)
        if mode == "tool":  # the annotations became the teacher's calculator calls
            first = tasks[0].reference_calls[0][1]["expression"]
            assert first.count("+") == 1 and dict(tasks[0].get("steps"))[first]  # "a+b", from <<a+b=c>>
    env = make_env("math", data=str(path))
    every = [t for split in ("train", "eval") for t in env.tasks(split, len(env._problems[split]))]
    assert len(every) == len(OWN_PROBLEMS) and "1300" in {t.answer for t in every}  # "#### 1,300": separator gone


def test_gsm8k_rows_without_an_answer_line_are_refused(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "What?", "answer": "no marker"}) + "\n")
    with pytest.raises(ValueError, match="'#### <number>'"):
        make_env("math", data=str(path))


def test_answer_in_a_tool_call_is_not_an_answer():
    env = make_env("math")
    task = env.tasks("eval", 1)[0]
    env.reset(task)
    call = format_tool_call("calculator", {"expression": task.answer})
    results = [env.step(call) for _ in range(env.max_turns)]
    assert results[-1].truncated and not results[-1].episode.success and sum(r.reward for r in results) == 0.0
