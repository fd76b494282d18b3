"""What a PAN HTTP server allows a connection (``HttpLimits``), and the account of what it refused.

Every refusal is counted in the app's ``HttpStats`` (for `/metrics`) and
logged as one WARNING line through ``refusals_log``, rate-limited, never a
traceback.  The app keys here are where an app keeps its limits, counters
and auth gate, shared by ``pan.http.web`` (the middleware) and
``pan.http.server`` (serving and metrics).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from pan.http.responses import one_line
from pan.security.auth import Gate
from pan.util.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)
refusals_log = RateLimitedLog(log)  # one budget per process: a flood on any server must not flood the log


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


LIMITS_KEY = web.AppKey("pan_http_limits", HttpLimits)


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


STATS_KEY = web.AppKey("pan_http_stats", HttpStats)
GATE_KEY = web.AppKey("pan_http_gate", Gate)


def http_stats(app: web.Application) -> HttpStats:
    """The refusal counters of an app built by ``make_app``."""
    return app[STATS_KEY]


def note_refusal(stats: HttpStats | None, status: int, remote: str | None, what: str, message: str) -> None:
    """Count a refused request and log it in one line (404 is routine: a subscriber polling for a publisher)."""
    if stats is not None:
        stats.refused[status] += 1
    if status != 404:
        refusals_log.warning("refused %s from %s: %d %s", what, remote or "?", status, one_line(message))
