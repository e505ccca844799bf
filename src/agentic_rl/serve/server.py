"""How uvicorn serves the gateway: timeouts and a connection limit, so slow or numerous clients cannot hold it.

uvicorn closes an idle keep-alive connection after `timeout_keep_alive`, but a client that sends its request head a
byte at a time resets that timer with every byte and holds the connection forever (a slowloris). `HeadTimeoutH11`
closes a connection whose request head has not arrived whole within `header_timeout_s` of the connection opening
or of the previous response. `limit_concurrency` bounds connections and tasks together: beyond it uvicorn answers
503 at once instead of queueing without end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HEADER_TIMEOUT_S = 10.0
KEEP_ALIVE_S = 5
MAX_CONNECTIONS = 256


@dataclass(frozen=True)
class ServerLimits:
    """The limits `serve` sets on uvicorn (flags: --header-timeout, --max-connections)."""
    header_timeout_s: float = HEADER_TIMEOUT_S
    keep_alive_s: int = KEEP_ALIVE_S
    max_connections: int = MAX_CONNECTIONS


def uvicorn_config(app: Any, host: str, port: int, limits: ServerLimits = ServerLimits(),
                   log_level: str = "warning") -> Any:
    """A `uvicorn.Config` serving `app` under `limits`, with the head-timeout h11 protocol."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, log_level=log_level, http=head_timeout_protocol(limits),
                          timeout_keep_alive=limits.keep_alive_s, limit_concurrency=limits.max_connections)


def head_timeout_protocol(limits: ServerLimits) -> type:
    """uvicorn's h11 protocol, closing a connection whose request head is not whole within the limit."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeadTimeoutH11(H11Protocol):  # type: ignore[misc]
        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            """Start the clock for the next request head; it stops counting once a new request cycle begins."""
            self._disarm()
            waiting_on = self.cycle
            self._head_timer = self.loop.call_later(limits.header_timeout_s, self._expire, waiting_on)

        def _disarm(self) -> None:
            timer = getattr(self, "_head_timer", None)
            if timer is not None:
                timer.cancel()
                self._head_timer = None

        def _expire(self, waiting_on: Any) -> None:
            if self.cycle is waiting_on and not self.transport.is_closing():  # no new request head arrived
                self.transport.close()

    return HeadTimeoutH11
