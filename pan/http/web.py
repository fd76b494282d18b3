"""Shared aiohttp plumbing: orjson answers, the error contract, query parsing, guarded serving.

Every PAN server answers errors as ``{"status":"error","error":MSG}`` and
never lets a bad request crash it.  The middleware here enforces both for
requests that reach a handler; ``GuardedRequestHandler`` does the same for
what aiohttp refuses itself (bad HTTP, over-long request lines and headers),
and bounds what a connection may hold: time to send its header or body,
idle keep-alive time, and connections per remote address (``HttpLimits``).
Each refused request logs one WARNING line, rate-limited, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
import socket
import ssl
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import orjson
from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_protocol import RequestHandler, RequestPayloadError

from pan.security.auth import AuthError, Gate
from pan.util.metrics import MetricsText
from pan.util.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)
_refusals_log = RateLimitedLog(log)  # one budget per process: a flood on any server must not flood the log

JSON_TYPE = "application/json"

#: Longest error message put into an answer or a log line (aiohttp's own messages quote the bad bytes).
MAX_ERROR_CHARS = 200


class BadRequest(Exception):
    """A client error that maps to an HTTP status and a message."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class NotFound(BadRequest):
    def __init__(self, message: str) -> None:
        super().__init__(message, status=404)


def json_response(payload: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(payload), status=status, content_type=JSON_TYPE)


def raw_json_response(body: bytes, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """For answers assembled from pre-encoded parts (the hot `/data` path)."""
    return web.Response(body=body, status=status, content_type=JSON_TYPE, headers=headers)


def error_response(message: str, status: int) -> web.Response:
    return json_response({"status": "error", "error": message}, status=status)


def raw_error_response(message: str, status: int) -> bytes:
    """A complete HTTP/1.1 error answer, for a connection refused before any request was parsed."""
    body = orjson.dumps({"status": "error", "error": message})
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: {JSON_TYPE}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


# --- limits and counters ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one connection may hold on a PAN HTTP server; every worker and the repository use these.

    A timeout on reading a request is not one on answering it: a `/data` long
    poll (``w`` up to 60 s) waits in its handler, where none of these apply.
    """

    #: Seconds from a request's first byte to its complete header (a half-sent header is cut after this).
    header_timeout_s: float = 10.0
    #: Seconds to receive a request body (the middleware reads it, whole, before the handler runs).
    body_timeout_s: float = 30.0
    #: Seconds a connection may stay open with no request in flight (aiohttp's keep-alive timeout; it also
    #: bounds a connection that never sends a byte).  Longer than aiohttp clients' 15 s pool keep-alive, so
    #: a PAN client drops an idle pooled connection before the server does.
    idle_timeout_s: float = 20.0
    #: Seconds to keep reading (and dropping) the unread rest of a body after answering, so that the client
    #: gets the answer before the close (aiohttp's lingering time, 10 s by default).
    linger_s: float = 2.0
    #: Open connections from one remote address; more are answered 429 and closed.  Generous because every
    #: local client shares 127.0.0.1 (the fan-out benchmark runs 1,000 subscribers on loopback).
    max_connections_per_address: int = 2048
    #: Request line (method, path and query); longer ones are answered 414.  aiohttp's default.
    max_request_line_bytes: int = 8190
    #: One header field (name and value); longer ones are answered 431.  Differs from the request-line
    #: limit so that the answer can tell which of the two was too long.
    max_header_field_bytes: int = 8192
    #: Header fields per request.
    max_headers: int = 100


#: Largest request body (bytes) a server built by ``make_app`` reads, unless told otherwise; larger is 413.
DEFAULT_MAX_BODY_BYTES = 1 << 20

_LIMITS = web.AppKey("pan_http_limits", HttpLimits)
_MAX_BODY = web.AppKey("pan_http_max_body", int)


@dataclass(slots=True)
class HttpStats:
    """What a server refused, for `/metrics`: every refusal is counted, whether it was logged or not."""

    refused: Counter[int] = field(default_factory=Counter)  # HTTP status -> requests answered with it
    connections_refused: int = 0  # over the per-address cap
    header_timeouts: int = 0
    body_timeouts: int = 0
    open_connections: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "refused": {str(status): count for status, count in sorted(self.refused.items())},
            "connections_refused": self.connections_refused,
            "header_timeouts": self.header_timeouts,
            "body_timeouts": self.body_timeouts,
            "open_connections": self.open_connections,
        }


_STATS = web.AppKey("pan_http_stats", HttpStats)
_GATE = web.AppKey("pan_http_gate", Gate)


def http_stats(app: web.Application) -> HttpStats:
    """The refusal counters of an app built by ``make_app``."""
    return app[_STATS]


def _one_line(text: str) -> str:
    first = text.strip().splitlines()[0].rstrip(":") if text.strip() else ""
    return first if len(first) <= MAX_ERROR_CHARS else first[: MAX_ERROR_CHARS - 3] + "..."


def _note_refusal(stats: HttpStats | None, status: int, remote: str | None, what: str, message: str) -> None:
    """Count a refused request and log it in one line (404 is routine: a subscriber polling for a publisher)."""
    if stats is not None:
        stats.refused[status] += 1
    if status != 404:
        _refusals_log.warning("refused %s from %s: %d %s", what, remote or "?", status, _one_line(message))


# --- the middleware -----------------------------------------------------------------------


async def _read_body(request: web.Request) -> None:
    """Read the body into the request within the body timeout, so handlers' ``read()`` returns at once."""
    limit = request.app.get(_MAX_BODY, DEFAULT_MAX_BODY_BYTES)
    if request.content_length is not None and request.content_length > limit:
        raise BadRequest(f"request body of {request.content_length} bytes is larger than {limit} bytes", 413)
    timeout_s = request.app.get(_LIMITS, HttpLimits()).body_timeout_s
    try:
        async with asyncio.timeout(timeout_s):
            await request.read()
    except TimeoutError:
        stats = request.app.get(_STATS)
        if stats is not None:
            stats.body_timeouts += 1
        raise BadRequest(f"request body not received within {timeout_s:g} s", 408) from None
    except web.HTTPRequestEntityTooLarge:
        raise BadRequest(f"request body is larger than {limit} bytes", 413) from None
    except (ConnectionError, RequestPayloadError) as exc:
        raise BadRequest(f"request body incomplete: {exc}") from None


def _has_undecodable(query: Mapping[str, str]) -> bool:
    """Whether a percent-escaped query held bytes that are not UTF-8 (yarl decodes them to U+FFFD)."""
    return any("\ufffd" in key or "\ufffd" in value for key, value in query.items())


def _refuse(request: web.Request, status: int, message: str) -> web.Response:
    _note_refusal(request.app.get(_STATS), status, request.remote, f"{request.method} {request.path}", message)
    response = error_response(message, status)
    if status in (408, 413):  # the rest of the body is not worth reading
        response.force_close()
    return response


@web.middleware
async def error_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        if "%" in request.rel_url.raw_query_string and _has_undecodable(request.query):
            raise BadRequest("query string is not valid UTF-8")
        if request.body_exists:
            await _read_body(request)
        return await handler(request)
    except BadRequest as exc:
        return _refuse(request, exc.status, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _refuse(request, exc.status, exc.reason)
    except Exception:  # a handler bug must not take the server down
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_response("internal error", 500)


def auth_middleware(gate: Gate) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Requests ``gate`` refuses end here with 401 or 403, in the JSON error contract."""

    @web.middleware
    async def check(request: web.Request,
                    handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        body = await request.read() if request.body_exists else b""
        try:
            gate.check(request.method, request.path, request.query.items(), body, request.headers)
        except AuthError as exc:
            raise BadRequest(exc.message, exc.status) from None
        return await handler(request)

    return check


def make_app(*, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, gate: Gate | None = None) -> web.Application:
    """An app with the JSON error contract; bodies over ``max_body_bytes`` are refused with 413. With a ``gate``,
    only requests it lets through reach a handler (pan.security.auth)."""
    middlewares = [error_middleware] if gate is None else [error_middleware, auth_middleware(gate)]
    app = web.Application(middlewares=middlewares, client_max_size=max_body_bytes)
    app[_MAX_BODY] = max_body_bytes
    app[_STATS] = HttpStats()
    if gate is not None:
        app[_GATE] = gate
    return app


# --- query parameters ---------------------------------------------------------

#: An integer parameter: ASCII digits with an optional leading minus, no spaces, '+', '_' or other scripts'
#: digits (which Python's ``int()`` would all accept).
_INTEGER = re.compile(r"-?[0-9]+", re.ASCII)
#: Significant digits of the largest integer parameter (int64); longer ones are out of range, unparsed.
MAX_INT_DIGITS = 19


def query_str(query: Mapping[str, str], name: str, *, required: bool = False) -> str | None:
    value = query.get(name)
    if value is None or value == "":
        if required:
            raise BadRequest(f"missing parameter '{name}'")
        return None
    return value


def _shown(raw: str) -> str:
    return repr(raw if len(raw) <= 40 else raw[:37] + "...")


def parse_int(raw: str, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``raw`` as an integer under the strict grammar of ``_INTEGER``, within the bounds given."""
    if not _INTEGER.fullmatch(raw):
        raise BadRequest(
            f"parameter '{name}' must be an integer (ASCII digits, optional leading '-'), got {_shown(raw)}"
        )
    negative = raw.startswith("-")
    if len(raw.lstrip("-").lstrip("0")) > MAX_INT_DIGITS:
        if negative and minimum is not None:
            raise BadRequest(f"parameter '{name}' must be >= {minimum}, got {_shown(raw)}")
        if not negative and maximum is not None:
            raise BadRequest(f"parameter '{name}' must be <= {maximum}, got {_shown(raw)}")
        raise BadRequest(f"parameter '{name}' has more than {MAX_INT_DIGITS} digits, got {_shown(raw)}")
    value = int(raw)
    if minimum is not None and value < minimum:
        raise BadRequest(f"parameter '{name}' must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise BadRequest(f"parameter '{name}' must be <= {maximum}, got {value}")
    return value


def query_int(
    query: Mapping[str, str],
    name: str,
    *,
    default: int | None = None,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int | None:
    raw = query.get(name)
    if raw is None:
        return default
    return parse_int(raw, name, minimum=minimum, maximum=maximum)


#: Boolean parameter spellings.  ``1``/``0`` stay because clients send them (e.g. ``m=1`` on `/data`);
#: ``yes``/``no`` and other case variants are refused.
_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0"})


def query_bool(query: Mapping[str, str], name: str, *, default: bool = False) -> bool:
    raw = query.get(name)
    if raw is None:
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise BadRequest(f"parameter '{name}' must be true or false, got {raw!r}")


# --- hosts ----------------------------------------------------------------------------------

MAX_HOST_CHARS = 253  # the longest DNS name
_DNS_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)


def is_host(text: str) -> bool:
    """Whether ``text`` is an IP address or a DNS name, and nothing else.

    No port, path, query, fragment, userinfo, spaces or IPv6 zone, so that a
    URL built from it cannot point anywhere but that host.  The last label of
    a name is not all digits (``2130706433`` is not a name but an IPv4 in
    disguise).
    """
    if not text or len(text) > MAX_HOST_CHARS or not text.isascii():
        return False
    if "%" not in text:
        with contextlib.suppress(ValueError):
            ipaddress.ip_address(text)
            return True
    labels = text[:-1].split(".") if text.endswith(".") else text.split(".")
    return all(_DNS_LABEL.fullmatch(label) for label in labels) and not labels[-1].isdigit()


def url_host(host: str) -> str:
    """``host`` as it goes into a URL: IPv6 addresses in brackets."""
    return f"[{host}]" if ":" in host else host


# --- serving --------------------------------------------------------------------


class _ConnectionGuard:
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

    def __init__(self, manager: web.Server, *, guard: _ConnectionGuard, **kwargs: Any) -> None:
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
            _refusals_log.warning("refused a connection from %s: 429 %s", self._address, message)
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
        _refusals_log.warning("refused a request from %s: 408 header not complete in %g s", self._address, timeout_s)
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
            _note_refusal(self._guard.stats, status, request.remote, "a request", text)
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
        return status, "bad HTTP request: " + _one_line(message or str(exc or HTTPStatus(status).phrase))


class _GuardedServer(web.Server):
    """aiohttp's low-level server, making ``GuardedRequestHandler`` connections."""

    def __init__(
        self,
        handler: Any,
        *,
        request_factory: Any,
        loop: asyncio.AbstractEventLoop,
        guard: _ConnectionGuard,
        handler_kwargs: dict[str, Any],
    ) -> None:
        super().__init__(handler, request_factory=request_factory, loop=loop, **handler_kwargs)
        self._guard = guard
        self._handler_kwargs = handler_kwargs

    def __call__(self) -> RequestHandler:
        return GuardedRequestHandler(self, loop=self._loop, guard=self._guard, **self._handler_kwargs)


class _GuardedRunner(web.AppRunner):
    """An AppRunner whose server is a ``_GuardedServer`` (aiohttp builds the app's handler; we wrap it)."""

    def __init__(self, app: web.Application, *, guard: _ConnectionGuard, handler_kwargs: dict[str, Any]) -> None:
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
                return _refuse(request, exc.status, _one_line(exc.text or exc.reason))  # type: ignore[arg-type]

        return _GuardedServer(
            handle,
            request_factory=plain.request_factory,
            loop=asyncio.get_running_loop(),
            guard=self._guard,
            handler_kwargs=self._handler_kwargs,
        )


class HttpServer:
    """An aiohttp app bound to host:port with an explicit start/stop lifecycle and ``HttpLimits``."""

    def __init__(self, app: web.Application, host: str, port: int, *, limits: HttpLimits | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.limits = limits or HttpLimits()
        self.ssl_context = ssl_context  # HTTPS with this context; None: plain HTTP
        if _STATS not in app:
            app[_STATS] = HttpStats()
        self.stats = app[_STATS]
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        self.app[_LIMITS] = self.limits
        guard = _ConnectionGuard(self.limits, self.stats)
        handler_kwargs: dict[str, Any] = {
            "access_log": None,
            "keepalive_timeout": self.limits.idle_timeout_s,
            "lingering_time": self.limits.linger_s,
            "max_line_size": self.limits.max_request_line_bytes,
            "max_field_size": self.limits.max_header_field_bytes,
            "max_headers": self.limits.max_headers,
        }
        self._runner = _GuardedRunner(self.app, guard=guard, handler_kwargs=handler_kwargs)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True, ssl_context=self.ssl_context)
        await site.start()
        if self.port == 0:  # report the port the OS picked
            self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def add_http_metrics(metrics: MetricsText, server: HttpServer) -> None:
    """A server's refusal counters (bad requests by status, connection limits) as Prometheus samples."""
    stats = server.stats
    for status, count in sorted(stats.refused.items()):
        metrics.add("pan_http_refused_total", count, "counter", "requests refused, by HTTP status",
                    status=str(status))
    metrics.add("pan_http_connections_refused_total", stats.connections_refused, "counter",
                "connections refused over the per-address cap")
    metrics.add("pan_http_header_timeouts_total", stats.header_timeouts, "counter",
                "requests whose header did not arrive in time")
    metrics.add("pan_http_body_timeouts_total", stats.body_timeouts, "counter",
                "requests whose body did not arrive in time")
    metrics.add("pan_http_open_connections", stats.open_connections, "gauge", "open HTTP connections")
    gate = server.app.get(_GATE)
    if gate is not None:
        for reason, count in sorted(gate.refused.items()):
            metrics.add("pan_auth_refused_total", count, "counter", "requests refused by the workflow's secret",
                        reason=reason)


#: Ports this process handed out lately. The kernel may give a port that was just released to the next
#: bind, so two calls in a row (a worker's port, then its ingest port) could return the same one.
_RECENT_PORTS: deque[int] = deque(maxlen=4096)


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (for tests and launch scripts)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` ports that were free a moment ago, all different, and none handed out lately by this process:
    they are held together while chosen."""
    with contextlib.ExitStack() as stack:
        chosen: list[int] = []
        while len(chosen) < count:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))  # held until all are chosen, so the kernel gives a new one each time
            port = int(sock.getsockname()[1])
            if port not in _RECENT_PORTS:
                chosen.append(port)
        _RECENT_PORTS.extend(chosen)
        return chosen
