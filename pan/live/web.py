"""A live view's web server: static files, a WebSocket per browser fed from a ``StreamHub``, ``/metrics``.

The view itself (its HTML, script and what it draws) is the caller's: it hands over a folder of static
files and a config object the page asks for (``/config``). Every browser gets its own ``Viewer`` (one
slot per stream, newest values only) and a sender that writes at most ``max_rate_hz`` frames a second,
so a slow browser skips frames and a fast producer cannot flood a tab.

Protocol: the page sends ``{"want": [stream, ...]}`` (the whole set, whenever it changes); the server
sends ``{"hello": {"server": ID, ...}}`` once, then frames ``{"t": wall_ms, "streams": {name: [tuple,
...]}}``, with ``"problems": {name: reason}`` when reading a stream fails (a repository that refuses a
missing read token, an untrusted certificate): the page says so instead of staying empty. ``ID`` changes
when the server restarts, so a page can tell it reconnected to a new one.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import ssl
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from pan.http.responses import json_response
from pan.http.web import make_app
from pan.live.hub import StreamHub, Tuple, Viewer
from pan.repository.client import Address, RepositoryClient, RepositoryUnavailable, http_url, parse_addresses
from pan.security.auth import bearer
from pan.security.tls import scheme
from pan.util.metrics import CONTENT_TYPE as METRICS_TYPE
from pan.util.metrics import MetricsText

log = logging.getLogger(__name__)

#: Frames per second a browser gets at most (a stream may change 50 times a second or more; a screen needs fewer).
DEFAULT_MAX_RATE_HZ = 25.0
#: Streams one browser may watch at once (a full game has ~450; a view needs far fewer).
MAX_WANTED = 200
#: Longest stream name accepted from a browser.
MAX_NAME_CHARS = 200
NETWORK = "$network"  # the workflow's streams and workers, polled while some browser watches it
DELAYS = "$delays"  # the query delay of every watched stream, once a second


class LiveServer:
    """The aiohttp app of a live view around one hub."""

    def __init__(self, hub: StreamHub, static_dir: Path, *, config: dict[str, Any] | None = None,
                 max_rate_hz: float = DEFAULT_MAX_RATE_HZ) -> None:
        self.hub = hub
        self.static_dir = static_dir
        self.config = config or {}
        self.min_interval_s = 1.0 / max_rate_hz
        self.server_id = uuid.uuid4().hex[:12]
        self.frames = 0
        self._sockets: set[web.WebSocketResponse] = set()
        self.app = make_app()
        self.app.add_routes([
            web.get("/", self.handle_index),
            web.get("/config", self.handle_config),
            web.get("/ws", self.handle_ws),
            web.get("/metrics", self.handle_metrics),
            web.get("/health", self.handle_health),
            web.static("/static", static_dir),
        ])

    async def handle_index(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(self.static_dir / "index.html")

    async def handle_config(self, request: web.Request) -> web.Response:
        return json_response({**self.config, "server": self.server_id})

    async def handle_health(self, request: web.Request) -> web.Response:
        return json_response({"status": "ok", "server": self.server_id})

    async def handle_metrics(self, request: web.Request) -> web.Response:
        metrics = MetricsText(role="live")
        stats = self.hub.stats
        metrics.add("pan_live_subscriptions", self.hub.subscriptions, help="open PAN subscriptions (one per stream)")
        metrics.add("pan_live_subscriptions_opened_total", stats.opened, "counter", help="PAN subscriptions opened")
        metrics.add("pan_live_subscriptions_closed_total", stats.closed, "counter", help="PAN subscriptions closed")
        metrics.add("pan_live_browsers", len(self._sockets), help="connected browsers")
        metrics.add("pan_live_tuples_total", stats.tuples, "counter", help="tuples received from PAN")
        metrics.add("pan_live_frames_total", self.frames, "counter", help="frames sent to browsers")
        metrics.add("pan_live_skipped_total", stats.skipped, "counter",
                    help="slot values replaced before a browser got them (skipped frames)")
        metrics.add("pan_live_failures_total", stats.failures, "counter",
                    help="failed reads of a PAN subscription (retried; the browsers are told why)")
        metrics.add("pan_live_refused_total", stats.refused, "counter",
                    help="wanted streams not subscribed: the hub holds its maximum already")
        return web.Response(body=metrics.render(), headers={"Content-Type": METRICS_TYPE})

    async def handle_ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(heartbeat=20.0, max_msg_size=1 << 16)
        await ws.prepare(request)
        viewer = self.hub.viewer()
        self._sockets.add(ws)
        sender = asyncio.get_running_loop().create_task(self._send(ws, viewer), name="live:send")
        try:
            await ws.send_bytes(orjson.dumps({"hello": {"server": self.server_id, **self.config}}))
            async for message in ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    continue
                wanted = _wanted(message.data)
                if wanted is None:
                    await ws.send_bytes(orjson.dumps({"error": f"expected {{\"want\": [names]}}, at most "
                                                               f"{MAX_WANTED} names"}))
                    continue
                viewer.want(wanted)
        finally:
            self._sockets.discard(ws)
            viewer.close()
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
        return ws

    async def close(self) -> None:
        """Say goodbye to every browser (they reconnect to the next server) and close the PAN subscriptions."""
        for ws in list(self._sockets):
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5.0):
                    await ws.close(code=aiohttp.WSCloseCode.GOING_AWAY, message=b"server stopping")
        await self.hub.close()

    async def _send(self, ws: web.WebSocketResponse, viewer: Viewer) -> None:
        """Newest slots, one frame at a time, at most ``max_rate_hz``: a slow browser skips, never queues."""
        loop = asyncio.get_running_loop()
        while not ws.closed:
            await viewer.changed.wait()
            started = loop.time()
            problems = viewer.take_problems()
            frame: dict[str, Any] = {"t": int(time.time() * 1000), "streams": viewer.take()}
            if problems:
                frame["problems"] = problems
            try:
                async with asyncio.timeout(30.0):
                    await ws.send_bytes(orjson.dumps(frame))
            except (ConnectionError, TimeoutError, RuntimeError):
                await ws.close()
                return
            self.frames += 1
            await asyncio.sleep(max(0.0, self.min_interval_s - (loop.time() - started)))


def _wanted(data: str) -> list[str] | None:
    try:
        message = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    names = message.get("want") if isinstance(message, dict) else None
    if not isinstance(names, list) or len(names) > MAX_WANTED:
        return None
    if not all(isinstance(n, str) and 0 < len(n) <= MAX_NAME_CHARS for n in names):
        return None
    return names


# --- what the network view shows ------------------------------------------------------------------------


def network_source(repositories: Address | Sequence[Address], *, token: str | None = None,
                   tls: ssl.SSLContext | None = None, interval_s: float = 2.0,
                   timeout_s: float = 3.0) -> Callable[..., Any]:
    """A hub source: every ``interval_s``, the repository's streams and each publisher's own `/streams`."""
    addresses = parse_addresses(repositories)

    async def poll(emit: Callable[[list[Tuple]], None]) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
            while True:
                emit([await _snapshot(session, addresses, token, tls, timeout_s)])
                await asyncio.sleep(interval_s)

    return poll


async def _snapshot(session: aiohttp.ClientSession, addresses: list[tuple[str, int]], token: str | None,
                    tls: ssl.SSLContext | None, timeout_s: float) -> Tuple:
    streams: dict[str, Any] = {}
    errors: list[str] = []
    for address in addresses:
        client = RepositoryClient(address, session=session, timeout_s=timeout_s, token=token, tls=tls)
        try:
            streams = await client.streams()
            break
        except RepositoryUnavailable as exc:
            errors.append(str(exc))
    endpoints = sorted({(p["host"], p["port"]) for pubs in streams.values() for p in pubs})
    answers = await asyncio.gather(*(_worker(session, host, port, token, tls) for host, port in endpoints))
    workers = {f"{host}:{port}": answer for (host, port), answer in zip(endpoints, answers, strict=True)}
    return {"ts": int(time.time() * 1000), "streams": streams, "workers": workers, "errors": errors}


async def _worker(session: aiohttp.ClientSession, host: str, port: int, token: str | None,
                  tls: ssl.SSLContext | None) -> Any:
    """A worker's `/streams`, or its error in one line."""
    try:
        async with session.get(http_url(host, port, "/streams", scheme(tls)), headers=bearer(token),
                               **({} if tls is None else {"ssl": tls})) as response:
            if response.status != 200:
                return {"error": f"HTTP {response.status}"}
            return orjson.loads(await response.read())
    except (aiohttp.ClientError, TimeoutError, OSError, orjson.JSONDecodeError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:200]}


class DelayWatch:
    """The query delay of each watched stream, as the live server sees it.

    A stream's delay is the wall time between the hub receiving a tuple and it receiving the first tuple
    of the ``reference`` stream (an input of the network, e.g. a forwarder's) with an equal or later event
    time: how long after its input the answer reached this server. Needs the reference watched too.
    """

    def __init__(self, reference: str, *, horizon: int = 20000) -> None:
        self.reference = reference
        self.horizon = horizon
        self._ts: list[int] = []  # event times of the reference's tuples, in arrival order (ascending)
        self._wall: list[float] = []  # when each arrived
        self.latest: dict[str, float] = {}  # stream -> delay (ms) of its newest tuple

    def observe(self, stream: str, tuples: list[Tuple], now: float) -> None:
        ts = tuples[-1].get("ts")
        if not isinstance(ts, int):
            return
        if stream == self.reference:
            if self._ts and ts < self._ts[-1]:  # the reference restarted: start over
                self._ts, self._wall = [], []
            self._ts.append(ts)
            self._wall.append(now)
            if len(self._ts) > 2 * self.horizon:
                del self._ts[: self.horizon], self._wall[: self.horizon]
            return
        n = bisect.bisect_left(self._ts, ts)
        if n < len(self._ts):
            self.latest[stream] = round((now - self._wall[n]) * 1000, 1)

    def source(self, hub: StreamHub, interval_s: float = 1.0) -> Callable[..., Any]:
        """A hub source emitting ``{"ts", "reference", "delays_ms"}`` every ``interval_s`` while watched; it
        keeps a viewer of the reference stream of its own meanwhile."""

        async def run(emit: Callable[[list[Tuple]], None]) -> None:
            viewer = hub.viewer()
            viewer.want([self.reference])
            try:
                while True:
                    await asyncio.sleep(interval_s)
                    emit([{"ts": int(time.time() * 1000), "reference": self.reference,
                           "delays_ms": dict(self.latest)}])
                    viewer.take()
            finally:
                viewer.close()

        return run
