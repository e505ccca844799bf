"""A policy served by a gateway over HTTP (`rollout.engine=gateway`): the env path's episodes sampled by a server
instead of in-process, with the same trajectories.

Each episode is a rollout of its own on the gateway (`/rollouts/{id}/v1/chat/completions`). The env's system prompt
already holds its tool schemas, so requests carry no `tools`: a reply is the model's raw text, which the env parses
as it parses an in-process turn, and the session sends each reply back as that text, so every request extends the
record. The running episodes' requests go out at once (a thread each) and the gateway samples them as one batch. When
an episode ends, its record — ids as sampled, loss mask, logprobs — is taken from the gateway (`DELETE
/rollouts/{id}`) and closed with the template's tail, as an in-process session closes it. This is the boundary that
lets generation run in another process or on another machine (issue: scale-out).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..envs.base import Env, Message, Task, stable_hash
from ..runtime.render import Renderer
from .base import Policy, SamplingConfig, Session, TokenRecord, Turn


class GatewayPolicy(Policy):
    """Samples through the gateway at `url` (its root, e.g. http://127.0.0.1:8000); `renderer` is the served
    model's (for closing records), `model` its served name."""

    def __init__(self, url: str, renderer: Renderer, model: str, sampling: SamplingConfig | None = None,
                 api_key: str | None = None, timeout_s: float = 600.0):
        import httpx

        self.url, self.renderer, self.model = url.rstrip("/"), renderer, model
        self.sampling = sampling or SamplingConfig()
        self.name = f"gateway:{self.url}"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)
        self.pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="agentic-rl-gateway")  # a request each

    def start(self, env: Env, tasks: Sequence[Task], samples: Sequence[int], seed: int) -> Session:
        return GatewaySession(self, len(tasks), seed)

    def close(self) -> None:
        self.pool.shutdown()
        self.http.close()


class GatewaySession(Session):
    def __init__(self, policy: GatewayPolicy, n: int, seed: int):
        self.policy, self.seed = policy, seed
        self.prefix = uuid.uuid4().hex[:12]
        self.ids: dict[int, str] = {}  # episode → its rollout's id on the gateway (opened by its first turn)
        self.replies: list[list[str]] = [[] for _ in range(n)]  # each episode's replies, as the gateway sent them

    def act(self, episodes: Sequence[int], conversations: Sequence[list[Message]]) -> list[Turn]:
        return list(self.policy.pool.map(self._turn, episodes, conversations))

    def _turn(self, episode: int, conversation: list[Message]) -> Turn:
        p = self.policy
        body: dict[str, Any] = {"model": p.model, "messages": self._wire(episode, conversation),
                                "temperature": p.sampling.temperature, "max_tokens": p.sampling.max_new_tokens,
                                "seed": stable_hash("gateway", self.seed, episode, len(self.replies[episode])) % 2**31}
        r = p.http.post(f"/rollouts/{self._id(episode)}/v1/chat/completions", json=body)
        if r.status_code != 200:
            raise RuntimeError(f"the gateway at {p.url} answered {r.status_code}: {r.text[:500]}")
        choice = r.json()["choices"][0]
        text = choice["message"]["content"] or ""
        self.replies[episode].append(text)
        return Turn(text, "length" if choice["finish_reason"] == "length" else "stop")

    def _wire(self, episode: int, conversation: list[Message]) -> list[dict[str, Any]]:
        """The conversation as the gateway recorded it: assistant turns as the text it sent, tool results with the
        call ids the protocol asks for."""
        out: list[dict[str, Any]] = []
        k = 0
        for m in conversation:
            if m["role"] == "assistant":
                out.append({"role": "assistant", "content": self.replies[episode][k]})
                k += 1
            elif m["role"] == "tool":
                out.append({"role": "tool", "content": m["content"], "tool_call_id": f"call_{len(out)}",
                            **({"name": m["name"]} if m.get("name") else {})})
            else:
                out.append({"role": m["role"], "content": m["content"]})
        return out

    def finish(self, episode: int, conversation: list[Message]) -> TokenRecord | None:
        """Take the episode's record from the gateway and close it with the template's tail after the last turn."""
        r = self.policy.http.delete(f"/rollouts/{self._id(episode)}")
        if r.status_code != 200:
            raise RuntimeError(f"the gateway at {self.policy.url} answered {r.status_code}: {r.text[:500]}")
        segments = r.json()["segments"]
        if len(segments) != 1:
            reasons = "; ".join(s["reason"] for s in segments[1:])
            raise RuntimeError(f"episode {episode}: the gateway recorded {len(segments)} segments ({reasons}); the env "
                               "path extends one conversation, so this is a bug")
        seg = segments[0]
        ids, mask, logprobs = list(seg["ids"]), list(seg["mask"]), list(seg["logprobs"])
        full = self.policy.renderer.render(conversation, assistant_ids=seg["turns"]).ids
        if full[:len(ids)] != ids:
            raise RuntimeError(f"episode {episode}: the recorded ids are not a prefix of the rendered conversation")
        tail = full[len(ids):]
        return TokenRecord(ids + tail, mask + [0] * len(tail), logprobs + [0.0] * len(tail), seg["turns"])

    def _id(self, episode: int) -> str:
        """The episode's rollout on the gateway, opened on first use (`POST /rollouts`; the gateway picks the id)."""
        if episode not in self.ids:
            r = self.policy.http.post("/rollouts", json={"name": f"{self.prefix}-{episode}"})
            if r.status_code != 201:
                raise RuntimeError(f"the gateway at {self.policy.url} answered {r.status_code}: {r.text[:500]}")
            self.ids[episode] = r.json()["id"]
        return self.ids[episode]
