"""The OpenAI-compatible gateway (`agentic-rl serve`): serve a policy to agents written against the OpenAI API and
record what they did token for token, for training (`app.py`, `records.py`; the scheduler in `engine.py`).

Needs the `serve` extra (FastAPI, uvicorn): pip install -e '.[serve]'."""

from __future__ import annotations

from typing import Any


def serve(policy: str, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
          model_name: str | None = None, max_tokens: int | None = None, device: str = "auto",
          allow_hosts: tuple[str, ...] = (), max_rollouts: int | None = None, limits: Any = None) -> None:
    """Load the policy and serve it until interrupted. allow_hosts: Host / Origin names accepted beside the
    loopback ones and the bound address ("*": any); max_rollouts: rollouts open at once; limits: the server's
    timeouts and connection limit (`server.ServerLimits`)."""
    from .app import MAX_ROLLOUTS, allowed_hosts, check_binding
    from .server import ServerLimits, uvicorn_config

    check_binding(host, api_key)
    try:
        import uvicorn
    except ImportError as e:
        raise ImportError("agentic-rl serve needs the serve extra: pip install -e '.[serve]'") from e
    app = build_app(policy, api_key=api_key, model_name=model_name, max_tokens=max_tokens, device=device,
                    allowed_hosts=allowed_hosts(host, tuple(allow_hosts)), max_rollouts=max_rollouts or MAX_ROLLOUTS)
    uvicorn.Server(uvicorn_config(app, host, port, limits or ServerLimits())).run()


def build_app(policy: str, **kwargs: Any) -> Any:
    """The FastAPI app serving `policy` (a model directory or preset)."""
    from ..policies import HFPolicy
    from .app import Gateway, create_app

    device = kwargs.pop("device", "auto")
    return create_app(Gateway(HFPolicy(policy, device=device), **kwargs))
