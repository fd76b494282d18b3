"""``HttpServer``: an app bound to host:port through the connection guard, and its refusal counters as metrics."""

from __future__ import annotations

import ssl
from typing import Any

from aiohttp import web

from pan.http.guard import ConnectionGuard, GuardedRunner
from pan.http.limits import GATE_KEY, LIMITS_KEY, STATS_KEY, HttpLimits, HttpStats
from pan.util.metrics import MetricsText


class HttpServer:
    """An aiohttp app bound to host:port with an explicit start/stop lifecycle and ``HttpLimits``."""

    def __init__(self, app: web.Application, host: str, port: int, *, limits: HttpLimits | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.limits = limits or HttpLimits()
        self.ssl_context = ssl_context  # HTTPS with this context; None: plain HTTP
        if STATS_KEY not in app:
            app[STATS_KEY] = HttpStats()
        self.stats = app[STATS_KEY]
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        self.app[LIMITS_KEY] = self.limits
        guard = ConnectionGuard(self.limits, self.stats)
        handler_kwargs: dict[str, Any] = {
            "access_log": None,
            "keepalive_timeout": self.limits.idle_timeout_s,
            "lingering_time": self.limits.linger_s,
            "max_line_size": self.limits.max_request_line_bytes,
            "max_field_size": self.limits.max_header_field_bytes,
            "max_headers": self.limits.max_headers,
        }
        self._runner = GuardedRunner(self.app, guard=guard, handler_kwargs=handler_kwargs)
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
    gate = server.app.get(GATE_KEY)
    if gate is not None:
        for reason, count in sorted(gate.refused.items()):
            metrics.add("pan_auth_refused_total", count, "counter", "requests refused by the workflow's secret",
                        reason=reason)
