"""The scheduler's continuous batching: a request submitted while another decodes joins that batch and is answered
as soon as its own turn ends, with what it samples alone; a request the batch cannot take fails alone."""

from __future__ import annotations

import threading

import pytest

from agentic_rl.envs import make_env
from agentic_rl.policies import HFPolicy, SamplingConfig
from agentic_rl.policies.hf.sampler import TurnRequest
from agentic_rl.serve.engine import Engine


@pytest.fixture(scope="module")
def policy(tiny_dir):
    return HFPolicy(tiny_dir, SamplingConfig(temperature=0.0))


def _prompt(policy, k: int) -> list[int]:
    env = make_env("tool_use")
    return policy.renderer.render(env.reset(env.tasks("eval", k + 1, seed=5)[k]), add_generation_prompt=True).ids


def test_a_request_joins_the_batch_that_is_decoding(policy):
    long, short = TurnRequest(_prompt(policy, 0), 0.0, 64), TurnRequest(_prompt(policy, 1), 0.0, 4)
    alone = Engine(policy)
    try:
        expected = [alone.submit([r]).result(timeout=60)[0] for r in (long, short)]
        assert expected[0].finish == "length"  # the long turn runs all its 64 tokens
    finally:
        alone.close()
    engine = Engine(policy)
    try:
        started = threading.Event()
        first = engine.submit([long], on_token=lambda i, t: started.set())
        assert started.wait(timeout=60)
        second = engine.submit([short])
        got_short = second.result(timeout=60)[0]
        assert not first.done()  # answered while the long turn still decodes: it joined, it did not wait
        got_long = first.result(timeout=60)[0]
        assert engine.batches == 1 and engine.rows_sampled == 2
        for got, want in zip((got_long, got_short), expected):
            assert got.ids == want.ids
            assert max(abs(a - b) for a, b in zip(got.logprobs, want.logprobs)) <= 1e-5
        assert engine.wait_idle(timeout_s=10)
    finally:
        engine.close()


def test_a_request_the_batch_cannot_take_fails_alone(policy):
    """An empty prompt, or one as long as the context, fails its own request with why; a request decoding beside it
    and one after it are sampled."""
    engine = Engine(policy)
    try:
        started = threading.Event()
        running = engine.submit([TurnRequest(_prompt(policy, 0), 0.0, 32)], on_token=lambda i, t: started.set())
        assert started.wait(timeout=60)
        too_long = [1] * int(policy.model.config.max_position_embeddings)
        for prompt, why in (([], "empty prompt"), (too_long, "the context is")):
            with pytest.raises(ValueError, match=why):
                engine.submit([TurnRequest(prompt, 0.0, 4)]).result(timeout=60)
        assert len(running.result(timeout=60)[0].ids) == 32
        assert len(engine.submit([TurnRequest(_prompt(policy, 1), 0.0, 4)]).result(timeout=60)[0].ids) == 4
        assert engine.wait_idle(timeout_s=10)
    finally:
        engine.close()
