"""BFCL as an evaluation: its data, doc conversion and AST checker (bfcl-eval) behind our prompt and parser."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentic_rl.cli import app
from agentic_rl.envs.toolcall.env import SYSTEM_PROMPT
from agentic_rl.evaluation.bfcl import (
    CATEGORIES,
    CHECKER_MODEL,
    HANDLER,
    Questions,
    check_categories,
    evaluate_bfcl,
    load_questions,
    prompt_messages,
    score,
    served,
    verdict,
)
from agentic_rl.evaluation.families import compare, load_result
from agentic_rl.policies import TeacherPolicy

runner = CliRunner()


def _question(category: str, qid: str) -> dict:
    _, entries = load_questions([category])
    return entries[qid]


def test_ground_truth_as_calls_passes_bfcls_checker_in_every_category():
    """The plumbing end to end: BFCL's ground truth, written as our calls and read back by our parser, passes
    BFCL's own checker; no call passes the irrelevance categories. (live_relevance has no ground truth.)"""
    cats = [c for c in CATEGORIES if c != "live_relevance"]
    result, trajs = evaluate_bfcl(TeacherPolicy(), cats, n=12, seed=0)
    accuracy = {name: m["value"] for name, m in result["overall"]["regression"].items()}
    assert accuracy == {f"{view}.{c}": 1.0 for c in cats for view in ("bfcl", "bfcl_strict")}, \
        [t.info["bfcl_error"] for t in trajs if not t.success]
    assert result["bfcl_handler"] == HANDLER and len(result["questions"]) == len(trajs)
    assert result["tasks"] == len(trajs) == 12 * len(cats)


def test_score_follows_bfcls_checker_and_our_parser():
    q = _question("simple_python", "simple_python_0")  # calculate_triangle_area(base=10, height=5[, unit])
    args = lambda **a: json.dumps({"name": "calculate_triangle_area", "arguments": a})
    ok = f"<tool_call>{args(base=10, height=5)}</tool_call>"
    assert score(ok, q["entry"], q["truth"], "simple_python")[:2] == (True, None)
    wrong = score(f"<tool_call>{args(base=10, height=6)}</tool_call>", q["entry"], q["truth"], "simple_python")
    assert wrong[0] is False and "height" in wrong[1]
    assert score(f"<tool_call>{args(base='10', height=5)}</tool_call>", q["entry"], q["truth"], "simple_python")[0] \
        is False  # a string where the schema says integer
    assert score(f"Sure! <tool_call>{args(base=10, height=5)}</tool_call>", q["entry"], q["truth"],
                 "simple_python")[:2] == (False, "unparsable call: text_around_call")
    assert score(ok + ok, q["entry"], q["truth"], "simple_python")[0] is False  # one call asked for, two made
    assert score("The area is 25.", q["entry"], q["truth"], "simple_python")[:2] == (False, "no call")

    irr = _question("irrelevance", "irrelevance_0")
    assert score("None of the tools can do that.", irr["entry"], None, "irrelevance")[0] is True
    call = f"<tool_call>{json.dumps({'name': irr['entry']['function'][0]['name'], 'arguments': {}})}</tool_call>"
    assert score(call, irr["entry"], None, "irrelevance")[:2] == (False, "called a tool")
    assert score("<tool_call>{not json</tool_call>", irr["entry"], None, "irrelevance")[0] is False  # an attempt
    assert score(call, irr["entry"], None, "live_relevance")[0] is True
    assert score("no", irr["entry"], None, "live_relevance")[0] is False


def test_prompt_is_toolcalls_with_bfcls_converted_schemas():
    q = _question("simple_python", "simple_python_0")["entry"]
    system, user = prompt_messages(q)
    assert system["role"] == "system" and system["content"].startswith(SYSTEM_PROMPT)
    first = json.loads(system["content"][len(SYSTEM_PROMPT):].splitlines()[0])
    assert first["type"] == "function" and first["function"]["parameters"]["type"] == "object"  # BFCL's "dict"
    assert "Python 3 syntax" in first["function"]["description"]  # BFCL's language hint
    assert user == {"role": "user", "content": q["question"][0][0]["content"]}
    own = {**q, "question": [[{"role": "system", "content": "You are a travel agent."}, *q["question"][0]]]}
    system, user = prompt_messages(own)
    assert system["content"].startswith("You are a travel agent.\n\n" + SYSTEM_PROMPT) and user["role"] == "user"


def test_questions_sample_is_seeded_and_categories_checked():
    a, _ = load_questions(["multiple", "irrelevance"], n=5, seed=1)
    b, _ = load_questions(["multiple", "irrelevance"], n=5, seed=1)
    c, _ = load_questions(["multiple", "irrelevance"], n=5, seed=2)
    assert [t.id for t in a] == [t.id for t in b] != [t.id for t in c]
    assert [t.kind for t in a] == ["multiple"] * 5 + ["irrelevance"] * 5
    with pytest.raises(ValueError, match="unknown BFCL category simple; valid: simple_python"):
        check_categories(["simple"])
    with pytest.raises(ValueError, match="BFCL questions come from load_questions"):
        Questions({}).tasks("eval", 1)


def test_cli_bench_bfcl_with_a_model_writes_a_comparable_eval_json(tiny_dir, tmp_path):
    out = tmp_path / "bfcl.json"
    r = runner.invoke(app, ["eval", "--bench", "bfcl", "--policy", str(tiny_dir), "--n", "2", "--categories",
                            "simple_python,irrelevance", "--json", str(out), "max_new_tokens=8"])
    assert r.exit_code == 0, r.output
    result = load_result(out)
    assert result["env"] == "bfcl" and result["temperature"] == 0.0 and result["tasks"] == 4
    metrics = result["overall"]["regression"]
    assert set(metrics) == {f"{view}.{c}" for view in ("bfcl", "bfcl_strict") for c in ("simple_python", "irrelevance")}
    rows = [json.loads(line) for line in out.with_suffix(".jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {r["category"] for r in rows} == {"simple_python", "irrelevance"}
    assert all(r["handler"] == HANDLER and {"reply", "model_responses", "valid", "error", "strict_valid"} <= set(r)
               for r in rows)
    assert all(m["n"] == 2 and m["better"] == "higher" and 0 <= m["value"] <= 1 for m in metrics.values())
    assert compare(result, result) == []
    assert "simple_python" in r.output


def test_cli_bench_refuses_what_it_would_ignore():
    r = runner.invoke(app, ["eval", "--bench", "bfcl", "--policy", "teacher", "--k", "3"])
    assert r.exit_code == 2 and "--bench bfcl brings its own questions and tools, so k= would be ignored" in r.output
    r = runner.invoke(app, ["eval", "--bench", "bfcl", "--policy", "teacher", "--categories", "simple,multiple"])
    assert r.exit_code == 2 and "unknown BFCL category simple; valid:" in r.output
    r = runner.invoke(app, ["eval", "--env", "tool_use", "--policy", "teacher", "categories=[multiple]"])
    assert r.exit_code == 2 and "used only with bench=bfcl" in r.output


def test_a_runs_bfcl_stages_show_in_its_report(tiny_dir, tmp_path):
    """`run ... bfcl_questions=N` scores each model (pipeline._bfcl) and the report shows the transfer table."""
    from agentic_rl.evaluation.report import build_report
    from agentic_rl.pipeline import _bfcl
    from agentic_rl.policies import HFPolicy, SamplingConfig

    (tmp_path / "eval").mkdir()
    policy = HFPolicy(tiny_dir, SamplingConfig(1.0, 4))
    for stage in ("prompted", "sft", "grpo"):
        got = _bfcl(policy, 1, 0, tmp_path / "eval" / f"bfcl_{stage}")
        assert set(got) == {"simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance",
                            "live_simple", "live_multiple", "live_irrelevance"}
    saved = load_result(tmp_path / "eval" / "bfcl_grpo.json")
    assert saved["policy"] == "grpo" and saved["temperature"] == 0.0
    html = build_report(tmp_path)
    assert '<section id="transfer">' in html and "live_irrelevance" in html


def _replies(entry: dict, truth, teacher: str) -> list[str]:
    """Replies a model may give to a question: the ground truth's calls, one value off, the name as BFCL writes it
    (dotted), prose around the calls, a malformed block, an extra call, no call, an empty reply."""
    funcs = entry["function"]
    shown = [f["name"].replace(".", "_") for f in funcs]
    block = lambda name, args: f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"
    out = [teacher, f"Sure. {teacher}", "<tool_call>{not json</tool_call>", "I cannot help with that.", "",
           teacher + block(shown[0], {}), block(funcs[0]["name"], {}), block("not_offered", {"x": 1})]
    if truth:
        name, params = next(iter(truth[0].items()))
        first = {p: v[0] for p, v in params.items() if isinstance(v, list) and v and v[0] != ""}
        out.append(block(name.replace(".", "_"), first))
        out.append(block(name, first))  # dotted, as the ground truth writes it: not an offered name
        if first:
            p = next(iter(first))
            out.append(block(name.replace(".", "_"), {**first, p: "definitely wrong"}))
    return out


def test_verdicts_agree_with_bfcls_own_eval_runner_on_every_entry(monkeypatch):
    """The product's scoring against bfcl_eval's eval runner's per-entry functions, with a real OpenAI handler:
    the same reply (served as `agentic-rl serve` answers it) gets the same verdict on every entry."""
    from bfcl_eval.constants.enums import Language, ReturnFormat
    from bfcl_eval.eval_checker.eval_runner import _evaluate_single_ast_entry, _evaluate_single_relevance_entry
    from bfcl_eval.model_handler.api_inference.openai_completion import OpenAICompletionsHandler

    monkeypatch.setenv("OPENAI_API_KEY", "unused: nothing is sent")
    handler = OpenAICompletionsHandler(CHECKER_MODEL, 0.0, CHECKER_MODEL, True)
    cats = ["simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance", "live_simple",
            "live_multiple", "live_irrelevance", "live_relevance"]
    tasks, entries = load_questions(cats, n=6, seed=3)
    teacher = TeacherPolicy()
    checked = agreed = passed = 0
    for task in tasks:
        q = entries[task.id]
        env = Questions(entries)
        reply = teacher.start(env, [task], [0], 0).act([0], [env.reset(task)])[0].text
        for text in _replies(q["entry"], q["truth"], reply):
            ours, _ = verdict(text, q["entry"], q["truth"], q["category"])
            response = served(text, q["entry"])
            if q["category"] in ("irrelevance", "live_irrelevance", "live_relevance"):
                theirs = _evaluate_single_relevance_entry(handler, task.id, response, q["entry"], CHECKER_MODEL,
                                                          q["category"])
            else:
                theirs = _evaluate_single_ast_entry(handler, task.id, response, q["truth"], q["entry"], CHECKER_MODEL,
                                                    q["category"], Language.PYTHON, ReturnFormat.PYTHON)
            checked += 1
            agreed += ours == theirs["valid"]
            passed += ours
            assert ours == theirs["valid"], (task.id, text, theirs.get("error"))
    assert checked > 400 and agreed == checked and 0 < passed < checked


def test_bfcl_shows_names_as_the_openai_handler_does_and_the_checker_maps_them_back():
    """A dotted BFCL function is shown with "_" (OpenAI's name rule); a call to it by that name passes, a call by the
    dotted name is not a call to an offered function (text, for the server)."""
    tasks, entries = load_questions(["simple_python"])
    q = next(entries[t.id] for t in tasks if "." in entries[t.id]["entry"]["function"][0]["name"])
    system = prompt_messages(q["entry"])[0]["content"]
    dotted = q["entry"]["function"][0]["name"]
    assert dotted.replace(".", "_") in system and f'"{dotted}"' not in system
    env = Questions(entries)
    task = next(t for t in tasks if entries[t.id] is q)
    reply = TeacherPolicy().start(env, [task], [0], 0).act([0], [env.reset(task)])[0].text
    assert dotted.replace(".", "_") in reply and verdict(reply, q["entry"], q["truth"], "simple_python")[0]
    assert not verdict(reply.replace(dotted.replace(".", "_"), dotted), q["entry"], q["truth"], "simple_python")[0]
