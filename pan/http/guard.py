"""The connection guard: aiohttp's connection protocol, server and runner with PAN's limits and JSON errors.

``GuardedRequestHandler`` answers what aiohttp refuses itself (bad HTTP,
over-long request lines and headers) in the JSON error contract, and bounds
what a connection may hold: time to send its header, and connections per
remote address (``HttpLimits``).  Each refused request logs one WARNING line,
rate-limited, never a traceback.  ``pan.http.server`` serves an app through
``GuardedRunner``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_protocol import RequestHandler

from pan.http import limits as http_limits  # its refusals_log looked up when used: one budget, swappable in tests
from pan.http.limits import HttpLimits, HttpStats, note_refusal
from pan.http.responses import error_response, one_line, raw_error_response
from pan.http.web import refuse

log = logging.getLogger(__name__)


class ConnectionGuard:
    """Counts open connections per remote address, shared by every connection of one server."""

    def __init__(self, limits: HttpLimits, stats: HttpStats) -> None:
        self.limits = limits
        self.stats = stats
        self._open: Counter[str] = Counter()

    def admit(self, address: str) -> bool:
        self._open[address] += 1
        self.stats.open_connections += 1
        return self._open[address] <= self.limits.max_connections_per_address

    def release(self, address: str) -> None:
        self.stats.open_connections -= 1
        self._open[address] -= 1
        if self._open[address] <= 0:
            del self._open[address]


class GuardedRequestHandler(RequestHandler):
    """aiohttp's connection protocol with PAN's limits and JSON errors.

    aiohttp answers what it cannot parse in ``handle_error`` with a
    ``text/plain`` body and a logged traceback; here that answer is the JSON
    contract and the log one rate-limited WARNING line.  A header timer cuts
    a request whose header does not complete in time (aiohttp has none), and
    the per-address cap is enforced when the connection is made.
    """

    def __init__(self, manager: web.Server, *, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._address: str | None = None
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        self._address = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if not self._guard.admit(self._address):
            self._guard.stats.connections_refused += 1
            cap = self._guard.limits.max_connections_per_address
            message = f"more than {cap} open connections from {self._address}"
            http_limits.refusals_log.warning("refused a connection from %s: 429 %s", self._address, message)
            self._close_with(message, 429)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_header_timer()
        if self._address is not None:
            self._guard.release(self._address)
            self._address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._messages or self._request_in_progress:
            self._cancel_header_timer()  # a complete header arrived, or the bytes belong to a request being handled
        elif data and self._header_timer is None and not self._force_close:
            self._header_timer = self._loop.call_later(self._guard.limits.header_timeout_s, self._header_timed_out)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timed_out(self) -> None:
        self._header_timer = None
        if self._messages or self._request_in_progress or self._force_close or self.transport is None:
            return
        self._guard.stats.header_timeouts += 1
        timeout_s = self._guard.limits.header_timeout_s
        http_limits.refusals_log.warning(
            "refused a request from %s: 408 header not complete in %g s", self._address, timeout_s
        )
        self._close_with(f"request header not complete within {timeout_s:g} s", 408)

    def _close_with(self, message: str, status: int) -> None:
        if self.transport is not None:
            self.transport.write(raw_error_response(message, status))
        self.force_close()  # closing the transport still sends what was written

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:
            log.error("error handling a request from %s", request.remote, exc_info=exc)
            text = HTTPStatus(status).phrase
        else:
            status, text = self._classify(status, exc, message)
            note_refusal(self._guard.stats, status, request.remote, "a request", text)
        if request.writer.output_size > 0:  # as aiohttp: an answer has begun, there is nothing left to say
            raise ConnectionError("response already started, cannot send an error")
        response = error_response(text, status)
        response.force_close()
        return response

    def _classify(self, status: int, exc: BaseException | None, message: str | None) -> tuple[int, str]:
        """aiohttp answers every parse failure 400; an over-long line gets 414 or 431 and a short message."""
        if isinstance(exc, LineTooLong):
            limit = exc.args[1] if len(exc.args) > 1 else None
            if limit == self.max_line_size and limit != self.max_field_size:
                return 414, f"request line longer than {limit} bytes"
            if limit == self.max_field_size:
                return 431, f"header field longer than {limit} bytes"
        return status, "bad HTTP request: " + one_line(message or str(exc or HTTPStatus(status).phrase))


class _GuardedServer(web.Server):
    """aiohttp's low-level server, making ``GuardedRequestHandler`` connections."""

    def __init__(
        self,
        handler: Any,
        *,
        request_factory: Any,
        loop: asyncio.AbstractEventLoop,
        guard: ConnectionGuard,
        handler_kwargs: dict[str, Any],
    ) -> None:
        super().__init__(handler, request_factory=request_factory, loop=loop, **handler_kwargs)
        self._guard = guard
        self._handler_kwargs = handler_kwargs

    def __call__(self) -> RequestHandler:
        return GuardedRequestHandler(self, loop=self._loop, guard=self._guard, **self._handler_kwargs)


class GuardedRunner(web.AppRunner):
    """An AppRunner whose server is a ``_GuardedServer`` (aiohttp builds the app's handler; we wrap it)."""

    def __init__(self, app: web.Application, *, guard: ConnectionGuard, handler_kwargs: dict[str, Any]) -> None:
        super().__init__(app, handle_signals=False, shutdown_timeout=1.0, **handler_kwargs)
        self._guard = guard
        self._handler_kwargs = handler_kwargs

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()  # starts and freezes the app
        app_handler = plain.request_handler

        async def handle(request: web.BaseRequest) -> web.StreamResponse:
            """aiohttp raises some refusals before the middleware runs (e.g. 417 for an unknown Expect)."""
            try:
                return await app_handler(request)
            except web.HTTPException as exc:
                if exc.status < 400:
                    raise
                return refuse(request, exc.status, one_line(exc.text or exc.reason))  # type: ignore[arg-type]

        return _GuardedServer(
            handle,
            request_factory=plain.request_factory,
            loop=asyncio.get_running_loop(),
            guard=self._guard,
            handler_kwargs=self._handler_kwargs,
        )
