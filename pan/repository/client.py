"""The client side of the repository: publishing with leases, lookups, and waiting for publishers.

Every process that talks to a repository does it through ``RepositoryClient``: a worker
publishes its outputs and keeps the lease (``Lease``), a subscriber looks up a publisher
(``lookup``), and launchers, the replay harness, benchmarks and tests wait until a workflow's
publishers have registered (``wait_for_publishers``). Every request has a timeout.

Nothing the repository answers is trusted: a publisher's address must be an IP address or a
DNS name with a port in 1..65535 before any URL is built from it (from parts, with yarl, never
by pasting strings).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import yarl

from pan.http.addresses import is_host
from pan.security.auth import Credentials, bearer
from pan.security.tls import scheme

DEFAULT_TIMEOUT_S = 2.0
WAIT_INTERVAL_S = 0.2  # how often ``wait_for_publishers`` asks again

#: Most streams one `/streams` page may hold (the repository refuses a larger ``limit``).
MAX_PAGE_STREAMS = 10_000
Publisher = dict[str, Any]  # one entry of a `/streams` answer: host, port, rep, lvl, ...


class BadAnswer(ValueError):
    """A repository or publisher answer this client refuses to act on (undecodable or malformed)."""


class RepositoryUnavailable(Exception):
    """The repository could not be asked, or gave no usable answer (unreachable, timeout, undecodable)."""


class Refused(RepositoryUnavailable):
    """The repository answered 401 or 403: this client lacks the workflow's read token (or has a wrong one)."""


class NotTrusted(Exception):
    """The server's TLS certificate failed verification: asking again, or another server of the workflow, will not
    help."""


class NoPublisher(Exception):
    """The repository answered, but named no publisher (``status``: its HTTP status, 404 when none fits)."""

    def __init__(self, status: int, body: object) -> None:
        super().__init__(f"repository answered {status}: {body!r:.200}")
        self.status = status


class PublishersMissing(RuntimeError):
    """``wait_for_publishers`` gave up: not every stream had its publishers in time.

    Not a ``TimeoutError``: a caller's own ``asyncio.timeout`` must not take it for its own deadline.
    """


def is_valid_host(host: object) -> bool:
    """An IP address (v4 or v6, no zone) or a DNS name: the repository's rule (``pan.http.addresses.is_host``)."""
    return isinstance(host, str) and is_host(host)


def is_valid_port(port: object) -> bool:
    return isinstance(port, int) and not isinstance(port, bool) and 1 <= port <= 65535


@functools.lru_cache(maxsize=4096)
def http_url(host: str, port: int, path: str, scheme: str = "http") -> yarl.URL:
    """``http://host:port/path`` (or https) built from validated parts (IPv6 hosts get their brackets). Kept once
    built (a URL is immutable): a reader of hundreds of streams asks for the same few thousands of times."""
    if not is_valid_host(host) or not is_valid_port(port):
        raise ValueError(f"not a valid HOST:PORT: {host!r}:{port!r}")
    return yarl.URL.build(scheme=scheme, host=host, port=port, path=path)


def parse_address(address: str | tuple[str, int]) -> tuple[str, int]:
    """``HOST:PORT`` (``[V6]:PORT`` for IPv6, empty host: 127.0.0.1) or a tuple, validated."""
    if isinstance(address, tuple):
        host, port = address
    else:
        raw_host, sep, raw_port = address.rpartition(":")
        if not sep or not raw_port.isascii() or not raw_port.isdigit():
            raise ValueError(f"expected HOST:PORT, got {address!r}")
        if raw_host.startswith("[") and raw_host.endswith("]"):
            raw_host = raw_host[1:-1]
        host, port = raw_host or "127.0.0.1", int(raw_port)
    if not is_valid_host(host):
        raise ValueError(f"host {host!r} is neither an IP address nor a DNS name")
    if not is_valid_port(port):
        raise ValueError(f"port {port!r} is not an integer in 1..65535")
    return host, port


Address = str | tuple[str, int]


def parse_addresses(repositories: Address | Sequence[Address]) -> list[tuple[str, int]]:
    """One repository address or several: ``"H:P,H2:P2"``, a ``(host, port)`` tuple or a list of either."""
    if isinstance(repositories, str):
        parts: list[Address] = [part.strip() for part in repositories.split(",")]
    elif isinstance(repositories, tuple) and len(repositories) == 2 and isinstance(repositories[1], int):
        parts = [repositories]
    else:
        parts = list(repositories)
    if not parts:
        raise ValueError("no repository address given")
    return [parse_address(part) for part in parts]


@dataclass(slots=True)
class Source:
    """A publisher the repository named for a stream."""

    host: str
    port: int
    rep: bool
    lvl: int

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def from_answer(cls, body: object) -> Source:
        """A `/subscribe` answer, checked field by field: it decides where this client sends requests."""
        if not isinstance(body, dict):
            raise BadAnswer(f"expected a JSON object, got {type(body).__name__}")
        host, port, rep, lvl = body.get("host"), body.get("port"), body.get("rep", False), body.get("lvl", 0)
        if not is_valid_host(host):
            raise BadAnswer(f"host {host!r} is neither an IP address nor a DNS name")
        if not is_valid_port(port):
            raise BadAnswer(f"port {port!r} is not an integer in 1..65535")
        if not isinstance(rep, bool):
            raise BadAnswer(f"rep {rep!r} is not a boolean")
        if isinstance(lvl, bool) or not isinstance(lvl, int) or lvl < 0:
            raise BadAnswer(f"lvl {lvl!r} is not an integer >= 0")
        assert isinstance(host, str) and isinstance(port, int)
        return cls(host, port, rep, lvl)

    def url(self, path: str, scheme: str = "http") -> yarl.URL:
        return http_url(self.host, self.port, path, scheme)


@dataclass(frozen=True, slots=True)
class Registration:
    """What a publisher registers: its streams at ``host:port``, as producer or repeater of level ``lvl``."""

    streams: tuple[str, ...]
    host: str
    port: int
    rep: bool = False
    lvl: int = 0
    ttl_ms: int = 6000  # the lease: forgotten unless published again within this time

    def as_json(self) -> dict[str, Any]:
        """The ``POST /publish`` body."""
        streams = list(self.streams)
        return {"s": streams, "h": self.host, "p": self.port, "rep": self.rep, "lvl": self.lvl, "ttl": self.ttl_ms}


class RepositoryClient:
    """Requests to one repository, each with a timeout; owns its HTTP session unless given one."""

    def __init__(
        self,
        address: str | tuple[str, int],
        *,
        session: aiohttp.ClientSession | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        credentials: Credentials | None = None,
        token: str | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """``credentials`` sign ``publish`` and ``unpublish`` (and give the read token); ``token`` alone lets a
        reader look up publishers of a repository that needs one (pan.security.auth); ``tls``: HTTPS, trusting this
        context's CA (pan.security.tls)."""
        self.host, self.port = parse_address(address)
        self.timeout_s = timeout_s
        self.tls = tls
        self._scheme = scheme(tls)
        self.credentials = credentials
        self._read_headers = bearer(credentials.read_token if credentials is not None else token)
        self._session = session
        self._owns_session = session is None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
        self._session = None

    async def __aenter__(self) -> RepositoryClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- requests -------------------------------------------------------------------

    async def publish(self, registration: Registration) -> bool:
        """Register (or refresh) every stream of ``registration`` in one ``POST /publish``; False on failure."""
        body = orjson.dumps(registration.as_json())
        return await self._ok("POST", "/publish", data=body, headers=self._signed("POST", "/publish", body=body))

    async def unpublish(self, registration: Registration) -> bool:
        """Remove the registration, one ``/unpublish`` per stream; False if any failed."""
        base = {"h": registration.host, "p": str(registration.port)}
        requests = [{"s": name, **base} for name in registration.streams]
        done = await asyncio.gather(*(
            self._ok("GET", "/unpublish", params=params, headers=self._signed("GET", "/unpublish", params))
            for params in requests
        ))
        return all(done)

    def _signed(self, method: str, path: str, params: dict[str, str] | None = None,
                body: bytes = b"") -> dict[str, str]:
        """The signature headers of a control request (none without credentials)."""
        if self.credentials is None:
            return {}
        return self.credentials.signed_headers(method, path, params, body)

    async def lookup(
        self, stream: str, *, norep: bool = False, below_level: int | None = None, exclude: Iterable[str] = ()
    ) -> Source:
        """The publisher ``/subscribe`` names for ``stream``.

        Raises ``RepositoryUnavailable``, ``NoPublisher`` (the repository named none) or
        ``BadAnswer`` (it named an unusable address).
        """
        params: dict[str, str] = {"s": stream}
        if norep:
            params["norep"] = "true"
        if below_level is not None:
            params["lvl"] = str(below_level)
        excluded = sorted(exclude)
        if excluded:
            params["exclude"] = ",".join(excluded)
        status, body = await self._get_json("/subscribe", params)
        if status != 200:
            raise NoPublisher(status, body)
        return Source.from_answer(body)

    async def streams(self, *, page: int = MAX_PAGE_STREAMS, leases: bool = False) -> dict[str, list[Publisher]]:
        """Every registered stream and its publishers, following `/streams` pages (``leases``: with the ms
        left of each lease)."""
        streams: dict[str, list[Publisher]] = {}
        after: str | None = None
        while True:
            params = {"limit": str(page)} if after is None else {"limit": str(page), "after": after}
            if leases:
                params["leases"] = "true"
            status, body = await self._get_json("/streams", params)
            if status in (401, 403) and isinstance(body, dict):
                raise Refused(f"repository {self.address} refused /streams ({status}): "
                                            f"{str(body.get('error'))[:200]}")
            if status != 200 or not isinstance(body, dict) or not isinstance(body.get("streams"), dict):
                raise RepositoryUnavailable(f"repository {self.address} answered /streams with {status}")
            streams.update(body["streams"])
            after = body.get("next")
            if after is None:
                return streams

    async def wait_for_publishers(
        self, streams: Iterable[str], timeout_s: float, *, publishers: int = 1, producers: int = 0, repeaters: int = 0
    ) -> None:
        """Return once every stream has at least ``publishers`` publishers, of which at least ``producers``
        original producers and ``repeaters`` repeaters; ``PublishersMissing`` after ``timeout_s``."""
        wanted = list(streams)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                known = await self.streams()
                if all(_enough(known.get(s, []), publishers, producers, repeaters) for s in wanted):
                    return
            except RepositoryUnavailable:
                pass
            if time.monotonic() + WAIT_INTERVAL_S > deadline:
                raise PublishersMissing(f"publishers of {', '.join(wanted)} did not register within {timeout_s:.0f} s")
            await asyncio.sleep(WAIT_INTERVAL_S)

    # --- transport ------------------------------------------------------------------

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
            self._owns_session = True
        return self._session

    def _ssl(self) -> dict[str, Any]:
        return {} if self.tls is None else {"ssl": self.tls}

    async def _ok(self, method: str, path: str, **request: Any) -> bool:
        """The request answered 200 (the body is read and dropped)."""
        try:
            async with self._client().request(
                method, http_url(self.host, self.port, path, self._scheme),
                timeout=aiohttp.ClientTimeout(total=self.timeout_s), **self._ssl(), **request,
            ) as response:
                await response.read()
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False

    async def _get_json(self, path: str, params: dict[str, str]) -> tuple[int, object]:
        """Status and decoded body of a GET; ``RepositoryUnavailable`` if there is none."""
        try:
            async with self._client().get(
                http_url(self.host, self.port, path, self._scheme), params=params, headers=self._read_headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s), **self._ssl(),
            ) as response:
                return response.status, orjson.loads(await response.read())
        except aiohttp.ClientConnectorCertificateError as exc:
            raise NotTrusted(f"repository {self.address}: {exc.certificate_error}") from None
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            raise RepositoryUnavailable(f"repository {self.address}: {type(exc).__name__}: {exc}") from exc


def _enough(listed: list[Publisher], publishers: int, producers: int, repeaters: int) -> bool:
    reps = sum(1 for p in listed if p.get("rep"))
    return len(listed) >= publishers and len(listed) - reps >= producers and reps >= repeaters


class Lease:
    """A worker's registration, published at start and refreshed every ``refresh_s`` until released.

    Published to every repository of the workflow (``client`` may be several): each one keeps soft
    state, so a repository that restarted empty is whole again after one refresh, and an unreachable
    one is only logged (once per change) and tried again, while the others serve.
    """

    def __init__(
        self, client: RepositoryClient | Sequence[RepositoryClient], registration: Registration, refresh_s: float,
        log: logging.Logger,
    ) -> None:
        self.clients = [client] if isinstance(client, RepositoryClient) else list(client)
        self.registration = registration
        self.refresh_s = refresh_s
        self.log = log
        self._reachable = dict.fromkeys(range(len(self.clients)), True)
        self._released = False

    @property
    def reachable(self) -> bool:
        """At least one repository took the latest refresh."""
        return any(self._reachable.values())

    async def publish(self) -> None:
        """Publish (or refresh) once, to every repository at the same time."""
        if not self.registration.streams or self._released:
            return
        answers = await asyncio.gather(*(client.publish(self.registration) for client in self.clients))
        for n, (client, reachable) in enumerate(zip(self.clients, answers, strict=True)):
            if reachable != self._reachable[n]:
                log = self.log.info if reachable else self.log.warning
                log("repository %s %s", client.address, "reachable again" if reachable else "unreachable")
            self._reachable[n] = reachable

    async def keep(self) -> None:
        """Refresh forever (the owner cancels it)."""
        while True:
            await asyncio.sleep(self.refresh_s)
            await self.publish()

    async def release(self) -> None:
        """Unpublish everywhere, so subscribers move on at once rather than when the lease runs out.

        A released lease publishes no more, so a refresh that is still due cannot undo the release."""
        self._released = True
        await asyncio.gather(*(client.unpublish(self.registration) for client in self.clients))
