"""BFCL as an evaluation: its data, doc conversion and AST checker (bfcl-eval) behind our prompt and parser."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentic_rl.cli import app
from agentic_rl.envs.toolcall.env import SYSTEM_PROMPT
from agentic_rl.evaluation.bfcl import (
    CATEGORIES,
    Questions,
    check_categories,
    evaluate_bfcl,
    load_questions,
    prompt_messages,
    score,
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
    assert accuracy == {f"bfcl.{c}": 1.0 for c in cats}, [t.info["bfcl_error"] for t in trajs if not t.success]
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
    assert set(metrics) == {"bfcl.simple_python", "bfcl.irrelevance"}
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
