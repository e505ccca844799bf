"""The gateway's resources are bounded (issue 51, item 6), on the real server on 127.0.0.1: open rollouts (the
longest idle evicted, told why on its next turn) and their idle time, a client that sends its request head a byte
at a time, connections beyond the limit, and a huge prompt that must not stop other clients while it renders."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

pytest.importorskip("uvicorn")

from agentic_rl.policies import HFPolicy, SamplingConfig
from agentic_rl.serve.local import LocalGateway
from agentic_rl.serve.server import ServerLimits

from .rollouts import open_rollout

MODEL = "tiny-limits"


def _body(text: str = "What is 2 + 3?", **extra):
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 4, **extra}


@pytest.fixture(scope="module")
def policy(trained_dir):
    return HFPolicy(trained_dir, SamplingConfig(temperature=1.0, max_new_tokens=8))


def test_open_rollouts_are_capped_and_the_evicted_one_is_told_why(policy):
    with LocalGateway(policy, model_name=MODEL, max_rollouts=3) as local:
        ids = [open_rollout(local.url, f"r{k}") for k in range(3)]
        for rid in (ids[1], ids[0], ids[2]):  # r1 has now waited longest for its next request
            assert httpx.post(f"{local.url}/rollouts/{rid}/v1/chat/completions", json=_body(), timeout=60).is_success
        fourth = open_rollout(local.url, "r3")
        assert set(local.gateway.rollouts) == {ids[0], ids[2], fourth}
        r = httpx.post(f"{local.url}/rollouts/{ids[1]}/v1/chat/completions", json=_body(), timeout=60)
        assert r.status_code == 409 and "--max-rollouts" in r.json()["error"]["message"]
        assert httpx.get(f"{local.url}/rollouts/{ids[1]}", timeout=60).status_code == 409
        local.gateway.rollout_ttl_s = 0.2  # now every open one has been idle too long
        time.sleep(0.3)
        fresh = open_rollout(local.url)
        assert list(local.gateway.rollouts) == [fresh]
        r = httpx.post(f"{local.url}/rollouts/{ids[0]}/v1/chat/completions", json=_body(), timeout=60)
        assert r.status_code == 409 and "without a request" in r.json()["error"]["message"]


def test_a_request_head_sent_a_byte_at_a_time_is_cut_off(policy):
    """Before, each byte reset uvicorn's keep-alive timer and the connection was held forever."""
    with LocalGateway(policy, model_name=MODEL, limits=ServerLimits(header_timeout_s=1.0)) as local:
        port = int(local.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            start, closed = time.monotonic(), False
            while time.monotonic() - start < 20:
                try:
                    s.sendall(b"X")
                    s.settimeout(0.3)
                    if s.recv(1024) == b"":
                        closed = True
                        break
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
                    break
            assert closed, "the trickling client was never disconnected"
            assert time.monotonic() - start >= 0.9  # not before its time
        assert httpx.get(f"{local.url}/v1/models", timeout=60).status_code == 200  # others are served


def test_connections_beyond_the_limit_get_503(policy):
    with LocalGateway(policy, model_name=MODEL, limits=ServerLimits(max_connections=2)) as local:
        port = int(local.url.rsplit(":", 1)[1])
        held = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(2)]
        try:
            time.sleep(0.2)
            assert httpx.get(f"{local.url}/v1/models", timeout=60).status_code == 503
        finally:
            for s in held:
                s.close()
        for _ in range(100):  # the held connections go; the server serves again
            if httpx.get(f"{local.url}/v1/models", timeout=60).status_code == 200:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the server never served again after the connections closed")


def test_a_huge_prompt_renders_off_the_event_loop(policy):
    """A ~4 MB message takes seconds to render before its 400 (past the context); meanwhile another client's
    request is answered. Before, rendering ran on the event loop and stopped every client."""
    with LocalGateway(policy, model_name=MODEL) as local:
        huge = _body("calculate " * 420_000)
        done: dict[str, float] = {}

        def send_huge():
            r = httpx.post(f"{local.url}/v1/chat/completions", json=huge, timeout=300)
            done["huge"] = time.monotonic()
            done["status"] = r.status_code

        t = threading.Thread(target=send_huge)
        t.start()
        time.sleep(0.3)  # it is rendering now
        assert httpx.get(f"{local.url}/v1/models", timeout=60).status_code == 200
        done["small"] = time.monotonic()
        t.join()
        assert done["status"] == 400
        assert done["small"] < done["huge"], "the small request waited for the huge one's rendering"


def test_48_open_rollouts_keep_at_most_16_cache_rows(policy):
    """Before, every open rollout kept its row in the cache every decode step reads: 48 rollouts of a ~1,000-token
    turn took RSS from 917 to 1,636 MiB and a 64-token request from 0.24 to 2.75 s. Now the cache holds at most
    `max_parked` (16) kept rows, so its memory is bounded by 16 rows of the longest conversation."""
    with LocalGateway(policy, model_name=MODEL) as local:
        ids = [open_rollout(local.url) for _ in range(48)]
        errors: list[int] = []

        def turn(rid: str, k: int) -> None:
            body = _body(f"Question {k}: what is 12 + 30?")
            r = httpx.post(f"{local.url}/rollouts/{rid}/v1/chat/completions", json=body, timeout=300)
            if r.status_code != 200:
                errors.append(r.status_code)

        threads = [threading.Thread(target=turn, args=(rid, k)) for k, rid in enumerate(ids)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        live = local.gateway.engine._live
        assert len(live.parked) == 16 and live.running == 0
        assert len(live.rows) <= 16 and len(live.tokens) == 16  # the cache's rows: the kept ones only
        assert all(len(r.segments) == 1 for r in local.gateway.rollouts.values())  # every turn recorded
