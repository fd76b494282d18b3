"""The publish/subscribe repository: which publishers serve which stream.

Registrations are soft state.  Each one carries a lease that its publisher
refreshes by publishing again; a repository that restarts empty is whole
again after one refresh period, and the data plane never depends on it.

The repository is reachable by anyone who can reach a worker, so what it
accepts is checked and bounded: a publisher is an IP address or DNS name
and a port (nothing a URL built from them could smuggle a path into),
streams per publisher, registrations in all and leases have limits
(``RegistryLimits``), bodies are capped, and answers that list the registry
come in pages.  Leases expire lazily: a lookup drops its own stream's
expired publishers, and every request sweeps a bounded number of due
entries off a heap, so no request walks the whole registry.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import heapq
import itertools
import logging
import random
import ssl
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from pan.http import pages
from pan.http.web import (
    BadRequest,
    HttpLimits,
    HttpServer,
    NotFound,
    add_http_metrics,
    is_host,
    json_response,
    make_app,
    query_bool,
    query_int,
    query_str,
)
from pan.repository.client import MAX_PAGE_STREAMS, RepositoryClient, RepositoryUnavailable
from pan.security.auth import Credentials, Gate
from pan.util.metrics import CONTENT_TYPE as METRICS_TYPE
from pan.util.metrics import MetricsText

DEFAULT_PORT = 8080
DEFAULT_LEASE_MS = 15_000
MIN_LEASE_MS = 100
MAX_LEVEL = 1000
#: Longest stream name; names are printable text (no control characters).
MAX_STREAM_NAME_CHARS = 256
#: Endpoints in one `exclude` parameter.
MAX_EXCLUDED = 1000
#: Streams per `/streams` or `/debug` page unless ``limit`` says otherwise (a full game has ~450).
DEFAULT_PAGE_STREAMS = 1000
#: Due lease entries a request sweeps off the expiry heap (besides the streams it looks up itself).
SWEEP_STEPS = 256
#: Largest `POST /publish` body: 10,000 names of ~100 bytes.
MAX_BODY_BYTES = 1 << 20

Endpoint = tuple[str, int]


@dataclass(frozen=True, slots=True)
class RegistryLimits:
    """Bounds on what publishers may register; defaults leave a 14-peer full game (~450 streams,
    ~1,500 registrations with its repeaters) ample headroom."""

    #: Streams one publisher (host, port) may hold at once.
    max_streams_per_publisher: int = 10_000
    #: Registrations (stream, publisher) in all.
    max_registrations: int = 100_000
    #: Longest lease.  Workers ask for 3 x refresh_ms, and a workflow's refresh_ms may be up to 600 s.
    max_lease_ms: int = 1_800_000


class LimitExceeded(Exception):
    """A registration refused by ``RegistryLimits``; nothing of the request was registered."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason  # the label it is counted under
        self.message = message


@dataclass(slots=True)
class Publisher:
    host: str
    port: int
    rep: bool
    lvl: int
    expires_at: float

    @property
    def endpoint(self) -> Endpoint:
        return (self.host, self.port)

    def as_dict(self, now: float | None = None) -> dict[str, Any]:
        """The `/streams` entry; with ``now``, also the lease left (ms) at that time."""
        entry: dict[str, Any] = {"host": self.host, "port": self.port, "rep": self.rep, "lvl": self.lvl}
        if now is not None:
            entry["lease_ms"] = max(0, int((self.expires_at - now) * 1000))
        return entry


class Registry:
    """Stream name -> publishers, with leases measured on a monotonic clock.

    Indexes: by stream (lookups), by publisher (its stream count), a heap of
    lease deadlines (expiry in bounded steps) and a sorted name list for
    paging, rebuilt only after new names appear.
    """

    def __init__(self, limits: RegistryLimits | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits or RegistryLimits()
        self._clock = clock
        self._streams: dict[str, dict[Endpoint, Publisher]] = {}
        self._by_publisher: dict[Endpoint, set[str]] = {}
        # One entry per registration (plus stale ones of unpublished registrations, until due or rebuilt);
        # a refresh only moves ``expires_at``, and the sweep re-queues an entry that is due but refreshed.
        self._deadlines: list[tuple[float, int, str, Publisher]] = []
        self._seq = itertools.count()
        self._count = 0
        self._names: list[str] | None = None  # sorted; may hold removed names, skipped while paging
        self._removed_names = 0

    def now(self) -> float:
        """The registry's clock (leases expire on it)."""
        return self._clock()

    def __len__(self) -> int:
        """Registrations, counting expired ones not swept yet."""
        return self._count

    @property
    def stream_count(self) -> int:
        return len(self._streams)

    @property
    def publisher_count(self) -> int:
        return len(self._by_publisher)

    def publish(self, streams: Iterable[str], host: str, port: int, rep: bool, lvl: int, lease_ms: int) -> None:
        """Register or refresh ``host:port`` for every stream, or for none (``LimitExceeded``)."""
        names = list(dict.fromkeys(streams))
        endpoint = (host, port)
        self.sweep(max(SWEEP_STEPS, len(names)))
        new = self._new_for(endpoint, names)
        if self._count + new > self.limits.max_registrations:
            self.sweep(None)  # whatever has expired makes room first
            new = self._new_for(endpoint, names)
            if self._count + new > self.limits.max_registrations:
                raise LimitExceeded(
                    "registry_full",
                    f"the repository holds {self._count} registrations; {new} more would pass its limit of "
                    f"{self.limits.max_registrations}",
                )
        held = len(self._by_publisher.get(endpoint, ()))
        if held + new > self.limits.max_streams_per_publisher:
            raise LimitExceeded(
                "publisher_streams",
                f"{host}:{port} holds {held} streams; {new} more would pass the limit of "
                f"{self.limits.max_streams_per_publisher} per publisher",
            )
        expires = self._clock() + lease_ms / 1000
        mine = self._by_publisher.setdefault(endpoint, set())
        for name in names:
            publishers = self._streams.get(name)
            if publishers is None:
                publishers = self._streams[name] = {}
                self._names = None
            pub = publishers.get(endpoint)
            if pub is None:
                pub = publishers[endpoint] = Publisher(host, port, rep, lvl, expires)
                mine.add(name)
                self._count += 1
                heapq.heappush(self._deadlines, (expires, next(self._seq), name, pub))
            else:
                pub.rep, pub.lvl, pub.expires_at = rep, lvl, expires
        if len(self._deadlines) > 2 * self._count + 1024:  # stale entries of unpublished registrations
            self._rebuild_deadlines()

    def _new_for(self, endpoint: Endpoint, names: list[str]) -> int:
        mine = self._by_publisher.get(endpoint, set())
        return sum(1 for name in names if name not in mine)

    def adopt(self, stream: str, host: str, port: int, rep: bool, lvl: int, lease_ms: int) -> bool:
        """Take a registration a replica holds, unless this registry's own lease of it runs longer; True if taken."""
        held = self._streams.get(stream, {}).get((host, port))
        if held is not None and held.expires_at >= self._clock() + lease_ms / 1000:
            return False
        self.publish([stream], host, port, rep, lvl, lease_ms)
        return True

    def unpublish(self, stream: str, host: str, port: int) -> bool:
        """Drop a registration; False if there was none (or only an expired one)."""
        pub = self._streams.get(stream, {}).get((host, port))
        if pub is None:
            return False
        self._remove(stream, pub.endpoint)
        return pub.expires_at > self._clock()

    def publishers(self, stream: str) -> list[Publisher]:
        """The stream's live publishers; costs its own publishers plus one bounded sweep step."""
        self.sweep(SWEEP_STEPS)
        return self._live(stream, self._clock())

    def page(self, after: str | None, limit: int) -> tuple[list[tuple[str, list[Publisher]]], str | None]:
        """Up to ``limit`` streams named after ``after``, in name order, and the cursor of the next page."""
        self.sweep(SWEEP_STEPS)
        now = self._clock()
        names = self._sorted_names()
        start = 0 if after is None else bisect.bisect_right(names, after)
        rows: list[tuple[str, list[Publisher]]] = []
        for index in range(start, len(names)):
            if len(rows) == limit:
                return rows, rows[-1][0]
            publishers = self._live(names[index], now)
            if publishers:
                rows.append((names[index], publishers))
        return rows, None

    def snapshot(self) -> dict[str, list[Publisher]]:
        """Every stream with its live publishers (tests and small registries; servers page instead)."""
        rows, _ = self.page(None, len(self._streams) + 1)
        return dict(rows)

    def sweep(self, max_steps: int | None) -> int:
        """Take due entries off the deadline heap (at most ``max_steps``), expiring their registrations."""
        now = self._clock()
        steps = 0
        heap = self._deadlines
        while heap and heap[0][0] <= now and (max_steps is None or steps < max_steps):
            _, _, name, pub = heapq.heappop(heap)
            steps += 1
            if self._streams.get(name, {}).get(pub.endpoint) is not pub:
                continue  # unpublished (and maybe registered anew, with its own entry)
            if pub.expires_at <= now:
                self._remove(name, pub.endpoint)
            else:  # refreshed since it was queued
                heapq.heappush(heap, (pub.expires_at, next(self._seq), name, pub))
        return steps

    def _live(self, stream: str, now: float) -> list[Publisher]:
        publishers = self._streams.get(stream)
        if publishers is None:
            return []
        for pub in [pub for pub in publishers.values() if pub.expires_at <= now]:
            self._remove(stream, pub.endpoint)
        return list(publishers.values())

    def _remove(self, stream: str, endpoint: Endpoint) -> None:
        publishers = self._streams[stream]
        del publishers[endpoint]
        self._count -= 1
        if not publishers:
            del self._streams[stream]
            self._removed_names += 1
        mine = self._by_publisher[endpoint]
        mine.discard(stream)
        if not mine:
            del self._by_publisher[endpoint]

    def _sorted_names(self) -> list[str]:
        if self._names is None or self._removed_names > len(self._streams):
            self._names = sorted(self._streams)
            self._removed_names = 0
        return self._names

    def _rebuild_deadlines(self) -> None:
        self._deadlines = [
            (pub.expires_at, next(self._seq), name, pub)
            for name, publishers in self._streams.items()
            for pub in publishers.values()
        ]
        heapq.heapify(self._deadlines)


def choose_publisher(
    candidates: list[Publisher],
    *,
    norep: bool,
    below_level: int | None,
    exclude: set[Endpoint],
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


# --- validation -------------------------------------------------------------------------------


def check_host(value: Any, name: str = "h") -> str:
    if not isinstance(value, str) or not is_host(value):
        raise BadRequest(
            f"parameter '{name}' must be an IP address or a DNS name (no port, path or spaces), got {value!r:.80}"
        )
    return value


def check_stream(value: Any, name: str = "s") -> str:
    if (
        not isinstance(value, str)
        or not value
        or len(value) > MAX_STREAM_NAME_CHARS
        or not value.isprintable()
    ):
        raise BadRequest(
            f"parameter '{name}' must be a stream name of 1 to {MAX_STREAM_NAME_CHARS} printable characters, "
            f"got {value!r:.80}"
        )
    return value


def parse_endpoints(raw: str | None) -> set[Endpoint]:
    """``host:port,[v6]:port`` -> set; used by the optional `exclude` parameter."""
    if not raw:
        return set()
    parts = raw.split(",")
    if len(parts) > MAX_EXCLUDED:
        raise BadRequest(f"parameter 'exclude' lists more than {MAX_EXCLUDED} endpoints")
    endpoints: set[Endpoint] = set()
    for part in parts:
        if part.startswith("["):
            host, sep, port = part[1:].partition("]:")
        else:
            host, sep, port = part.rpartition(":")
        if not sep or not is_host(host) or not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise BadRequest(f"parameter 'exclude' must be host:port[,host:port...], got {part!r:.80}")
        endpoints.add((host, int(port)))
    return endpoints


@dataclass(frozen=True, slots=True)
class Registration:
    host: str
    port: int
    rep: bool
    lvl: int
    lease_ms: int


#: `POST /publish` body fields besides ``s``, and the JSON types each must have.
_POST_FIELDS = {"h": "a string", "p": "an integer", "rep": "true or false", "lvl": "an integer", "ttl": "an integer"}


def _post_params(body: dict[str, Any]) -> dict[str, str]:
    """The body's fields as GET-style text, once each has the right JSON type (``"yes"`` is no boolean)."""
    params: dict[str, str] = {}
    for key, value in body.items():
        if key == "s" or value is None:
            continue
        if key not in _POST_FIELDS:
            raise BadRequest(f"unknown field {key!r:.40} (expected s, {', '.join(_POST_FIELDS)})")
        if key == "h":
            ok = isinstance(value, str)
        elif key == "rep":
            ok = isinstance(value, bool)
        else:
            ok = isinstance(value, int) and not isinstance(value, bool)
        if not ok:
            raise BadRequest(f"field '{key}' must be {_POST_FIELDS[key]}, got {value!r:.80}")
        params[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return params


# --- the server -------------------------------------------------------------------------------


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
        registration = self._registration(_post_params(body))
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

