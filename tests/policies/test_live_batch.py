"""Continuous batching: a request that joins a batch while it decodes, or continues its session's kept row, is
sampled exactly as if it ran alone — the same greedy ids, logprobs within 1e-5 — and the cache stays as long as its
longest row."""

from __future__ import annotations

import pytest

from agentic_rl.policies import HFPolicy, SamplingConfig
from agentic_rl.policies.hf.live_batch import LiveBatch
from agentic_rl.policies.hf.sampler import SampledTurn, TurnRequest


@pytest.fixture(scope="module")
def policy(tiny_dir):
    return HFPolicy(tiny_dir, SamplingConfig(temperature=0.0))


def _prompts(policy, env, n):
    """Task prompts of the tool_use env: one long shared system prompt, each its own question."""
    return [policy.renderer.render(env.reset(task), add_generation_prompt=True).ids
            for task in env.tasks("eval", n, seed=3)]


def _alone(policy, request: TurnRequest) -> SampledTurn:
    batch = LiveBatch(policy, seed=0)
    batch.admit([(0, request)])
    done = []
    while batch.running:
        done += batch.step()
    return done[0][1]


def _same(a: SampledTurn, b: SampledTurn) -> None:
    assert a.ids == b.ids and a.finish == b.finish
    assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) <= 1e-5


def test_requests_that_join_while_the_batch_decodes_are_sampled_as_alone(policy, env):
    prompts = _prompts(policy, env, 5)
    odd = policy.renderer.render([{"role": "user", "content": "no system prompt here"}],
                                 add_generation_prompt=True).ids  # shares less of the prefix: it is shortened
    requests = {0: TurnRequest(prompts[0], 0.0, 20), 1: TurnRequest(prompts[1], 0.0, 9),
                2: TurnRequest(prompts[1], 0.0, 24), 3: TurnRequest(prompts[2], 0.0, 16),
                4: TurnRequest(prompts[3], 0.0, 12), 5: TurnRequest(odd, 0.0, 14)}
    joins = {0: [0], 3: [1, 2], 7: [3, 4], 9: [5]}  # step → the requests that arrive before it
    batch, done = LiveBatch(policy, seed=0), {}
    for step in range(60):
        joined = bool(batch.running and joins.get(step))
        batch.admit([(k, requests[k]) for k in joins.get(step, [])])
        if joined:  # the cache is repacked: as long as its longest row, the slots no row uses dropped
            own = batch.attn[:, len(batch.prefix_ids):]
            assert own.shape[1] == int(own.sum(dim=1).max())
        if batch.running:
            done.update(batch.step())
    assert sorted(done) == list(requests)
    assert batch.cache is None and not batch.tokens  # drained
    for key, request in requests.items():
        _same(done[key], _alone(policy, request))


def test_a_session_continues_in_its_kept_row(policy, env):
    """The session's second request extends its first (the reply, then a tool's answer): it is prefilled from the
    kept row, only its new tokens, and samples what a fresh request with the whole prompt samples."""
    first = _prompts(policy, env, 2)
    batch, done = LiveBatch(policy, seed=0), {}
    batch.admit([(1, TurnRequest(first[0], 0.0, 12, session="a")), (2, TurnRequest(first[1], 0.0, 30))])
    while 1 not in done:
        done.update(batch.step())
    assert "a" in batch.parked
    turn = done[1]
    tool = policy.tokenizer("\n<tool_response>42</tool_response>", add_special_tokens=False)["input_ids"]
    second = TurnRequest(first[0] + turn.ids + tool, 0.0, 12, session="a")
    kept = batch.tokens[batch.parked["a"][0]].cached
    batch.admit([(3, second)])
    assert batch.tokens[3].cached == len(second.prompt)  # everything before was already in the row
    assert kept == len(first[0]) + len(turn.ids) - 1  # the first turn's last token was never fed
    while batch.running:
        done.update(batch.step())
    _same(done[3], _alone(policy, TurnRequest(second.prompt, 0.0, 12)))
    _same(done[2], _alone(policy, TurnRequest(first[1], 0.0, 30)))
    # a request of the session that does not extend it starts over (its old row is dropped), and release forgets it
    batch.admit([(4, TurnRequest(first[1], 0.0, 5, session="a"))])
    while batch.running:
        done.update(batch.step())
    _same(done[4], _alone(policy, TurnRequest(first[1], 0.0, 5)))
    batch.release("a")
    assert not batch.parked and not batch.tokens


def test_parked_rows_are_capped_and_an_evicted_session_starts_over(policy, env):
    """Twelve sessions end their turns; with max_parked=3 only the last three keep rows (the cache holds at most
    those), and the first session's next request — its row evicted — is prefilled whole and samples as if alone."""
    prompts = _prompts(policy, env, 12)
    batch, done = LiveBatch(policy, seed=0, max_parked=3), {}
    batch.admit([(k, TurnRequest(p, 0.0, 6, session=f"s{k}")) for k, p in enumerate(prompts)])
    while batch.running:
        done.update(batch.step())
    order = list(done)  # in the order the turns ended
    assert list(batch.parked) == [f"s{k}" for k in order[-3:]] and len(batch.tokens) == 3
    first = order[0]
    tool = policy.tokenizer("\n<tool_response>7</tool_response>", add_special_tokens=False)["input_ids"]
    again = TurnRequest(prompts[first] + done[first].ids + tool, 0.0, 6, session=f"s{first}")
    assert f"s{first}" not in batch.parked  # evicted: its next request is prefilled whole, as a new one
    batch.admit([(100, again)])
    while batch.running:
        done.update(batch.step())
    _same(done[100], _alone(policy, TurnRequest(again.prompt, 0.0, 6)))
    assert len(batch.parked) == 3 and list(batch.parked)[-1] == f"s{first}" and f"s{order[-3]}" not in batch.parked
