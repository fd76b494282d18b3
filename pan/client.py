"""Pull a stream by name, the way every PAN subscriber does.

The model is Kafka's consumer:

* a **position**: the index of the last tuple delivered (``-1`` before any);
  each fetch asks the publisher for tuples with an index above it;
* a **start** and a **reset policy** (``earliest`` / ``latest``), applied on
  the first fetch and whenever the producer restarted (its ``epoch`` changed)
  or the position lies beyond what the producer will reach again;
* a **long-poll fetch** with a page size (``n``) and a maximum wait (``w``).

Indices are the original producer's, kept by every repeater, so on a failed
publisher the subscriber asks the repository for another one and resumes at
its position: no duplicates, and every skipped index is counted as missed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import orjson

from pan.local import DataFunction, LocalPublishers
from pan.web import BadRequest, NotFound

log = logging.getLogger(__name__)

Reset = Literal["earliest", "latest"]
LAGGING_FETCHES_BEFORE_SWITCH = 3  # empty long polls from a repeater behind our position
Tuple = dict[str, Any]


class SubscriberError(Exception):
    """A failure the subscriber cannot recover from by switching publishers."""


@dataclass(slots=True)
class SubscriberStats:
    received: int = 0  # tuples delivered
    missed: int = 0  # indices skipped because they were overwritten or lost upstream
    gaps: int = 0  # how many times a jump in indices happened
    resets: int = 0  # reset policy applied (producer restart, position out of range)
    failovers: int = 0  # publisher switches after a failure
    errors: int = 0  # failed requests of any kind


@dataclass(slots=True)
class Fetch:
    """What one fetch brought: new tuples plus what happened on the way."""

    tuples: list[Tuple]
    missed: int = 0
    reset: bool = False
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Source:
    host: str
    port: int
    rep: bool
    lvl: int

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"


def parse_address(address: str | tuple[str, int]) -> tuple[str, int]:
    if isinstance(address, tuple):
        return address
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    return host or "127.0.0.1", int(port)


class StreamSubscriber:
    """Async iterator over one stream, with failover between its publishers."""

    def __init__(
        self,
        stream: str,
        repository: str | tuple[str, int],
        *,
        start: Reset | int = "earliest",
        reset: Reset = "earliest",
        page_size: int = 1000,
        max_wait_ms: int = 1000,
        request_timeout_s: float = 5.0,
        norep: bool = False,
        below_level: int | None = None,
        exclude: tuple[str, ...] = (),
        retry_backoff_s: tuple[float, float] = (0.05, 1.0),
        session: aiohttp.ClientSession | None = None,
        local: LocalPublishers | None = None,
        wake_on_meta: bool = False,
    ) -> None:
        self.stream = stream
        self.repository = parse_address(repository)
        self.reset_policy: Reset = reset
        self.page_size = page_size
        self.max_wait_ms = max_wait_ms
        self.request_timeout_s = request_timeout_s
        self.norep = norep
        self.below_level = below_level
        self.always_exclude = set(exclude)
        self.retry_backoff_s = retry_backoff_s
        self.stats = SubscriberStats()
        self.source: Source | None = None
        self.epoch: str | None = None
        self.meta: dict[str, Any] = {}
        self._start = start
        self.position = start if isinstance(start, int) else -1
        self._positioned = isinstance(start, int) or start == "earliest"
        self._failed: set[str] = set()
        self._session = session
        self._local = local
        self.wake_on_meta = wake_on_meta  # long polls also end on producer meta changes (K, wm)
        self._owns_session = session is None
        self._backoff = retry_backoff_s[0]
        self._lagging = 0
        self.upstream_last = -1  # the publisher's newest index at the last answer

    @property
    def source_is_local(self) -> bool:
        """The current publisher answers in this process, without HTTP."""
        return (
            self.source is not None
            and self._local is not None
            and self._local.lookup(self.source.host, self.source.port) is not None
        )

    # --- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
        self._session = None

    async def __aenter__(self) -> StreamSubscriber:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- iteration ----------------------------------------------------------------

    async def batches(self) -> AsyncIterator[list[Tuple]]:
        """Non-empty batches of new tuples, in index order, forever."""
        while True:
            fetch = await self.fetch()
            if fetch.tuples:
                yield fetch.tuples

    async def __aiter__(self) -> AsyncIterator[Tuple]:
        async for batch in self.batches():
            for item in batch:
                yield item

    # --- one fetch ----------------------------------------------------------------

    async def fetch(self) -> Fetch:
        """One long-poll round trip; retries publishers and the repository until it works."""
        while True:
            if self.source is None:
                self.source = await self._lookup()
                if self.source is None:
                    await self._sleep_backoff()
                    continue
            try:
                answer = await self._get_data(self.source)
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                self._drop_source(f"{type(exc).__name__}: {exc}")
                continue
            self._backoff = self.retry_backoff_s[0]
            return self._apply(answer)

    async def _get_data(self, source: Source) -> dict[str, Any]:
        assert self._session is not None, "call start() first"
        if not self._positioned:
            params = {"s": self.stream, "l": "1"}
        else:
            params = {"s": self.stream, "i": str(self.position), "n": str(self.page_size)}
            if self.max_wait_ms:
                params["w"] = str(self.max_wait_ms)
            if self.wake_on_meta:
                params["m"] = "1"
        serve = self._local.lookup(source.host, source.port) if self._local is not None else None
        if serve is not None:
            return orjson.loads(await self._get_local(serve, source))
        timeout = aiohttp.ClientTimeout(total=self.max_wait_ms / 1000 + self.request_timeout_s)
        url = f"http://{source.host}:{source.port}/data"
        async with self._session.get(url, params=params, timeout=timeout) as response:
            body = await response.read()
        if response.status == 400:
            raise SubscriberError(f"{source.endpoint} rejected the fetch: {body[:200]!r}")
        if response.status != 200:
            raise ValueError(f"{source.endpoint} answered HTTP {response.status}")
        return orjson.loads(body)

    async def _get_local(self, serve: DataFunction, source: Source) -> bytes:
        """The same fetch as over HTTP, answered by a publisher in this process."""
        after = self.position if self._positioned else -1
        oldest, latest = (self.page_size, None) if self._positioned else (None, 1)
        wait_ms = self.max_wait_ms if self._positioned else 0
        try:
            return await serve(self.stream, after, oldest, latest, wait_ms, self.wake_on_meta)
        except NotFound as exc:
            raise ValueError(f"{source.endpoint}: {exc.message}") from None
        except BadRequest as exc:
            raise SubscriberError(f"{source.endpoint} rejected the fetch: {exc.message}") from None

    def _apply(self, answer: dict[str, Any]) -> Fetch:
        meta = answer.get("meta") or {}
        self.meta = meta
        epoch = meta.get("epoch")
        last = int(answer.get("last", -1))
        self.upstream_last = last
        if not self._positioned:  # start=latest: begin after the newest tuple
            self.position, self.epoch, self._positioned = last, epoch, True
            return Fetch([], meta=meta)
        if self.epoch is not None and epoch is not None and epoch != self.epoch:
            self.epoch = epoch
            return self._reset(f"producer restarted (epoch {epoch})", last)
        self.epoch = epoch
        if self.position > last and not answer.get("tuples"):
            if self.source is not None and not self.source.rep:
                # The original producer will never reach our position again.
                return self._reset(f"position {self.position} beyond last index {last}", last)
            self._lagging += 1
            if self._lagging >= LAGGING_FETCHES_BEFORE_SWITCH:
                self._drop_source(f"repeater lags behind position {self.position} (last {last})")
            return Fetch([], meta=meta)
        self._lagging = 0
        tuples: list[Tuple] = answer.get("tuples") or []
        missed = 0
        if tuples and tuples[0]["i"] == self.position + 1 and tuples[-1]["i"] == self.position + len(tuples):
            self.position += len(tuples)  # the usual case: a contiguous page right after our position
        else:
            tuples, missed = self._filter(tuples)
        if missed:
            self.stats.missed += missed
            log.warning("%s: %d tuples missed before index %d", self.stream, missed, self.position)
        self.stats.received += len(tuples)
        return Fetch(tuples, missed=missed, meta=meta)

    def _filter(self, page: list[Tuple]) -> tuple[list[Tuple], int]:
        """Drop what was already delivered and count index jumps as missed."""
        tuples: list[Tuple] = []
        missed = 0
        for item in page:
            index = item["i"]
            if index <= self.position:
                continue  # already delivered (never hand out duplicates)
            if index > self.position + 1:
                missed += index - self.position - 1
                self.stats.gaps += 1
            tuples.append(item)
            self.position = index
        return tuples, missed

    def _reset(self, why: str, last: int) -> Fetch:
        self.stats.resets += 1
        self.position = -1 if self.reset_policy == "earliest" else last
        log.warning("%s: %s; reset to %s (position %d)", self.stream, why, self.reset_policy, self.position)
        return Fetch([], reset=True, meta=self.meta)

    # --- publisher lookup ---------------------------------------------------------

    async def _lookup(self) -> Source | None:
        """Ask the repository for a publisher, avoiding the ones that just failed."""
        assert self._session is not None, "call start() first"
        exclude = self.always_exclude | self._failed
        params: dict[str, str] = {"s": self.stream}
        if self.norep:
            params["norep"] = "true"
        if self.below_level is not None:
            params["lvl"] = str(self.below_level)
        if exclude:
            params["exclude"] = ",".join(sorted(exclude))
        host, port = self.repository
        try:
            async with self._session.get(
                f"http://{host}:{port}/subscribe",
                params=params,
                timeout=aiohttp.ClientTimeout(total=self.request_timeout_s),
            ) as response:
                body = orjson.loads(await response.read())
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            self.stats.errors += 1
            log.debug("%s: repository %s:%d unreachable: %s", self.stream, host, port, exc)
            return None
        if response.status == 404 and self._failed:
            self._failed.clear()  # those publishers may be back; try everyone again next time
            return None
        if response.status != 200:
            log.debug("%s: repository answered %d: %s", self.stream, response.status, body)
            return None
        return Source(body["host"], int(body["port"]), bool(body.get("rep")), int(body.get("lvl", 0)))

    def _drop_source(self, why: str) -> None:
        assert self.source is not None
        self.stats.errors += 1
        self.stats.failovers += 1
        log.info("%s: publisher %s failed (%s); looking for another", self.stream, self.source.endpoint, why)
        self._failed.add(self.source.endpoint)
        self.source = None

    async def _sleep_backoff(self) -> None:
        await asyncio.sleep(self._backoff)
        self._backoff = min(self._backoff * 2, self.retry_backoff_s[1])
