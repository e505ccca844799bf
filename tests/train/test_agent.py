"""GRPO on the user's own agent (`grpo agent=module:function`): the function gets a real `openai` client pointed at
the real gateway on 127.0.0.1; what it asks the model is recorded token for token and trained on by the same GRPO
code path; its failures (an exception, None, a time-out) are left out of the loss; bad specs and task files are
refused with what is valid."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("openai")
pytest.importorskip("uvicorn")

from agentic_rl.config import load_config
from agentic_rl.envs import make_env
from agentic_rl.policies import HFPolicy, SamplingConfig
from agentic_rl.runtime.trajectory import Trajectory
from agentic_rl.train.agent import AgentEpisodes, episodes_of, load_agent, read_tasks_file
from agentic_rl.train.grpo import GRPOConfig, _token_advantages, train_grpo

EXAMPLE = Path(__file__).parents[2] / "examples" / "openai_agent.py"


def reply_length(task, client) -> float:
    """An agent whose reward is how many characters the model wrote: it differs between samples, so every group
    has a learning signal."""
    r = client.chat.completions.create(model="any-name", messages=[{"role": "user", "content": task["prompt"]}])
    return float(len(r.choices[0].message.content or ""))


def test_grpo_trains_an_agent_function_on_tasks_from_a_file(trained_dir, tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    lines = [{"prompt": f"Repeat the word {w}."} for w in ("river", "stone", "cloud", "tiger")]
    lines += [{"prompt": "Repeat the word lamp.", "split": "eval"}]
    tasks.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    cfg = load_config(GRPOConfig, overrides=[f"policy={trained_dir}", f"agent={__file__}:reply_length",
                                             f"tasks_file={tasks}", "steps=2", "tasks_per_step=2", "group_size=3",
                                             "max_new_tokens=24", "eval_tasks=4", "lr=1e-3"])
    s = train_grpo(cfg, tmp_path / "run")
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["trajectories_trained"] for m in metrics] == [6, 6] and all(m["infra_excluded"] == 0 for m in metrics)
    assert all(m["reward_std"] > 0 and m["entropy"] > 0 for m in metrics)
    assert s["eval"]["episodes"] == 1  # the file's one eval line
    start = HFPolicy(trained_dir).model.state_dict()
    after = HFPolicy(tmp_path / "run" / "model").model.state_dict()
    assert any(not torch.equal(start[k], after[k]) for k in start)


def test_the_example_agent_runs_under_grpo(trained_dir, tmp_path):
    cfg = load_config(GRPOConfig, overrides=[f"policy={trained_dir}", f"agent={EXAMPLE}:run", "env=tool_use",
                                             "steps=1", "tasks_per_step=2", "group_size=2", "max_new_tokens=40",
                                             "eval_tasks=2"])
    s = train_grpo(cfg, tmp_path / "run")
    m = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert m["trajectories_sampled"] == 4 and m["infra_excluded"] == 0 and s["eval"]["episodes"] == 2


def test_agent_episodes_record_the_tokens_and_leave_failures_out(trained_dir):
    env = make_env("tool_use")
    task = env.tasks("train", 1)[0]
    policy = HFPolicy(trained_dir, SamplingConfig(temperature=1.0, max_new_tokens=24))
    calls = {"n": 0}

    def flaky(t, client):
        calls["n"] += 1
        r = client.chat.completions.create(model="x", messages=[{"role": "user", "content": t.prompt}])
        rid = client.base_url.path.rstrip("/").split("/")[-2]  # an unguessable token; its name is step-task-sample
        k = int(runner.server.gateway.rollouts[rid].name.split("-")[-1])
        if k == 1:
            raise ConnectionError("the agent's own tool server went away")
        return None if k == 2 else float(bool(r.choices[0].message.content))

    with AgentEpisodes(flaky, policy, "tool_use") as runner:
        trajs = runner.run([task], 4, "s0", temperature=1.0)
    assert [t.outcome for t in trajs] == ["ok", "env_error", "env_error", "ok"]
    assert "ConnectionError" in trajs[1].info["error"] and "None" in trajs[2].info["error"]
    ok = trajs[0]
    assert ok.ids is not None and sum(ok.mask) == len(ok.assistant_ids[0]) and ok.task_id == task.id
    # the recorded logprobs are the sampler's, at the trainer's temperature: a plain forward gives them back
    from agentic_rl.train.logprobs import sequence_logprobs
    with torch.no_grad():
        lp, _ = sequence_logprobs(policy.model, [ok.ids], 1.0, masks=[ok.mask])
    got = [float(lp[0, i]) for i, m in enumerate(ok.mask) if m]
    assert max(abs(a - b) for a, b in zip(got, [x for x, m in zip(ok.logprobs, ok.mask) if m])) < 1e-3
    _, used = _token_advantages([trajs], GRPOConfig())
    assert used == [trajs[0], trajs[3]]  # the failures are in no baseline and no loss


def test_a_slow_agent_times_out_and_its_rollout_is_closed(trained_dir):
    policy = HFPolicy(trained_dir, SamplingConfig(temperature=1.0, max_new_tokens=8))
    seen: list[str] = []

    def slow(t, client):
        client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
        time.sleep(1.5)
        try:
            client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi again"}])
        except Exception as e:  # the gateway refuses a closed rollout
            seen.append(str(e))
            raise
        return 1.0

    with AgentEpisodes(slow, policy, "agent", timeout_s=0.5) as runner:
        trajs = runner.run([{"id": "a", "prompt": "hi"}], 2, "s0", temperature=1.0)
        deadline = time.time() + 10
        while len(seen) < 2 and time.time() < deadline:
            time.sleep(0.05)
    assert [t.outcome for t in trajs] == ["timeout", "timeout"]
    assert len(seen) == 2 and all("closed" in e for e in seen)


def test_an_agent_that_returns_no_number_is_a_bug_reported_at_once(trained_dir):
    policy = HFPolicy(trained_dir, SamplingConfig(temperature=1.0, max_new_tokens=8))
    with AgentEpisodes(lambda t, c: "1.0", policy, "agent") as runner, \
            pytest.raises(ValueError, match=r"returned '1.0' \(str\): it must return the episode's reward"):
        runner.run([{"id": "a"}], 2, "s0", temperature=1.0)


def test_segments_of_one_episode_share_its_advantage():
    def t(episode, reward, segment=0, segments=1):
        return Trajectory("agent", episode, "", 0, [{"role": "assistant", "content": "x"}], [reward], reward, "ok",
                          reward > 0, {"episode": episode, "segment": segment, "segments": segments},
                          [1, 2], [0, 1], [0.0, -1.0])
    group = [t("a", 1.0, 0, 2), t("a", 1.0, 1, 2), t("b", 0.0), t("c", 0.0)]
    advs, _ = _token_advantages([group], GRPOConfig())
    # three episodes (1, 0, 0): mean 1/3, std (unbiased) 0.577 → a = +1.155 for both segments of a, −0.577 for b, c
    assert [round(float(a[1]), 3) for a in advs] == [1.155, 1.155, -0.577, -0.577]
    assert [x.task_id for x in episodes_of(group)] == ["a", "b", "c"]


def test_the_example_agents_tools_answer_as_the_envs_own(env):
    """The example's tools are plain functions, but they must show the model what tool_use's tools show it (the SFT
    model learned to read that form): the same text for the same calls, Chinese city names included."""
    from types import SimpleNamespace

    seen: list[dict] = []

    def create(model, messages, tools):
        seen[:] = messages
        calls = [SimpleNamespace(id=f"c{i}", function=SimpleNamespace(name=n, arguments=json.dumps(a)))
                 for i, (n, a) in enumerate([("get_weather", {"city": "北京"}), ("calculator", {"expression": "2*3"}),
                                             ("search", {"query": "Anthropic"})])]
        done = any(m["role"] == "tool" for m in messages)
        message = SimpleNamespace(content="x" if done else "", tool_calls=None if done else calls,
                                  model_dump=lambda include: {"role": "assistant", "content": ""})
        return SimpleNamespace(choices=[SimpleNamespace(message=message)])

    client = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))
    task = next(t for t in env.tasks("eval", 50) if t.kind == "weather")
    load_agent(f"{EXAMPLE}:run")(task, client)
    env.reset(task)
    expected = [env.tools.call(n, a).content for n, a in [("get_weather", {"city": "北京"}),
                                                         ("calculator", {"expression": "2*3"}),
                                                         ("search", {"query": "Anthropic"})]]
    assert [m["content"] for m in seen if m["role"] == "tool"] == expected


def test_bad_agent_specs_and_task_files_are_refused(tmp_path):
    with pytest.raises(ValueError, match="give module:function"):
        load_agent("examples.openai_agent")
    with pytest.raises(ValueError, match="there is no file"):
        load_agent(str(tmp_path / "missing.py") + ":run")
    with pytest.raises(ValueError, match=r"has no function 'walk' \(it has: .*run"):
        load_agent(f"{EXAMPLE}:walk")
    with pytest.raises(ValueError, match="cannot import no_such_module"):
        load_agent("no_such_module:run")
    bad = tmp_path / "t.jsonl"
    for text, message in [("{\"a\": 1}\nnot json\n", "line 2: not JSON"), ("[1]\n", "line 1: a task must be a JSON "
                          "object, got list"), ('{"split": "test"}\n', "split must be 'train' or 'eval'"),
                          ('{"split": "eval"}\n', "no training task")]:
        bad.write_text(text)
        with pytest.raises(ValueError, match=message):
            read_tasks_file(bad)
    with pytest.raises(ValueError, match="no such file"):
        read_tasks_file(tmp_path / "none.jsonl")
    train, held = read_tasks_file(_write(tmp_path / "ok.jsonl", [{"q": 1}, {"id": "x", "split": "eval"}]))
    assert train == [{"q": 1, "id": "ok.jsonl:1"}] and held == [{"id": "x", "split": "eval"}]
    with pytest.raises(ValueError, match="advantage=turn needs the env's per-turn rewards"):
        load_config(GRPOConfig, overrides=["agent=m:f", "advantage=turn"])
    with pytest.raises(ValueError, match="tasks_file"):
        load_config(GRPOConfig, overrides=["tasks_file=t.jsonl"])


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_framework_agent_runs_through_the_gateway_unchanged(trained_dir):
    """examples/langgraph_agent.py — LangGraph's ReAct agent over LangChain's ChatOpenAI — completes tool_use
    episodes with its tool calls recorded token for token."""
    pytest.importorskip("langgraph")
    pytest.importorskip("langchain_openai")
    agent = load_agent(f"{EXAMPLE.parent / 'langgraph_agent.py'}:run")
    env = make_env("tool_use")
    tasks = [t for t in env.tasks("eval", 20, seed=1) if t.kind in ("calc", "search", "weather")][:4]
    policy = HFPolicy(trained_dir, SamplingConfig(temperature=1.0, max_new_tokens=48))
    with AgentEpisodes(agent, policy, "tool_use") as runner:
        trajs = runner.run(tasks, 1, "lg", temperature=0.0)
    assert all(t.outcome == "ok" for t in trajs), [t.info.get("error") for t in trajs]
    called = [t for t in trajs if t.n_tool_calls]
    assert called and all(sum(t.mask) == sum(len(a) for a in t.assistant_ids) for t in called)
