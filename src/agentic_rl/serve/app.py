"""The OpenAI-compatible gateway: /v1/chat/completions in front of a policy, recording rollouts token for token.

Routes (FastAPI):
  GET  /v1/models                                    the served model
  POST /v1/chat/completions                          plain serving: nothing recorded
  POST /rollouts                                     {"name": ...} (optional) → a new rollout's unguessable id
  POST /rollouts/{rollout_id}/v1/chat/completions    the same, appended to that rollout's record (`records.py`):
                                                     point an OpenAI client's base_url at /rollouts/{id}/v1
  GET  /rollouts/{rollout_id}                        the record: segments of ids, loss mask and logprobs
  DELETE /rollouts/{rollout_id}                      the record, handed over: the rollout is closed and forgotten
  POST /rollouts/{rollout_id}/reward                 {"reward": float, "info": {...}} closes it
Errors are OpenAI's error JSON with the right status; with an API key set, every route needs
`Authorization: Bearer KEY` (binding beyond loopback requires one: `serve`). A web page must not drive the gateway:
a POST must say `Content-Type: application/json` (a cross-site form or text/plain POST is refused, so a browser
sends none without a CORS preflight, which this server never grants), and the Host and any Origin header must name
an allowed host — by default the loopback names, so a DNS-rebound page is refused too (docs/serving.md). A rollout
belongs to whoever created it: its id is a random 192-bit token, the only way to read or change it.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import math
import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..config import ConfigError
from ..policies.hf.sampler import HFPolicy, SampledTurn, TurnRequest
from ..runtime.parsing import OPEN, served_calls
from ..runtime.tools import to_json
from .engine import Engine, RowRefused
from .protocol import (
    ApiError,
    ChatRequest,
    completion,
    completion_id,
    openai_tool_calls,
    parse_body,
    parse_request,
    prompt_messages,
    usage,
)
from .records import Rollout, Segment, continue_ids, extends, request_key

MAX_CALLS = 64  # parallel calls parsed from one turn
MAX_NAME_CHARS = 200  # a rollout's label
MAX_ROLLOUTS = 1024  # rollouts open at once; opening one more evicts the longest idle
ROLLOUT_TTL_S = 3600.0  # a rollout idle this long is evicted
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
log = logging.getLogger("agentic_rl.serve")


class Gateway:
    """The state behind the routes: the engine, the served name, and the rollout records."""

    def __init__(self, policy: HFPolicy, model_name: str | None = None, max_tokens: int | None = None,
                 api_key: str | None = None, engine: Engine | None = None,
                 allowed_hosts: tuple[str, ...] = LOOPBACK_NAMES, max_rollouts: int = MAX_ROLLOUTS,
                 rollout_ttl_s: float = ROLLOUT_TTL_S):
        """allowed_hosts: the names a request's Host and Origin may give ("*": any); max_rollouts, rollout_ttl_s:
        how many rollouts may be open, and how long one may sit idle, before the longest idle is evicted (its next
        turn gets a 409 saying so)."""
        self.policy, self.renderer, self.api_key = policy, policy.renderer, api_key
        self.allowed_hosts = tuple(h.lower().strip("[]") for h in allowed_hosts)
        self.model_name = model_name or policy.path.name
        self.max_tokens = max_tokens or policy.sampling.max_new_tokens
        self.max_context = policy.sampling.max_context or int(
            getattr(policy.model.config, "max_position_embeddings", 2048))
        self.engine = engine or Engine(policy)
        self.rollouts: dict[str, Rollout] = {}
        self.any_model = False  # a trainer serves whatever model name the agent asks for with the policy in training
        self.max_rollouts, self.rollout_ttl_s = max_rollouts, rollout_ttl_s
        self._renderer_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentic-rl-render")
        # rollouts that take no more turns (taken, timed out, evicted) → why; the oldest forgotten past 8 × the open
        # ones, after which their ids are simply unknown (404)
        self.closed: OrderedDict[str, str] = OrderedDict()
        # Set by a trainer: recorded requests sample at this temperature with top_p 1, whatever they ask, so the
        # recorded logprobs are the distribution the loss computes
        self.record_temperature: float | None = None
        self.created = int(time.time())

    def refuses(self, method: str, headers: Headers) -> ApiError | None:
        """Why a request that could come from a web page is refused, or None: a foreign Host or Origin, or a POST
        that is not JSON."""
        if "*" not in self.allowed_hosts:
            host = _hostname(headers.get("host", ""))
            if host not in self.allowed_hosts:
                return ApiError(403, f"Host {headers.get('host', '')!r} is not served here (allowed: "
                                     f"{', '.join(self.allowed_hosts)}; `serve --allow-host NAME` adds one)",
                                code="host_not_allowed", kind="permission_error")
            origin = headers.get("origin")
            if origin is not None and _hostname(urlsplit(origin).netloc) not in self.allowed_hosts:
                return ApiError(403, f"Origin {origin[:100]!r} is not allowed: a web page may not use this server",
                                code="origin_not_allowed", kind="permission_error")
        if method == "POST":
            kind = headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "application/json":
                return ApiError(415, f"Content-Type must be application/json, got {kind[:100] or 'none'!r}",
                                code="unsupported_media_type")
        return None

    def open(self, name: str = "") -> Rollout:
        """A new, empty rollout under an unguessable id: the id is its creator's only credential. Rollouts idle past
        the TTL are evicted first, then the longest idle while `max_rollouts` are open (503 if every one is mid-turn)."""
        now = time.monotonic()
        for rid, r in list(self.rollouts.items()):
            if now - r.touched > self.rollout_ttl_s and not r.lock.locked():
                self.evict(rid, f"evicted after {self.rollout_ttl_s:.0f} s without a request")
        while len(self.rollouts) >= self.max_rollouts:
            idle = [r for r in self.rollouts.values() if not r.lock.locked()]
            if not idle:
                raise ApiError(503, f"{self.max_rollouts} rollouts are open and every one is mid-turn; retry later",
                               code="too_many_rollouts", kind="server_error")
            self.evict(min(idle, key=lambda r: r.touched).id,
                       f"evicted: {self.max_rollouts} rollouts were open (`serve --max-rollouts`) and it had waited "
                       "longest for its next request")
        rollout = Rollout(secrets.token_urlsafe(24), name)
        self.rollouts[rollout.id] = rollout
        return rollout

    def shutdown(self) -> None:
        """Stop the engine's thread and the rendering thread."""
        self.engine.close()
        self._renderer_thread.shutdown(wait=False, cancel_futures=True)

    def close(self, rollout_id: str, why: str) -> None:
        """No more turns under this rollout (its record stays until taken)."""
        self.closed[rollout_id] = why
        self.closed.move_to_end(rollout_id)
        while len(self.closed) > 8 * self.max_rollouts:
            self.closed.popitem(last=False)

    def evict(self, rollout_id: str, why: str) -> None:
        """Close a rollout and forget its record and its kept cache row."""
        self.close(rollout_id, why)
        self.rollouts.pop(rollout_id, None)
        self.engine.release(rollout_id)

    def rollout(self, rollout_id: str, for_turn: bool = False) -> Rollout:
        """The rollout `rollout_id`, or the error its client should see (unknown: 404; closed: 409 — for a new turn
        as soon as it is closed, for its record once the record is taken)."""
        rollout = self.rollouts.get(rollout_id)
        if rollout is not None and (rollout_id not in self.closed or not for_turn):
            return rollout
        if rollout_id in self.closed:
            raise ApiError(409, f"rollout {rollout_id!r} is closed: {self.closed[rollout_id]}", code="rollout_closed",
                           kind="invalid_request_error")
        raise ApiError(404, f"no rollout {rollout_id[:64]!r}: create one with POST /rollouts and use the id it "
                            "returns", code="rollout_not_found", kind="not_found_error")

    def take(self, rollout_id: str) -> Rollout | None:
        """Close a rollout and hand its record over (None if the agent never called the model under it)."""
        self.close(rollout_id, "its record was taken (DELETE, or by the trainer)")
        self.engine.release(rollout_id)
        return self.rollouts.pop(rollout_id, None)

    # -- one request ----------------------------------------------------------------------------------------------

    async def off_loop(self, fn: Any, *args: Any) -> Any:
        """`fn(*args)` on the gateway's one parsing-and-rendering thread, so a huge prompt does not stop the other
        clients' streams while it renders; rendering stays one at a time."""
        return await asyncio.get_running_loop().run_in_executor(self._renderer_thread, fn, *args)

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """The ids of a new conversation's prompt, ready for the assistant's turn."""
        return self.renderer.render(messages, add_generation_prompt=True).ids

    def rows(self, req: ChatRequest, prompt: list[int], session: str | None = None
             ) -> tuple[list[TurnRequest], list[int]]:
        """The sampler's rows for a request (n of them) and the ids forced at the start of the reply (tool_choice
        'required' or a named function: the reply starts inside a call); `session`: the rollout it extends."""
        forced = self._forced_text(req)
        forced_ids = self.policy.tokenizer(forced, add_special_tokens=False)["input_ids"] if forced else []
        room = self.max_context - len(prompt) - len(forced_ids)
        if room < 1:
            raise ApiError(400, f"the prompt is {len(prompt)} tokens; this model's context is {self.max_context} "
                                "tokens", param="messages", code="context_length_exceeded")
        max_new = req.max_tokens if req.max_tokens is not None else min(self.max_tokens, room)
        if max_new > room:
            raise ApiError(400, f"the prompt is {len(prompt)} tokens and max_tokens asks for {max_new} more; this "
                                f"model's context is {self.max_context} tokens (at most {room} new ones here)",
                           param="max_tokens", code="context_length_exceeded")
        seeds = [None] * req.n if req.seed is None else [req.seed * 1000 + i for i in range(req.n)]
        return [TurnRequest(prompt + forced_ids, req.temperature, max_new, req.top_p, seeds[i], req.stop, session)
                for i in range(req.n)], forced_ids

    def _forced_text(self, req: ChatRequest) -> str:
        if not req.tools or req.tool_choice in ("auto", "none"):
            return ""
        if req.forced_tool is not None:
            return OPEN + '{"name":' + to_json(req.forced_tool) + ',"arguments":'
        return OPEN + '{"name":"'

    def choice(self, req: ChatRequest, index: int, turn: SampledTurn, forced_ids: list[int]) -> dict[str, Any]:
        """One OpenAI choice: every call of the turn as `tool_calls`, or the text as content."""
        text = (self.renderer.decode(forced_ids) if forced_ids else "") + turn.text
        calls = self._calls(req, text)
        message: dict[str, Any] = {"role": "assistant", "content": None if calls else text}
        if calls:
            message["tool_calls"] = openai_tool_calls(calls)
        finish = "tool_calls" if calls else ("length" if turn.finish == "length" else "stop")
        out: dict[str, Any] = {"index": index, "message": message, "finish_reason": finish}
        if req.logprobs:
            out["logprobs"] = {"content": [
                {"token": self.policy.tokenizer.decode([t]), "logprob": lp, "top_logprobs": []}
                for t, lp in zip(turn.ids, turn.logprobs)]}
        if req.return_token_ids:
            out["token_ids"] = forced_ids + turn.ids
        return out

    def _calls(self, req: ChatRequest, text: str) -> list[tuple[str, dict[str, Any]]]:
        """The calls a turn makes, if it is nothing but calls to the request's tools; else none (text stays text)."""
        if not req.tools or req.tool_choice == "none":
            return []
        return served_calls(text, {t["function"]["name"] for t in req.tools}, MAX_CALLS)

    @staticmethod
    def recorded_message(choice: dict[str, Any]) -> dict[str, Any]:
        """A reply as the record keeps it, in the project's format (arguments as objects)."""
        m = choice["message"]
        out: dict[str, Any] = {"role": "assistant", "content": m["content"] or ""}
        if m.get("tool_calls"):
            out["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
                "name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}}
                for c in m["tool_calls"]]
        return out


def create_app(gateway: Gateway) -> FastAPI:
    """The FastAPI app over a Gateway."""
    app = FastAPI(title="agentic-rl gateway", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.gateway = gateway

    @app.exception_handler(ApiError)
    async def api_error(_: Request, e: ApiError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if e.status_code == 404 else "invalid_request_error"
        return JSONResponse(ApiError(e.status_code, str(e.detail), kind=kind).body(), status_code=e.status_code)

    @app.exception_handler(Exception)
    async def server_error(_: Request, e: Exception) -> JSONResponse:  # never internals to the client
        return JSONResponse(internal_error(e).body(), status_code=500)

    @app.middleware("http")
    async def auth(request: Request, call_next: Any) -> Any:
        refused = gateway.refuses(request.method, request.headers)
        if refused is not None:
            return JSONResponse(refused.body(), status_code=refused.status)
        if gateway.api_key is not None:
            given = request.headers.get("authorization", "").encode("utf-8", "surrogateescape")
            if not hmac.compare_digest(given, f"Bearer {gateway.api_key}".encode("utf-8", "surrogateescape")):
                return JSONResponse(ApiError(401, "missing or wrong API key: send Authorization: Bearer KEY",
                                             code="invalid_api_key", kind="authentication_error").body(),
                                    status_code=401)
        return await call_next(request)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": gateway.model_name, "object": "model", "created": gateway.created,
                                            "owned_by": "agentic-rl"}]}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "batches": gateway.engine.batches, "rows": gateway.engine.rows_sampled}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        return await _chat(gateway, request, None)

    @app.post("/rollouts")
    async def open_rollout(request: Request) -> JSONResponse:
        body = parse_body(await request.body())
        name = body.get("name", "") if isinstance(body, dict) else None
        if not isinstance(name, str) or len(name) > MAX_NAME_CHARS:
            raise ApiError(400, f"name: must be a string of at most {MAX_NAME_CHARS} characters (or left out)",
                           param="name", code="invalid_value")
        rollout = gateway.open(name)
        return JSONResponse({"id": rollout.id, "name": rollout.name, "base_url": f"/rollouts/{rollout.id}/v1"},
                            status_code=201)

    @app.post("/rollouts/{rollout_id}/v1/chat/completions")
    async def chat_recorded(rollout_id: str, request: Request) -> Any:
        return await _chat(gateway, request, rollout_id)

    @app.get("/rollouts/{rollout_id}")
    async def get_rollout(rollout_id: str) -> dict[str, Any]:
        return gateway.rollout(rollout_id).to_dict()

    @app.delete("/rollouts/{rollout_id}")
    async def take_rollout(rollout_id: str) -> dict[str, Any]:
        rollout = gateway.rollout(rollout_id)
        async with rollout.lock:  # after its last reply is recorded
            gateway.take(rollout_id)
        return rollout.to_dict()

    @app.post("/rollouts/{rollout_id}/reward")
    async def set_reward(rollout_id: str, request: Request) -> dict[str, Any]:
        rollout = gateway.rollout(rollout_id)
        body = parse_body(await request.body())
        reward = body.get("reward")
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            raise ApiError(400, "reward: required, a finite number", param="reward", code="invalid_value")
        info = body.get("info", {})
        if not isinstance(info, dict):
            raise ApiError(400, "info: must be an object", param="info", code="invalid_value")
        rollout.reward, rollout.info = float(reward), {**rollout.info, **info}
        return {"id": rollout_id, "reward": rollout.reward}

    return app


def _parse(raw: bytes) -> tuple[Any, ChatRequest]:
    body = parse_body(raw)
    return body, parse_request(body)


async def _chat(gateway: Gateway, request: Request, rollout_id: str | None) -> Any:
    body, req = await gateway.off_loop(_parse, await request.body())
    if req.model != gateway.model_name and not gateway.any_model:
        raise ApiError(404, f"model {req.model!r} is not served here; this server serves {gateway.model_name!r}",
                       param="model", code="model_not_found", kind="not_found_error")
    messages = prompt_messages(req)
    if rollout_id is None:
        prompt = await gateway.off_loop(gateway.prompt_ids, messages)
        rows, forced = gateway.rows(req, prompt)
        return await _deliver(gateway, req, rows, forced, _submit(gateway, req, rows, forced))
    rollout = gateway.rollout(rollout_id, for_turn=True)
    if gateway.record_temperature is not None:
        req = replace(req, temperature=gateway.record_temperature, top_p=1.0)
    if req.n != 1:
        raise ApiError(400, "n: must be 1 under a rollout (each choice would be a trajectory of its own; give each "
                            "sample its own rollout id)", param="n", code="invalid_value")
    key = request_key(body)
    # One agent's turns are sequential, and a turn holds its rollout from the request until its reply is recorded
    # (or, for a stream whose client left, until its rows are stopped: nothing is recorded) — streamed or not: a
    # retry waits for the reply it repeats, a DELETE for the turn in flight, and a request queued behind a DELETE is
    # refused.
    await rollout.lock.acquire()
    handed = False  # the lock goes to the turn's completion, which releases it once the reply is recorded
    try:
        if rollout_id in gateway.closed or gateway.rollouts.get(rollout_id) is not rollout:
            why = gateway.closed.get(rollout_id, "its record was taken")
            raise ApiError(409, f"rollout {rollout_id!r} was closed while this request waited for it: {why}",
                           code="rollout_closed", kind="invalid_request_error")
        rollout.touched = time.monotonic()
        if key in rollout.replies:
            return await _replay(rollout.replies[key], req.stream, req.include_usage)
        seg = rollout.segments[-1] if rollout.segments else None
        reason = "first request" if seg is None else extends(seg, req.messages, req.tools)
        if reason is None and seg is not None:
            prompt = seg.ids + await gateway.off_loop(continue_ids, seg, messages, gateway.renderer,
                                                       gateway.renderer.eos_id)
        else:
            seg = Segment(reason or "first request", req.tools)
            prompt = await gateway.off_loop(gateway.prompt_ids, messages)
        rows, forced = gateway.rows(req, prompt, session=rollout_id)

        def record(reply: dict[str, Any], turns: list[SampledTurn]) -> None:
            turn = turns[0]
            new = len(prompt) - len(seg.ids)
            ids = prompt + forced + turn.ids
            mask = seg.mask + [0] * new + [0] * len(forced) + [1] * len(turn.ids)
            logprobs = seg.logprobs + [0.0] * (new + len(forced)) + turn.logprobs
            if not len(ids) == len(mask) == len(logprobs) or new < 0:
                raise RuntimeError(f"rollout {rollout_id!r}: a turn's record does not line up (ids {len(ids)}, "
                                   f"mask {len(mask)}, logprobs {len(logprobs)}); not recorded")
            seg.ids, seg.mask, seg.logprobs = ids, mask, logprobs
            seg.turns.append(forced + turn.ids)
            seg.closed_turn = bool(turn.ids) and turn.ids[-1] == gateway.renderer.eos_id
            reply_message = Gateway.recorded_message(reply["choices"][0])
            seg.messages = [*req.messages, reply_message]
            seg.prompt_messages = [*messages, reply_message]
            if not rollout.segments or rollout.segments[-1] is not seg:
                rollout.segments.append(seg)
            rollout.replies[key] = reply

        pending = _submit(gateway, req, rows, forced, record, rollout.lock.release)
        handed = True
    finally:
        if not handed:
            rollout.lock.release()
    return await _deliver(gateway, req, rows, forced, pending)


@dataclass
class Pending:
    """A request handed to the engine: the reply's future, the queue its tokens stream through (None ends it), and
    the engine's job (what a stream whose client left cancels)."""
    replied: asyncio.Future[dict[str, Any]]
    tokens: asyncio.Queue[tuple[int, int] | None]
    job: Future[list[SampledTurn]]


def _submit(gateway: Gateway, req: ChatRequest, rows: list[TurnRequest], forced: list[int], record: Any = None,
            release: Any = None) -> Pending:
    """Hand the rows to the engine; the reply's future and the queue its tokens stream through. Once the turn is
    sampled, `record` keeps the reply in a rollout and `release` frees the rollout — on the event loop, whether or not
    the client is still waiting. Nothing here awaits, so a caller that gave `release` away cannot lose it."""
    loop = asyncio.get_running_loop()
    tokens: asyncio.Queue[tuple[int, int] | None] = asyncio.Queue()
    replied: asyncio.Future[dict[str, Any]] = loop.create_future()
    replied.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved even if the client left

    def complete(future: Any) -> None:
        tokens.put_nowait(None)
        try:
            reply = _reply(gateway, req, future.result(), forced, rows)
            if record is not None:
                record(reply, future.result())
            replied.set_result(reply)
        except Exception as e:
            replied.set_exception(e)
        finally:
            if release is not None:
                release()

    on_token = (lambda i, t: loop.call_soon_threadsafe(tokens.put_nowait, (i, t))) if req.stream else None
    future = gateway.engine.submit(rows, on_token)
    future.add_done_callback(lambda f: loop.call_soon_threadsafe(complete, f))
    return Pending(replied, tokens, future)


async def _deliver(gateway: Gateway, req: ChatRequest, rows: list[TurnRequest], forced: list[int],
                   pending: Pending) -> Any:
    """The reply as JSON, or as server-sent events while it is sampled."""
    if not req.stream:
        try:
            return await asyncio.shield(pending.replied)
        except RowRefused as e:
            raise ApiError(400, f"the request cannot be sampled: {e}", code="invalid_value") from None
    return StreamingResponse(_stream(gateway, req, rows, forced, pending), media_type="text/event-stream")


def _reply(gateway: Gateway, req: ChatRequest, turns: list[SampledTurn], forced: list[int],
           rows: list[TurnRequest]) -> dict[str, Any]:
    choices = [gateway.choice(req, i, turn, forced) for i, turn in enumerate(turns)]
    reply = completion(gateway.model_name, choices, len(rows[0].prompt) - len(forced),
                       sum(len(forced) + len(t.ids) for t in turns))
    if req.return_token_ids:
        reply["prompt_token_ids"] = rows[0].prompt[:len(rows[0].prompt) - len(forced)]
    return reply


def _sse(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


async def _stream(gateway: Gateway, req: ChatRequest, rows: list[TurnRequest], forced: list[int],
                  pending: Pending) -> AsyncIterator[str]:
    """Content deltas as tokens arrive — held back while the text may still become a tool call or a stop string —
    then each choice's tool calls, its finish reason and (on request) the usage, then [DONE]."""
    cid, created = completion_id(), int(time.time())
    head = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": gateway.model_name}
    forced_text = gateway.renderer.decode(forced) if forced else ""
    ids: list[list[int]] = [[] for _ in rows]
    sent = [0] * len(rows)
    hold = max((len(s) for s in req.stop), default=1) - 1
    for i in range(len(rows)):
        yield _sse({**head, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""},
                                         "finish_reason": None}]})
    while (item := await _next_token(gateway, pending)) is not None:
        i, t = item
        ids[i].append(t)
        if forced_text:
            continue  # a forced call is sent whole at the end
        text = gateway.renderer.decode(ids[i])
        if text.lstrip().startswith(OPEN[: len(text.lstrip())]) and req.tools and req.tool_choice != "none":
            continue  # may be a call: wait for the whole turn
        safe = len(text) - hold - (1 if text.endswith("\ufffd") else 0)
        if safe > sent[i]:
            yield _sse({**head, "choices": [{"index": i, "delta": {"content": text[sent[i]:safe]},
                                             "finish_reason": None}]})
            sent[i] = safe
    try:
        reply = await pending.replied  # built, and recorded under a rollout, when the turn was sampled
    except RowRefused as e:
        yield _sse(ApiError(400, f"the request cannot be sampled: {e}", code="invalid_value").body())
        return
    except Exception as e:  # the batch failed: nothing of it to the client (another request may have caused it)
        yield _sse(internal_error(e).body())
        return
    for i, choice in enumerate(reply["choices"]):
        async for chunk in _finish_chunks(head, i, choice, sent[i]):
            yield chunk
    if req.include_usage:
        yield _sse({**head, "choices": [], "usage": reply["usage"]})
    yield "data: [DONE]\n\n"


async def _next_token(gateway: Gateway, pending: Pending) -> tuple[int, int] | None:
    """The next sampled token; if the client goes away meanwhile (the server cancels its stream), the engine stops
    the request's rows before its next decode step — under a rollout nothing is recorded, and a retry samples anew."""
    try:
        return await pending.tokens.get()
    except asyncio.CancelledError:
        gateway.engine.cancel(pending.job)
        raise


async def _finish_chunks(head: dict[str, Any], i: int, choice: dict[str, Any], sent: int) -> AsyncIterator[str]:
    message = choice["message"]
    if message.get("tool_calls"):
        for k, call in enumerate(message["tool_calls"]):
            yield _sse({**head, "choices": [{"index": i, "delta": {"tool_calls": [{"index": k, **call}]},
                                             "finish_reason": None}]})
    elif (message["content"] or "")[sent:]:
        yield _sse({**head, "choices": [{"index": i, "delta": {"content": message["content"][sent:]},
                                         "finish_reason": None}]})
    last: dict[str, Any] = {"index": i, "delta": {}, "finish_reason": choice["finish_reason"]}
    if "logprobs" in choice:
        last["logprobs"] = choice["logprobs"]
    if "token_ids" in choice:
        last["token_ids"] = choice["token_ids"]
    yield _sse({**head, "choices": [last]})


async def _replay(reply: dict[str, Any], stream: bool, include_usage: bool) -> Any:
    """A retried request: the recorded reply again, as JSON or as one stream."""
    if not stream:
        return reply
    head = {"id": reply["id"], "object": "chat.completion.chunk", "created": reply["created"],
            "model": reply["model"]}

    async def events() -> AsyncIterator[str]:
        for i, choice in enumerate(reply["choices"]):
            yield _sse({**head, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""},
                                             "finish_reason": None}]})
            async for chunk in _finish_chunks(head, i, choice, 0):
                yield chunk
        if include_usage:
            yield _sse({**head, "choices": [], "usage": reply["usage"]})
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


def internal_error(e: BaseException) -> ApiError:
    """A 500 that tells the client a reference, never the exception: the server's log has it under that reference."""
    ref = uuid.uuid4().hex[:12]
    log.error("internal error %s", ref, exc_info=e)
    return ApiError(500, f"internal error (reference {ref}: the server's log has it)", kind="server_error")


def _hostname(netloc: str) -> str:
    """The host of a Host header or an origin's netloc, lower-case, without port or brackets."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):
        return netloc[1:netloc.find("]")] if "]" in netloc else netloc
    return netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 else netloc


def allowed_hosts(host: str, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The Host / Origin names a server bound to `host` accepts: bound to loopback, the loopback names (a page after
    a DNS rebind names its own); bound beyond it, any (the API key it must have guards it) unless `extra` names them."""
    if extra:
        return (*LOOPBACK_NAMES, host, *extra)
    return (*LOOPBACK_NAMES, host) if is_loopback(host) else ("*",)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_binding(host: str, api_key: str | None) -> None:
    """A server reachable from other machines must not be open to them: binding beyond loopback needs a key."""
    if not is_loopback(host) and not api_key:
        raise ConfigError(f"--host {host} is reachable from other machines: give --api-key KEY (clients send "
                          "Authorization: Bearer KEY), or bind 127.0.0.1")


__all__ = ["Gateway", "allowed_hosts", "check_binding", "create_app", "usage"]
