"""The publish/subscribe repository: which publishers serve which stream.

Registrations are soft state.  Each one carries a lease that its publisher
refreshes by publishing again; a repository that restarts empty is whole
again after one refresh period, and the data plane never depends on it.
"""

from __future__ import annotations

import html
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from pan.web import (
    BadRequest,
    HttpServer,
    NotFound,
    json_response,
    make_app,
    query_bool,
    query_int,
    query_str,
)

DEFAULT_PORT = 8080
DEFAULT_LEASE_MS = 15_000
MAX_LEASE_MS = 3_600_000


@dataclass(slots=True)
class Publisher:
    host: str
    port: int
    rep: bool
    lvl: int
    expires_at: float

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "port": self.port, "rep": self.rep, "lvl": self.lvl}


class Registry:
    """Stream name -> publishers, with leases measured on a monotonic clock."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._streams: dict[str, dict[tuple[str, int], Publisher]] = {}

    def publish(self, stream: str, host: str, port: int, rep: bool, lvl: int, lease_ms: int) -> None:
        expires = self._clock() + lease_ms / 1000
        self._streams.setdefault(stream, {})[(host, port)] = Publisher(host, port, rep, lvl, expires)

    def unpublish(self, stream: str, host: str, port: int) -> bool:
        publishers = self._streams.get(stream)
        if publishers is None or publishers.pop((host, port), None) is None:
            return False
        if not publishers:
            del self._streams[stream]
        return True

    def publishers(self, stream: str) -> list[Publisher]:
        self._expire()
        return list(self._streams.get(stream, {}).values())

    def snapshot(self) -> dict[str, list[Publisher]]:
        self._expire()
        return {name: list(pubs.values()) for name, pubs in sorted(self._streams.items())}

    def _expire(self) -> None:
        now = self._clock()
        for name in list(self._streams):
            publishers = self._streams[name]
            for key in [key for key, pub in publishers.items() if pub.expires_at <= now]:
                del publishers[key]
            if not publishers:
                del self._streams[name]


def choose_publisher(
    candidates: list[Publisher],
    *,
    norep: bool,
    below_level: int | None,
    exclude: set[tuple[str, int]],
    rng: random.Random,
) -> Publisher | None:
    """Random choice among the publishers a subscriber allows."""
    allowed = [
        pub
        for pub in candidates
        if not (norep and pub.rep)
        and (below_level is None or pub.lvl < below_level)
        and (pub.host, pub.port) not in exclude
    ]
    return rng.choice(allowed) if allowed else None


def parse_endpoints(raw: str | None) -> set[tuple[str, int]]:
    """``host:port,host:port`` -> set; used by the optional `exclude` parameter."""
    if not raw:
        return set()
    endpoints: set[tuple[str, int]] = set()
    for part in raw.split(","):
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise BadRequest(f"parameter 'exclude' must be host:port[,host:port...], got {part!r}")
        endpoints.add((host, int(port)))
    return endpoints


def _param_text(value: Any) -> str:
    """A JSON value as the query-string text the GET validators expect."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class RepositoryServer:
    """aiohttp front end for the Registry (DESIGN §4, "Repository")."""

    def __init__(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT, *, seed: int | None = None) -> None:
        self.registry = Registry()
        self._rng = random.Random(seed)
        app = make_app()
        app.add_routes(
            [
                web.get("/publish", self.handle_publish),
                web.post("/publish", self.handle_publish_many),
                web.get("/unpublish", self.handle_unpublish),
                web.get("/subscribe", self.handle_subscribe),
                web.get("/streams", self.handle_streams),
                web.get("/debug", self.handle_debug),
                web.get("/health", self.handle_health),
            ]
        )
        self.server = HttpServer(app, host, port)

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()

    async def handle_publish(self, request: web.Request) -> web.Response:
        q = request.query
        stream = query_str(q, "s", required=True)
        assert stream
        lease_ms = self._publish([stream], q)
        return json_response({"status": "ok", "lease_ms": lease_ms})

    async def handle_publish_many(self, request: web.Request) -> web.Response:
        """``POST /publish``: one lease refresh for many streams of one publisher.

        A worker with hundreds of outputs would otherwise send hundreds of
        requests every refresh period.  The body is a JSON object with the GET
        parameters, except that ``s`` is a list of stream names.
        """
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest("body must be a JSON object")
        streams = body.get("s")
        if not isinstance(streams, list) or not streams or not all(isinstance(s, str) and s for s in streams):
            raise BadRequest("'s' must be a non-empty list of stream names")
        params = {k: _param_text(v) for k, v in body.items() if k != "s" and v is not None}
        lease_ms = self._publish(streams, params)
        return json_response({"status": "ok", "lease_ms": lease_ms, "streams": len(streams)})

    def _publish(self, streams: list[str], q: Mapping[str, str]) -> int:
        """Validate the publisher's parameters, then register it for every stream."""
        host = query_str(q, "h", required=True)
        port = query_int(q, "p", minimum=1, maximum=65535)
        if port is None:
            raise BadRequest("missing parameter 'p'")
        rep = query_bool(q, "rep")
        lvl = query_int(q, "lvl", default=1 if rep else 0, minimum=0, maximum=1000)
        if not rep and lvl != 0:
            raise BadRequest("an original producer (rep=false) has level 0")
        if rep and lvl == 0:
            raise BadRequest("a repeater (rep=true) needs a level >= 1")
        lease_ms = query_int(q, "ttl", default=DEFAULT_LEASE_MS, minimum=100, maximum=MAX_LEASE_MS)
        assert host and lvl is not None and lease_ms is not None
        for stream in streams:
            self.registry.publish(stream, host, port, rep, lvl, lease_ms)
        return lease_ms

    async def handle_unpublish(self, request: web.Request) -> web.Response:
        q = request.query
        stream = query_str(q, "s", required=True)
        host = query_str(q, "h", required=True)
        port = query_int(q, "p", minimum=1, maximum=65535)
        if port is None:
            raise BadRequest("missing parameter 'p'")
        assert stream and host
        if not self.registry.unpublish(stream, host, port):
            raise NotFound(f"{host}:{port} does not publish stream '{stream}'")
        return json_response({"status": "ok"})

    async def handle_subscribe(self, request: web.Request) -> web.Response:
        q = request.query
        stream = query_str(q, "s", required=True)
        assert stream
        norep = query_bool(q, "norep")
        below = query_int(q, "lvl", minimum=0, maximum=1000)
        exclude = parse_endpoints(query_str(q, "exclude"))
        candidates = self.registry.publishers(stream)
        if not candidates:
            raise NotFound(f"no publisher registered for stream '{stream}'")
        chosen = choose_publisher(candidates, norep=norep, below_level=below, exclude=exclude, rng=self._rng)
        if chosen is None:
            raise NotFound(f"no allowed publisher for stream '{stream}' ({len(candidates)} registered)")
        return json_response({"status": "ok", "stream": stream, **chosen.as_dict()})

    async def handle_streams(self, request: web.Request) -> web.Response:
        snapshot = self.registry.snapshot()
        return json_response({"streams": {name: [p.as_dict() for p in pubs] for name, pubs in snapshot.items()}})

    async def handle_debug(self, request: web.Request) -> web.Response:
        rows = []
        for name, pubs in self.registry.snapshot().items():
            for pub in sorted(pubs, key=lambda p: (p.lvl, p.host, p.port)):
                rows.append(
                    f"<tr><td>{html.escape(name)}</td><td>{html.escape(pub.host)}:{pub.port}</td>"
                    f"<td>{'repeater' if pub.rep else 'producer'}</td><td>{pub.lvl}</td></tr>"
                )
        body = (
            "<!doctype html><html><head><title>PAN repository</title></head><body>"
            "<h1>PAN repository</h1><table border=1><tr><th>stream</th><th>publisher</th>"
            "<th>role</th><th>level</th></tr>" + "".join(rows) + "</table></body></html>"
        )
        return web.Response(text=body, content_type="text/html")

    async def handle_health(self, request: web.Request) -> web.Response:
        return json_response({"status": "ok", "role": "repository"})
