"""The publish/subscribe repository's HTTP server: which publishers serve which stream.

``RepositoryServer`` puts the ``Registry`` (pan/repository/registry.py) behind
aiohttp routes, with the parameter checks of pan/repository/validation.py.
What it accepts is bounded: bodies are capped, registrations are limited by
``RegistryLimits``, and answers that list the registry come in pages.  With
replicas, a new or restarted repository adopts what another one holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
import time
import urllib.parse
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from aiohttp import web

from pan.http import pages
from pan.http.limits import HttpLimits
from pan.http.params import query_bool, query_int, query_str
from pan.http.responses import BadRequest, NotFound, json_response
from pan.http.server import HttpServer, add_http_metrics
from pan.http.web import make_app
from pan.repository.client import MAX_PAGE_STREAMS, RepositoryClient, RepositoryUnavailable
from pan.repository.registry import LimitExceeded, Publisher, Registry, RegistryLimits, choose_publisher
from pan.repository.validation import (
    DEFAULT_LEASE_MS,
    MAX_LEVEL,
    MIN_LEASE_MS,
    Registration,
    check_host,
    check_stream,
    parse_endpoints,
    post_params,
)
from pan.security.auth import Credentials, Gate
from pan.util.metrics import CONTENT_TYPE as METRICS_TYPE
from pan.util.metrics import MetricsText

DEFAULT_PORT = 8080
#: Streams per `/streams` or `/debug` page unless ``limit`` says otherwise (a full game has ~450).
DEFAULT_PAGE_STREAMS = 1000
#: Largest `POST /publish` body: 10,000 names of ~100 bytes.
MAX_BODY_BYTES = 1 << 20

log = logging.getLogger(__name__)

DEFAULT_FILL_WITHIN_S = 10.0
FILL_TIMEOUT_S = 5.0
FILL_RETRY_S = 0.5

#: The routes that change the registry: with a secret, only signed requests reach them.
SIGNED_PATHS = frozenset({"/publish", "/unpublish"})


class RepositoryServer:
    """aiohttp front end for the Registry (DESIGN §4, "Repository")."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        *,
        seed: int | None = None,
        limits: RegistryLimits | None = None,
        http: HttpLimits | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        credentials: Credentials | None = None,
        replicas: Sequence[tuple[str, int]] = (),
        fill_within_s: float = DEFAULT_FILL_WITHIN_S,
        allowed_hosts: frozenset[str] | None = None,
        tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None,
    ) -> None:
        """``credentials``: the workflow's secret; with it, ``/publish`` and ``/unpublish`` must be signed and
        every other route but ``/health`` needs the read token (pan.security.auth). ``replicas``: the workflow's other
        repositories, whose registrations this one adopts when it starts (trying for ``fill_within_s``), so that
        a new or restarted replica is whole at once rather than after the publishers' next refresh.
        ``allowed_hosts``: the only hosts publishers may register (403 for others). ``tls``: HTTPS, with the
        (server, client) contexts (pan.security.tls)."""
        self.registry = Registry(limits)
        self.refused: Counter[str] = Counter()  # registrations refused by RegistryLimits, by reason
        self._rng = random.Random(seed)
        self.gate = None if credentials is None else Gate(credentials, signed_paths=SIGNED_PATHS)
        self.credentials = credentials
        self.allowed_hosts = allowed_hosts
        self.replicas = list(replicas)
        self.fill_within_s = fill_within_s
        self.adopted = 0  # registrations taken from replicas at start
        self._fill: asyncio.Task[None] | None = None
        app = make_app(max_body_bytes=max_body_bytes, gate=self.gate)
        app.add_routes(
            [
                web.get("/publish", self.handle_publish),
                web.post("/publish", self.handle_publish_many),
                web.get("/unpublish", self.handle_unpublish),
                web.get("/subscribe", self.handle_subscribe),
                web.get("/streams", self.handle_streams),
                web.get("/debug", self.handle_debug),
                web.get("/", self.handle_debug),
                web.get("/health", self.handle_health),
                web.get("/metrics", self.handle_metrics),
            ]
        )
        self.server = HttpServer(app, host, port, limits=http, ssl_context=None if tls is None else tls[0])
        self.client_tls = None if tls is None else tls[1]

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        await self.server.start()
        if self.replicas:
            self._fill = asyncio.create_task(self._fill_from_replicas(), name="repository: fill from replicas")

    async def stop(self) -> None:
        if self._fill is not None:
            self._fill.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._fill
            self._fill = None
        await self.server.stop()

    async def _fill_from_replicas(self) -> None:
        """Adopt what the first replica that answers holds; none answering within ``fill_within_s`` is fine
        (this is the first repository up, or the others are down): publishers' refreshes fill it anyway."""
        deadline = time.monotonic() + self.fill_within_s
        while time.monotonic() < deadline:
            for address in self.replicas:
                async with RepositoryClient(address, credentials=self.credentials, timeout_s=FILL_TIMEOUT_S,
                                            tls=self.client_tls) as peer:
                    try:
                        streams = await peer.streams(leases=True)
                    except RepositoryUnavailable as exc:
                        log.debug("replica %s:%d: %s", *address, exc)
                        continue
                for stream, publishers in streams.items():
                    for pub in publishers:
                        self.adopted += self._adopt(stream, pub)
                log.info("adopted %d registrations from replica %s:%d", self.adopted, *address)
                return
            await asyncio.sleep(FILL_RETRY_S)

    def _adopt(self, stream: str, pub: Mapping[str, Any]) -> bool:
        try:
            host = check_host(pub.get("host"))
            if self.allowed_hosts is not None and host not in self.allowed_hosts:
                return False
            return self.registry.adopt(stream, host, int(pub["port"]), bool(pub["rep"]),
                                       int(pub["lvl"]), min(int(pub["lease_ms"]), self.registry.limits.max_lease_ms))
        except (BadRequest, KeyError, TypeError, ValueError, LimitExceeded) as exc:
            log.debug("not adopted: %s %r: %s", stream, pub, exc)
            return False

    async def handle_publish(self, request: web.Request) -> web.Response:
        stream = check_stream(query_str(request.query, "s", required=True))
        registration = self._registration(request.query)
        self._register([stream], registration)
        return json_response({"status": "ok", "lease_ms": registration.lease_ms})

    async def handle_publish_many(self, request: web.Request) -> web.Response:
        """``POST /publish``: one lease refresh for many streams of one publisher.

        A worker with hundreds of outputs would otherwise send hundreds of
        requests every refresh period.  The body is a JSON object with the GET
        parameters as JSON values of their own types (``p`` a number, ``rep``
        true or false), except that ``s`` is a list of stream names.
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
        for stream in streams:
            check_stream(stream)
        registration = self._registration(post_params(body))
        self._register(streams, registration)
        return json_response({"status": "ok", "lease_ms": registration.lease_ms, "streams": len(streams)})

    def _registration(self, q: Mapping[str, str]) -> Registration:
        """Validate the publisher's parameters."""
        host = check_host(query_str(q, "h", required=True))
        if self.allowed_hosts is not None and host not in self.allowed_hosts:
            self.refused["host_not_allowed"] += 1
            raise BadRequest(f"publisher host {host!r} is not among the workflow's allowed hosts", 403)
        port = query_int(q, "p", minimum=1, maximum=65535)
        if port is None:
            raise BadRequest("missing parameter 'p'")
        rep = query_bool(q, "rep")
        lvl = query_int(q, "lvl", default=1 if rep else 0, minimum=0, maximum=MAX_LEVEL)
        if not rep and lvl != 0:
            raise BadRequest("an original producer (rep=false) has level 0")
        if rep and lvl == 0:
            raise BadRequest("a repeater (rep=true) needs a level >= 1")
        max_lease = self.registry.limits.max_lease_ms
        default_lease = min(DEFAULT_LEASE_MS, max_lease)
        lease_ms = query_int(q, "ttl", default=default_lease, minimum=MIN_LEASE_MS, maximum=max_lease)
        assert lvl is not None and lease_ms is not None
        return Registration(host, port, rep, lvl, lease_ms)

    def _register(self, streams: list[str], r: Registration) -> None:
        try:
            self.registry.publish(streams, r.host, r.port, r.rep, r.lvl, r.lease_ms)
        except LimitExceeded as exc:
            self.refused[exc.reason] += 1
            raise BadRequest(exc.message, 429) from None

    async def handle_unpublish(self, request: web.Request) -> web.Response:
        q = request.query
        stream = check_stream(query_str(q, "s", required=True))
        host = check_host(query_str(q, "h", required=True))
        port = query_int(q, "p", minimum=1, maximum=65535)
        if port is None:
            raise BadRequest("missing parameter 'p'")
        if not self.registry.unpublish(stream, host, port):
            raise NotFound(f"{host}:{port} does not publish stream '{stream}'")
        return json_response({"status": "ok"})

    async def handle_subscribe(self, request: web.Request) -> web.Response:
        q = request.query
        stream = check_stream(query_str(q, "s", required=True))
        norep = query_bool(q, "norep")
        below = query_int(q, "lvl", minimum=0, maximum=MAX_LEVEL)
        exclude = parse_endpoints(query_str(q, "exclude"))
        candidates = self.registry.publishers(stream)
        if not candidates:
            raise NotFound(f"no publisher registered for stream '{stream}'")
        chosen = choose_publisher(candidates, norep=norep, below_level=below, exclude=exclude, rng=self._rng)
        if chosen is None:
            raise NotFound(f"no allowed publisher for stream '{stream}' ({len(candidates)} registered)")
        return json_response({"status": "ok", "stream": stream, **chosen.as_dict()})

    def _page(self, q: Mapping[str, str]) -> tuple[list[tuple[str, list[Publisher]]], str | None]:
        after = query_str(q, "after")
        limit = query_int(q, "limit", default=DEFAULT_PAGE_STREAMS, minimum=1, maximum=MAX_PAGE_STREAMS)
        assert limit is not None
        return self.registry.page(after, limit)

    async def handle_streams(self, request: web.Request) -> web.Response:
        """One page of the registry; ``next`` is the ``after`` of the following page, null on the last."""
        rows, cursor = self._page(request.query)
        now = self.registry.now() if query_bool(request.query, "leases") else None
        return json_response({"streams": {name: [p.as_dict(now) for p in pubs] for name, pubs in rows},
                              "next": cursor})

    async def handle_debug(self, request: web.Request) -> web.Response:
        page, cursor = self._page(request.query)
        link_scheme = "http" if self.client_tls is None else "https"
        rows = []
        for name, pubs in page:
            for pub in sorted(pubs, key=lambda p: (p.lvl, p.host, p.port)):
                rows.append({"stream": name, "role": "repeater" if pub.rep else "producer", "lvl": pub.lvl,
                             **pages.endpoint_link(pub.host, pub.port, link_scheme)})
        counts = Counter(row["endpoint"] for row in rows)
        links = {row["endpoint"]: row["url"] for row in rows}
        publishers = [{"endpoint": endpoint, "url": links[endpoint], "streams": count}
                      for endpoint, count in sorted(counts.items())]
        next_page = None
        if cursor is not None:
            next_page = "?" + urllib.parse.urlencode(
                {"after": cursor, "limit": request.query.get("limit", DEFAULT_PAGE_STREAMS)})
        return pages.render("repository.html", stream_count=self.registry.stream_count,
                            registrations=len(self.registry), publishers=publishers, rows=rows, next_page=next_page)

    async def handle_health(self, request: web.Request) -> web.Response:
        return json_response({"status": "ok", "role": "repository"})

    async def handle_metrics(self, request: web.Request) -> web.Response:
        metrics = MetricsText(role="repository")
        metrics.add("pan_repository_streams", self.registry.stream_count, help="streams with a registration")
        metrics.add("pan_repository_registrations", len(self.registry), help="registrations (stream, publisher)")
        metrics.add("pan_repository_publishers", self.registry.publisher_count, help="distinct publishers")
        metrics.add("pan_repository_adopted_total", self.adopted, "counter",
                    help="registrations adopted from replicas at start")
        for reason in ("publisher_streams", "registry_full", "host_not_allowed"):
            metrics.add("pan_repository_refused_total", self.refused[reason], "counter",
                        help="registrations refused, by reason", reason=reason)
        add_http_metrics(metrics, self.server)
        return web.Response(body=metrics.render(), headers={"Content-Type": METRICS_TYPE})

