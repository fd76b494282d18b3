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

Nothing a repository or publisher answers is trusted: a publisher's address
must be an IP address or a DNS name with a port in 1..65535 before any URL is
built from it (from parts, with yarl, never by pasting strings), and a page
that cannot be decoded is an error of that publisher, reported and failed
over, never a silent retry loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Literal

import aiohttp
import orjson

from pan.local import DataFunction, LocalPublishers
from pan.progress import EMPTY, StreamProgress
from pan.ratelimit import RateLimitedLog
from pan.repository_client import (
    BadAnswer,
    NoPublisher,
    RepositoryClient,
    RepositoryUnavailable,
    Source,
    parse_address,
)
from pan.web import BadRequest, NotFound

log = logging.getLogger(__name__)

Reset = Literal["earliest", "latest"]
LAGGING_FETCHES_BEFORE_SWITCH = 3  # empty long polls from a repeater behind our position
WARNING_INTERVAL_S = 10.0  # at most one WARNING line of a kind per subscriber in this time; the rest are counted
Tuple = dict[str, Any]

_INDEX = itemgetter("i")


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
    decode_errors: int = 0  # publisher pages that could not be decoded or were malformed
    bad_sources: int = 0  # repository answers naming an unusable publisher address


@dataclass(slots=True)
class Fetch:
    """What one fetch brought: new tuples plus what happened on the way."""

    tuples: list[Tuple]
    missed: int = 0
    reset: bool = False
    progress: StreamProgress = EMPTY
    #: Runs of missed indices (first, last), in order; each ends right before a tuple of this fetch.
    gaps: list[tuple[int, int]] = field(default_factory=list)
    #: Why the reset policy was applied (with ``reset``).
    reset_reason: str = ""

    def markers(self, position: int, epoch: str | None) -> list[Tuple]:
        """The tuples with ``{"gap": ...}`` markers among them in index order, after a ``{"reset": ...}`` marker.

        ``position`` and ``epoch`` are the subscriber's after this fetch (where a reset resumed).
        """
        out: list[Tuple] = []
        if self.reset:
            out.append({"reset": {"reason": self.reset_reason, "epoch": epoch, "position": position}})
        gaps = iter(self.gaps)
        gap = next(gaps, None)
        for item in self.tuples:
            while gap is not None and gap[1] < item["i"]:
                out.append({"gap": {"from": gap[0], "to": gap[1]}})
                gap = next(gaps, None)
            out.append(item)
        return out


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
        gaps: bool = False,
        hold: str | None = None,
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
        self.progress = EMPTY  # the publisher's ``meta`` in its latest answer
        self._start = start
        self.position = start if isinstance(start, int) else -1
        self._positioned = isinstance(start, int) or start == "earliest"
        self._failed: set[str] = set()
        self._session = session
        self._repository: RepositoryClient | None = None  # made on the first lookup, on this subscriber's session
        self._local = local
        self.wake_on_meta = wake_on_meta  # long polls also end on producer meta changes (K, wm)
        #: A name under which publishers keep every tuple this subscriber has not read (``/data?hold=``):
        #: for recorders that must lose nothing; a live client leaves it None and skips ahead instead.
        self.hold = hold
        self._owns_session = session is None
        self._backoff = retry_backoff_s[0]
        self._lagging = 0
        self.upstream_last = -1  # the publisher's newest index at the last answer
        #: ``batches()`` and iteration also yield ``{"gap": {"from": i, "to": j}}`` (first and last missed
        #: index) where tuples were missed, and ``{"reset": {...}}`` where the reset policy was applied.
        self.gap_markers = gaps
        # One rate limit per kind of trouble, so a flood of bad pages does not hide a bad repository answer.
        self._bad_source_log = RateLimitedLog(log, burst=1, window_s=WARNING_INTERVAL_S)
        self._bad_page_log = RateLimitedLog(log, burst=1, window_s=WARNING_INTERVAL_S)

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
        self._repository = None

    async def __aenter__(self) -> StreamSubscriber:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- iteration ----------------------------------------------------------------

    async def batches(self) -> AsyncIterator[list[Tuple]]:
        """Non-empty batches of new tuples, in index order, forever (with markers if ``gaps``)."""
        while True:
            fetch = await self.fetch()
            batch = fetch.markers(self.position, self.epoch) if self.gap_markers else fetch.tuples
            if batch:
                yield batch

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
            except BadAnswer as exc:
                self._bad_page(self.source, exc)
                await self._sleep_backoff()  # even a repository that keeps naming this publisher cannot make us spin
                continue
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                self._drop_source(f"{type(exc).__name__}: {exc}")
                continue
            self._backoff = self.retry_backoff_s[0]
            return self._apply(answer)

    async def _get_data(self, source: Source) -> dict[str, Any]:
        """The publisher's `/data` answer, decoded and checked (``BadAnswer`` if it is not a usable page)."""
        assert self._session is not None, "call start() first"
        if not self._positioned:
            params = {"s": self.stream, "l": "1"}
        else:
            params = {"s": self.stream, "i": str(self.position), "n": str(self.page_size)}
            if self.max_wait_ms:
                params["w"] = str(self.max_wait_ms)
            if self.wake_on_meta:
                params["m"] = "1"
            if self.hold is not None:
                params["hold"] = self.hold
        serve = self._local.lookup(source.host, source.port) if self._local is not None else None
        if serve is not None:
            return _checked_page(await self._get_local(serve, source))
        timeout = aiohttp.ClientTimeout(total=self.max_wait_ms / 1000 + self.request_timeout_s)
        async with self._session.get(source.url("/data"), params=params, timeout=timeout) as response:
            body = await response.read()
        if response.status == 400:
            raise SubscriberError(f"{source.endpoint} rejected the fetch: {body[:200]!r}")
        if response.status != 200:
            raise ValueError(f"{source.endpoint} answered HTTP {response.status}")
        return _checked_page(body)

    async def _get_local(self, serve: DataFunction, source: Source) -> bytes:
        """The same fetch as over HTTP, answered by a publisher in this process."""
        after = self.position if self._positioned else -1
        oldest, latest = (self.page_size, None) if self._positioned else (None, 1)
        wait_ms = self.max_wait_ms if self._positioned else 0
        try:
            return await serve(self.stream, after, oldest, latest, wait_ms, self.wake_on_meta, self.hold)
        except NotFound as exc:
            raise ValueError(f"{source.endpoint}: {exc.message}") from None
        except BadRequest as exc:
            raise SubscriberError(f"{source.endpoint} rejected the fetch: {exc.message}") from None

    def _apply(self, answer: dict[str, Any]) -> Fetch:
        progress = StreamProgress.from_json(answer.get("meta"))
        self.progress = progress
        epoch = progress.epoch
        last = answer.get("last", -1)
        self.upstream_last = last
        if not self._positioned:  # start=latest: begin after the newest tuple
            self.position, self.epoch, self._positioned = last, epoch, True
            return Fetch([], progress=progress)
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
            return Fetch([], progress=progress)
        self._lagging = 0
        tuples: list[Tuple] = answer.get("tuples") or []
        missed = 0
        gaps: list[tuple[int, int]] = []
        if tuples and tuples[0]["i"] == self.position + 1 and tuples[-1]["i"] == self.position + len(tuples):
            self.position += len(tuples)  # the usual case: a contiguous page right after our position
        else:
            tuples, gaps = self._filter(tuples)
            missed = sum(to - first + 1 for first, to in gaps)
        if missed:
            self.stats.missed += missed
            log.warning("%s: %d tuples missed before index %d", self.stream, missed, self.position)
        self.stats.received += len(tuples)
        return Fetch(tuples, missed=missed, progress=progress, gaps=gaps)

    def _filter(self, page: list[Tuple]) -> tuple[list[Tuple], list[tuple[int, int]]]:
        """Drop what was already delivered; index jumps become gaps (first and last missed index)."""
        tuples: list[Tuple] = []
        gaps: list[tuple[int, int]] = []
        for item in page:
            index = item["i"]
            if index <= self.position:
                continue  # already delivered (never hand out duplicates)
            if index > self.position + 1:
                gaps.append((self.position + 1, index - 1))
                self.stats.gaps += 1
            tuples.append(item)
            self.position = index
        return tuples, gaps

    def _reset(self, why: str, last: int) -> Fetch:
        self.stats.resets += 1
        self.position = -1 if self.reset_policy == "earliest" else last
        log.warning("%s: %s; reset to %s (position %d)", self.stream, why, self.reset_policy, self.position)
        return Fetch([], reset=True, progress=self.progress, reset_reason=why)

    # --- publisher lookup ---------------------------------------------------------

    async def _lookup(self) -> Source | None:
        """Ask the repository for a publisher, avoiding the ones that just failed."""
        assert self._session is not None, "call start() first"
        if self._repository is None:
            self._repository = RepositoryClient(
                self.repository, session=self._session, timeout_s=self.request_timeout_s
            )
        try:
            return await self._repository.lookup(
                self.stream, norep=self.norep, below_level=self.below_level, exclude=self.always_exclude | self._failed
            )
        except RepositoryUnavailable as exc:
            self.stats.errors += 1
            log.debug("%s: %s", self.stream, exc)
        except NoPublisher as exc:
            if exc.status == 404 and self._failed:
                self._failed.clear()  # those publishers may be back; try everyone again next time
            log.debug("%s: %s", self.stream, exc)
        except BadAnswer as exc:
            self.stats.errors += 1
            self.stats.bad_sources += 1
            self._bad_source_log.warning(
                "%s: repository %s named an unusable publisher (%s); looking again",
                self.stream, self._repository.address, exc,
            )
        return None

    def _drop_source(self, why: str) -> None:
        assert self.source is not None
        self.stats.errors += 1
        self.stats.failovers += 1
        log.info("%s: publisher %s failed (%s); looking for another", self.stream, self.source.endpoint, why)
        self._failed.add(self.source.endpoint)
        self.source = None

    def _bad_page(self, source: Source, exc: BadAnswer) -> None:
        """A publisher's answer this client cannot use: report it (with the address), fail over."""
        self.stats.decode_errors += 1
        self._bad_page_log.warning(
            "%s: publisher %s sent a page that cannot be used at position %d (%s); failing over",
            self.stream, source.endpoint, self.position, exc,
        )
        self._drop_source(f"bad page: {exc}")

    async def _sleep_backoff(self) -> None:
        await asyncio.sleep(self._backoff)
        self._backoff = min(self._backoff * 2, self.retry_backoff_s[1])


def _checked_page(body: bytes) -> dict[str, Any]:
    """A `/data` body decoded and checked for what the subscriber relies on, else ``BadAnswer``.

    A tuple without an integer ``i`` or a number orjson cannot represent
    (a 400-digit integer) would otherwise stop the subscriber on every retry.
    """
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadAnswer(f"undecodable: {exc}") from None
    if not isinstance(answer, dict):
        raise BadAnswer(f"expected a JSON object, got {type(answer).__name__}")
    last = answer.get("last", -1)
    if type(last) is not int:
        raise BadAnswer(f"'last' is not an integer: {last!r}")
    meta = answer.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise BadAnswer("'meta' is not an object")
    tuples = answer.get("tuples")
    if tuples is None:
        return answer
    if not isinstance(tuples, list):
        raise BadAnswer("'tuples' is not a list")
    try:
        index_types = set(map(type, map(_INDEX, tuples)))  # C loops: a few % of the decoding time
    except (KeyError, TypeError):
        raise BadAnswer("a tuple is not an object with an index 'i'") from None
    if not index_types <= {int}:
        raise BadAnswer("a tuple's 'i' is not an integer")
    return answer
