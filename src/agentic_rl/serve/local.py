"""The gateway on a free loopback port in a background thread: how the trainer (and the tests) put a policy behind
the OpenAI protocol for agents running in the same process."""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import Any

from ..policies.hf.sampler import HFPolicy
from .app import Gateway, create_app
from .server import ServerLimits, uvicorn_config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalGateway:
    """A Gateway over `policy` served by uvicorn on 127.0.0.1 in a daemon thread; `url` is its root. A context
    manager: leaving it stops the server and the engine's thread."""

    def __init__(self, policy: HFPolicy, model_name: str | None = None, api_key: str | None = None,
                 start_timeout_s: float = 30.0, limits: ServerLimits = ServerLimits(), **gateway: Any):
        """limits: the server's timeouts and connection limit; gateway: more `Gateway` arguments (max_rollouts, …)."""
        try:
            import uvicorn
        except ImportError as e:
            raise ImportError("an agent function is served through the gateway, which needs the serve extra: "
                              "pip install -e '.[serve]'") from e
        self.gateway = Gateway(policy, model_name=model_name, api_key=api_key, **gateway)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self._server = uvicorn.Server(uvicorn_config(create_app(self.gateway), "127.0.0.1", port, limits, log_level="error"))
        self._thread = threading.Thread(target=self._server.run, name="agentic-rl-gateway", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + start_timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the gateway did not start on {self.url} within {start_timeout_s:.0f} s")
            time.sleep(0.02)

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self.gateway.shutdown()

    def __enter__(self) -> LocalGateway:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
