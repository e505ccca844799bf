"""The gateway through the real `openai` client against the real server on 127.0.0.1 (a free port): tool calls
round-trip, streaming gives what non-streaming gives, a rollout records the exact ids the env path samples, a retry
does not fork the record, rewritten history starts a new segment with its reason, and bad requests get OpenAI's
error JSON with the right status while the server keeps serving."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest
import torch

openai = pytest.importorskip("openai")
uvicorn = pytest.importorskip("uvicorn")

from agentic_rl.envs import make_env  # noqa: E402
from agentic_rl.envs.tool_use import SYSTEM_PROMPT  # noqa: E402
from agentic_rl.policies import HFPolicy, SamplingConfig  # noqa: E402
from agentic_rl.policies.hf.sampler import SampledTurn  # noqa: E402
from agentic_rl.runtime.rollout import run_episodes  # noqa: E402
from agentic_rl.serve.app import Gateway, check_binding, create_app  # noqa: E402
from agentic_rl.serve.protocol import parse_request  # noqa: E402

from .rollouts import open_rollout  # noqa: E402

MODEL = "tiny-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(trained_dir):
    """The gateway over the short-SFT tiny model (it makes tool_use calls), in a thread; yields (base url, gateway)."""
    policy = HFPolicy(trained_dir, SamplingConfig(temperature=0.0, max_new_tokens=48))
    gateway = Gateway(policy, model_name=MODEL)
    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(gateway), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not srv.started and time.time() < deadline:
        time.sleep(0.05)
    assert srv.started
    yield f"http://127.0.0.1:{port}", gateway
    srv.should_exit = True
    thread.join(timeout=10)
    gateway.engine.close()


def _tools():
    return make_env("tool_use").tools.schemas


def _task_messages(env, task):
    """tool_use's opening messages with the tools taken out of the system prompt (the agent sends them as
    `tools`; the gateway puts them back where the env has them)."""
    first = env.reset(task)
    assert first[0]["content"] == SYSTEM_PROMPT + env.tools.schemas_text()
    return [{"role": "system", "content": SYSTEM_PROMPT}, first[1]]


def test_models_and_a_plain_reply(server):
    base, _ = server
    client = openai.OpenAI(base_url=base + "/v1", api_key="none")
    assert [m.id for m in client.models.list().data] == [MODEL]
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "What is 2 + 3?"}],
                                       temperature=0, max_tokens=8)
    assert r.choices[0].finish_reason in ("stop", "length") and isinstance(r.choices[0].message.content, str)
    assert r.usage.completion_tokens >= 1 and r.usage.prompt_tokens > 5


def test_streaming_gives_the_same_text_and_calls(server, env):
    base, _ = server
    client = openai.OpenAI(base_url=base + "/v1", api_key="none")
    for task in env.tasks("eval", 4, seed=1):
        kwargs = dict(model=MODEL, messages=_task_messages(env, task), tools=_tools(), temperature=0)
        whole = client.chat.completions.create(**kwargs).choices[0]
        content, calls, finish = "", {}, None
        for chunk in client.chat.completions.create(**kwargs, stream=True):
            delta = chunk.choices[0].delta
            content += delta.content or ""
            for c in delta.tool_calls or []:
                calls.setdefault(c.index, [c.function.name, ""])
                calls[c.index][1] += c.function.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
        assert finish == whole.finish_reason
        assert content == (whole.message.content or "")
        assert [tuple(v) for _, v in sorted(calls.items())] == [
            (c.function.name, c.function.arguments) for c in whole.message.tool_calls or []]


def _agent(client, env, task, temperature=0.0):
    """tool_use's loop as an agent: the env's tools are called on each reply's tool_calls until a text answer."""
    messages = _task_messages(env, task)
    for _ in range(env.max_turns):
        reply = client.chat.completions.create(model=MODEL, messages=messages, tools=_tools(),
                                               temperature=temperature, max_tokens=48).choices[0].message
        if not reply.tool_calls:
            return reply
        messages.append({"role": "assistant", "content": reply.content, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in reply.tool_calls]})
        for c in reply.tool_calls:
            result = env.tools.call(c.function.name, json.loads(c.function.arguments)).content
            messages.append({"role": "tool", "tool_call_id": c.id, "name": c.function.name, "content": result})
    return None


def test_a_recorded_rollout_has_the_env_paths_ids_mask_and_logprobs(server, trained_dir):
    """Greedy: the gateway's record of an agent replaying tool_use's loop equals what `run_episodes` samples."""
    base, gateway = server
    env = make_env("tool_use")
    tasks = [t for t in env.tasks("eval", 12, seed=2) if t.kind in ("calc", "weather", "search", "two_step")][:3]
    local = HFPolicy(trained_dir, SamplingConfig(temperature=0.0, max_new_tokens=48))
    # One episode per batch, as each agent's requests come: batched with others, the same ids come out but float
    # rounding moves logprobs by up to ~1.3e-5 (measured), past this test's 1e-5.
    trajs = [run_episodes(lambda: make_env("tool_use"), [t], local, seed=0)[0] for t in tasks]
    multi = 0
    for k, (task, traj) in enumerate(zip(tasks, trajs)):
        rid = open_rollout(base, f"exact-{k}")
        client = openai.OpenAI(base_url=f"{base}/rollouts/{rid}/v1", api_key="none")
        _agent(client, make_env("tool_use"), task)
        record = httpx.get(f"{base}/rollouts/{rid}").json()
        assert record["name"] == f"exact-{k}"
        assert len(record["segments"]) == 1 and record["segments"][0]["reason"] == "first request"
        seg = record["segments"][0]
        n = len(seg["ids"])  # the record ends at the last reply; the env path adds the template's closing tail
        assert seg["ids"] == traj.ids[:n] and seg["mask"] == traj.mask[:n]
        assert seg["turns"] == traj.assistant_ids
        assert max(abs(a - b) for a, b in zip(seg["logprobs"], traj.logprobs[:n])) <= 1e-5
        multi += len(seg["turns"]) > 1
        rollout = gateway.rollouts[rid]
        assert rollout.trajectories(gateway.renderer)[0].ids == traj.ids
    assert multi >= 1  # at least one episode made a call and got its result back


def test_sampled_records_logprobs_equal_a_fresh_forward(server):
    """At T = 1 every recorded logprob equals a plain forward over the recorded ids, within the tolerance GRPO's
    check_logprobs uses in fp32 (1e-3)."""
    from agentic_rl.train.logprobs import sequence_logprobs

    base, gateway = server
    env = make_env("tool_use")
    trajs = []
    for task in env.tasks("eval", 4, seed=5):
        rid = open_rollout(base)
        _agent(openai.OpenAI(base_url=f"{base}/rollouts/{rid}/v1", api_key="none"), make_env("tool_use"), task,
               temperature=1.0)
        trajs += gateway.rollouts[rid].trajectories(gateway.renderer)
    with torch.no_grad():
        logp, _ = sequence_logprobs(gateway.policy.model, [t.ids for t in trajs], 1.0, masks=[t.mask for t in trajs])
    worst = max(abs(float(logp[b, i]) - lp) for b, t in enumerate(trajs)
                for i, (m, lp) in enumerate(zip(t.mask, t.logprobs)) if m)
    print(f"max |recorded - recomputed| logprob: {worst:.2e}")
    assert sum(sum(t.mask) for t in trajs) > 20 and worst <= 1e-3, worst


def test_a_retry_returns_the_recorded_reply_and_rewriting_history_starts_a_segment(server, env):
    base, gateway = server
    task = env.tasks("eval", 1, seed=3)[0]
    rid = open_rollout(base)
    url = f"{base}/rollouts/{rid}/v1/chat/completions"
    body = {"model": MODEL, "messages": _task_messages(env, task), "tools": _tools(), "temperature": 1.0,
            "max_tokens": 24}
    first = httpx.post(url, json=body).json()
    again = httpx.post(url, json=body, headers={"x-stainless-retry-count": "1"}).json()
    assert again == first
    rollout = gateway.rollouts[rid]
    assert len(rollout.segments) == 1 and len(rollout.segments[0].turns) == 1
    rewritten = {**body, "messages": [body["messages"][0], {"role": "user", "content": "something else"},
                                      {"role": "assistant", "content": "ok"},
                                      {"role": "user", "content": "and now?"}]}
    httpx.post(url, json=rewritten).raise_for_status()
    reasons = [s["reason"] for s in httpx.get(f"{base}/rollouts/{rid}").json()["segments"]]
    assert reasons[0] == "first request" and "message 1 (user) differs" in reasons[1]
    r = httpx.post(f"{base}/rollouts/{rid}/reward", json={"reward": 0.5, "info": {"success": True}})
    assert r.json() == {"id": rid, "reward": 0.5}


BAD = [
    ("not json", None, 400, "not valid JSON"),
    ([1, 2], None, 400, "JSON object"),
    ({"messages": [{"role": "user", "content": "hi"}]}, None, 400, "model"),
    ({"model": "nope", "messages": [{"role": "user", "content": "hi"}]}, None, 404, "not served"),
    ({"model": MODEL}, None, 400, "messages"),
    ({"model": MODEL, "messages": []}, None, 400, "messages"),
    ({"model": MODEL, "messages": [{"role": "robot", "content": "hi"}]}, None, 400, "messages[0].role"),
    ({"model": MODEL, "messages": [{"role": "user", "content": 5}]}, None, 400, "messages[0].content"),
    ({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, None, 400, "text parts"),
    ({"model": MODEL, "messages": [{"role": "tool", "content": "x"}]}, None, 400, "tool_call_id"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "temperature": 3}, None, 400, "temperature"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}, None, 400,
     "temperature"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "top_p": 0}, None, 400, "top_p"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, None, 400, "max_tokens"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10**6}, None, 400,
     "context"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "n": 100}, None, 400, "n:"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stop": ["a", "b", "c", "d", "e"]}, None, 400,
     "stop"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "tools": "calculator"}, None, 400, "tools"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
      "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function",
                                                                                  "function": {"name": "g"}}},
     None, 400, "not among"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"}, None, 400,
     "needs tools"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "seed": "x"}, None, 400, "seed"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "n": 2}, "rollout", 400, "under a rollout"),
]


@pytest.mark.parametrize("body,route,status,words", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_requests_get_openai_errors_and_the_server_survives(server, body, route, status, words):
    base, _ = server
    url = f"{base}/rollouts/{open_rollout(base)}/v1/chat/completions" if route else f"{base}/v1/chat/completions"
    content = body.encode() if isinstance(body, str) else None
    r = httpx.post(url, content=content, json=None if content else body,
                   headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert words in error["message"] and error["type"]
    assert httpx.get(f"{base}/v1/models").status_code == 200  # still serving


def test_unknown_rollouts_and_routes_are_404(server):
    base, _ = server
    assert httpx.get(f"{base}/rollouts/none-such").status_code == 404
    assert httpx.get(f"{base}/v2/whatever").json()["error"]["type"] == "not_found_error"


def test_an_api_key_is_required_beyond_loopback_and_enforced(trained_dir):
    from agentic_rl.config import ConfigError

    with pytest.raises(ConfigError, match="--api-key"):
        check_binding("0.0.0.0", None)
    check_binding("0.0.0.0", "k")
    check_binding("127.0.0.1", None)
    from fastapi.testclient import TestClient

    gateway = Gateway(HFPolicy(trained_dir), model_name=MODEL, api_key="secret")
    try:
        client = TestClient(create_app(gateway), base_url="http://localhost")
        assert client.get("/v1/models").status_code == 401
        assert client.get("/v1/models", headers={"Authorization": "Bearer secret"}).status_code == 200
    finally:
        gateway.engine.close()


def test_every_call_of_a_parallel_turn_becomes_a_tool_call(trained_dir):
    """A reply of two <tool_call> blocks is two OpenAI tool calls; a call to a tool the request does not offer, or
    text around a call, stays content."""
    gateway = Gateway(HFPolicy(trained_dir), model_name=MODEL)
    try:
        req = parse_request({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "tools": _tools()})
        two = ('<tool_call>{"name":"calculator","arguments":{"expression":"1+1"}}</tool_call>'
               '<tool_call>{"name":"search","arguments":{"query":"x"}}</tool_call>')
        choice = gateway.choice(req, 0, SampledTurn([], [], two, "stop"), [])
        calls = choice["message"]["tool_calls"]
        assert [c["function"]["name"] for c in calls] == ["calculator", "search"] and choice["finish_reason"] == "tool_calls"
        assert calls[0]["function"]["arguments"] == '{"expression":"1+1"}' and calls[0]["id"] != calls[1]["id"]
        for text in ('<tool_call>{"name":"delete_all","arguments":{}}</tool_call>',
                     'Sure! <tool_call>{"name":"search","arguments":{"query":"x"}}</tool_call>'):
            choice = gateway.choice(req, 0, SampledTurn([], [], text, "stop"), [])
            assert choice["message"]["content"] == text and choice["finish_reason"] == "stop"
    finally:
        gateway.engine.close()


def test_concurrent_requests_are_sampled_in_one_batch(server, env):
    base, gateway = server
    client = openai.OpenAI(base_url=base + "/v1", api_key="none")
    before = gateway.engine.batches
    tasks = env.tasks("eval", 8, seed=4)
    results = [None] * len(tasks)

    def ask(i):
        results[i] = client.chat.completions.create(model=MODEL, messages=_task_messages(env, tasks[i]),
                                                    tools=_tools(), temperature=0, max_tokens=16)
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(tasks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is not None for r in results)
    assert gateway.engine.batches - before < len(tasks)  # some requests shared a batch


def test_a_body_over_one_mib_is_read_and_answered_with_the_context_limit(server):
    """No 1 MiB body limit in front of the model: a 2 MiB tool output reaches the gateway, which answers with the
    model's context limit (and keeps serving)."""
    base, gateway = server
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "word " * 420_000}]
    r = httpx.post(f"{base}/v1/chat/completions", json={"model": MODEL, "messages": messages}, timeout=120)
    assert len(r.request.content) > 2 * 2**20
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert f"context is {gateway.max_context} tokens" in r.json()["error"]["message"]
    assert httpx.get(f"{base}/health").status_code == 200
