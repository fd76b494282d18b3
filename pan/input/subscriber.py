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

``StreamSubscriber`` is the public client and composes two parts: a
``SubscriptionState`` (``pan/input/subscription.py``: position, epoch, progress,
failover, and the rules that move them) and a ``PageFetcher``
(``pan/input/fetcher.py``: one page from one publisher, over HTTP or in process).
It adds the loop between them and the repository lookup.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

import aiohttp

from pan.input.fetcher import PageFetcher, SubscriberError, Wire
from pan.input.local import LocalPublishers
from pan.input.page_batches import PageBatcher
from pan.input.subscription import LAGGING_FETCHES_BEFORE_SWITCH, Fetch, Reset, SubscriberStats, SubscriptionState, log
from pan.repository.client import (
    Address,
    BadAnswer,
    NoPublisher,
    NotTrusted,
    RepositoryClient,
    RepositoryUnavailable,
    Source,
    parse_addresses,
)
from pan.util.ratelimit import RateLimitedLog
from pan.wire import arrow_pages, line_pages
from pan.wire.progress import StreamProgress

__all__ = [
    "LAGGING_FETCHES_BEFORE_SWITCH",
    "Fetch",
    "Reset",
    "StreamSubscriber",
    "SubscriberError",
    "SubscriberStats",
]

WARNING_INTERVAL_S = 10.0  # at most one WARNING line of a kind per subscriber in this time; the rest are counted


class StreamSubscriber:
    """Async iterator over one stream, with failover between its publishers."""

    def __init__(
        self,
        stream: str,
        repository: Address | Sequence[Address],
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
        wire: Wire | None = None,
        token: str | None = None,
        allowed_hosts: frozenset[str] | None = None,
        tls: ssl.SSLContext | None = None,
        view: str = "settled",
        batcher: PageBatcher | None = None,
        encoded: bool = False,
        columns: bool | Literal["prefer"] = False,
    ) -> None:
        if view not in ("settled", "raw"):
            raise ValueError(f"view must be 'settled' or 'raw', got {view!r}")
        if columns and gaps:
            raise ValueError("a subscriber of columns gets no markers among its tuples: read stats.missed instead")
        self.stream = stream
        #: ``settled`` (default): of a speculative stream only the tuples no retraction can touch; ``raw``: every
        #: tuple as soon as it is published, and ``{"retract": {"after": n, "generation": g}}`` markers (with
        #: ``gaps``) where tuples after ``n`` that were delivered are withdrawn and read again.
        self.view = view
        #: Publishers' hosts this subscriber may pull from (the workflow's ``allowed_hosts``); None: any host the
        #: repository names. A repository that names another is not followed.
        self.allowed_hosts = allowed_hosts
        #: Every repository of the workflow: lookups go to one, and to the next when it fails or knows nobody.
        self.repositories = parse_addresses(repository)
        self.repository = self.repositories[0]
        self.request_timeout_s = request_timeout_s
        self.norep = norep
        self.below_level = below_level
        self.state = SubscriptionState(
            stream, start=start, reset=reset, exclude=exclude, retry_backoff_s=retry_backoff_s
        )
        self.state.raw_view = view == "raw"
        #: ``hold``: a name under which publishers keep every tuple this subscriber has not read
        #: (``/data?hold=``), for recorders that must lose nothing; a live client leaves it None and skips ahead.
        #: ``wake_on_meta``: long polls also end on producer meta changes (K, wm).
        #: ``wire``: ``json`` or ``arrow`` pages over HTTP (default: Arrow when pyarrow is there).
        #: ``token``: the read token of a workflow with a secret, for the repository and the publishers
        #: (pan.security.auth).
        #: ``batcher``: JSON pages go with other subscribers' to the same publisher in one request, for readers
        #: of many streams that can wait for each other's long polls (pan/input/page_batches.py).
        #: ``encoded``: tuples (and markers) come as the publisher's JSON bytes, never decoded, through line pages
        #: (pan/wire/line_pages.py), for readers that store or forward them; the batcher must be one of ``lines``.
        #: ``columns``: each batch is one pyarrow ``RecordBatch`` (Arrow pages, no dict per tuple), for readers
        #: that compute on columns; a publisher that answers JSON has its page turned into one. ``"prefer"``: such
        #: a page stays a list of dicts instead (for readers that take both, such as a component's inputs).
        self.columns = bool(columns)
        self.fetcher = PageFetcher(
            stream, page_size=page_size, max_wait_ms=max_wait_ms, request_timeout_s=request_timeout_s,
            local=local, wake_on_meta=wake_on_meta, hold=hold, wire=wire, token=token, tls=tls, batcher=batcher,
            encoded=encoded, columns=columns,
        )
        self.token = token
        self.tls = tls  # HTTPS to the repositories and publishers, trusting this context's CA (pan.security.tls)
        self._session = session
        self._owns_session = session is None
        self._repository_clients: list[RepositoryClient] = []  # made on the first lookup, on this subscriber's session
        self._asked = 0  # the repository asked first
        #: ``batches()`` and iteration also yield ``{"gap": {"from": i, "to": j}}`` (first and last missed
        #: index) where tuples were missed, and ``{"reset": {...}}`` where the reset policy was applied.
        self.gap_markers = gaps
        # One rate limit per kind of trouble, so a flood of bad pages does not hide a bad repository answer.
        self._bad_source_log = RateLimitedLog(log, burst=1, window_s=WARNING_INTERVAL_S)
        self._bad_page_log = RateLimitedLog(log, burst=1, window_s=WARNING_INTERVAL_S)

    # --- the state, as callers read it -------------------------------------------

    @property
    def position(self) -> int:
        """The index of the last tuple delivered (-1 before any)."""
        return self.state.position

    @property
    def epoch(self) -> str | None:
        """The producer's epoch at the latest answer."""
        return self.state.epoch

    @property
    def progress(self) -> StreamProgress:
        """The publisher's ``meta`` in its latest answer."""
        return self.state.progress

    @property
    def upstream_last(self) -> int:
        """The publisher's newest index at the last answer."""
        return self.state.upstream_last

    @property
    def source(self) -> Source | None:
        """The publisher fetched from now (None while looking for one)."""
        return self.state.source

    @property
    def stats(self) -> SubscriberStats:
        return self.state.stats

    @property
    def reset_policy(self) -> Reset:
        return self.state.reset_policy

    @property
    def source_is_local(self) -> bool:
        """The current publisher answers in this process, without HTTP."""
        return self.source is not None and self.fetcher.is_local(self.source)

    # --- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
        self._session = None
        self._repository_clients = []

    async def __aenter__(self) -> StreamSubscriber:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- iteration ----------------------------------------------------------------

    async def batches(self) -> AsyncIterator[Any]:
        """Non-empty batches of new tuples, in index order, forever (with markers if ``gaps``); bytes if ``encoded``,
        a record batch if ``columns``."""
        while True:
            batch = self.delivered(await self.fetch())
            if batch:
                yield batch

    def delivered(self, fetch: Fetch) -> list[Any]:
        """What ``fetch`` hands on: its tuples, with gap, reset and retract markers among them if ``gaps``."""
        return fetch.markers(self.position, self.epoch) if self.gap_markers else fetch.tuples

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for batch in self.batches():
            for item in batch if isinstance(batch, list | line_pages.Lines) else arrow_pages.batch_tuples(batch):
                yield item

    # --- one fetch ----------------------------------------------------------------

    async def fetch(self) -> Fetch:
        """One long-poll round trip; retries publishers and the repository until it works."""
        assert self._session is not None, "call start() first"
        state = self.state
        while True:
            if state.source is None:
                state.source = await self._lookup()
                if state.source is None:
                    await asyncio.sleep(state.next_backoff_s())
                    continue
            try:
                after = state.position if state.positioned else None
                generation = state.raw_generation if state.raw_view else None
                # Behind the publisher's last answer, the next page is there already: no long poll to wait for.
                wait = state.position >= state.upstream_last
                answer = await self.fetcher.get(self._session, state.source, after, generation, wait=wait,
                                                known_wm=state.progress.wm)
            except BadAnswer as exc:
                self._bad_page(state.source, exc)
                # Even a repository that keeps naming this publisher cannot make us spin.
                await asyncio.sleep(state.next_backoff_s())
                continue
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                state.drop_source(f"{type(exc).__name__}: {exc}")
                continue
            state.answered()
            return state.apply(answer)

    def _bad_page(self, source: Source, exc: BadAnswer) -> None:
        """A publisher's answer this client cannot use: report it (with the address), fail over."""
        self.stats.decode_errors += 1
        self._bad_page_log.warning(
            "%s: publisher %s sent a page that cannot be used at position %d (%s); failing over",
            self.stream, source.endpoint, self.position, exc,
        )
        self.state.drop_source(f"bad page: {exc}")

    # --- publisher lookup ---------------------------------------------------------

    async def _lookup(self) -> Source | None:
        """Ask the repositories for a publisher, avoiding the ones that just failed.

        The first repository that answers with a publisher wins; one that is down or knows nobody
        (it may have restarted empty) hands over to the next, starting from the last one that answered.
        """
        assert self._session is not None, "call start() first"
        if not self._repository_clients:
            self._repository_clients = [
                RepositoryClient(address, session=self._session, timeout_s=self.request_timeout_s, token=self.token,
                                 tls=self.tls)
                for address in self.repositories
            ]
        nobody = False
        count = len(self._repository_clients)
        for step in range(count):
            n = (self._asked + step) % count
            repository = self._repository_clients[n]
            try:
                source = await repository.lookup(
                    self.stream, norep=self.norep, below_level=self.below_level, exclude=self.state.excluded()
                )
            except RepositoryUnavailable as exc:
                self.stats.errors += 1
                log.debug("%s: %s", self.stream, exc)
                continue
            except NotTrusted as exc:
                raise SubscriberError(f"{self.stream}: {exc}") from None
            except NoPublisher as exc:
                if exc.status in (401, 403):  # asking again will not help
                    raise SubscriberError(f"{self.stream}: repository {repository.address} refused the lookup: "
                                          f"{exc}") from None
                nobody = nobody or exc.status == 404
                log.debug("%s: %s", self.stream, exc)
                continue
            except BadAnswer as exc:
                self.stats.errors += 1
                self.stats.bad_sources += 1
                self._bad_source_log.warning(
                    "%s: repository %s named an unusable publisher (%s); looking again",
                    self.stream, repository.address, exc,
                )
                continue
            if self.allowed_hosts is not None and source.host not in self.allowed_hosts:
                self.stats.bad_sources += 1
                self.state.always_exclude.add(source.endpoint)  # a host outside the list never gets in
                self._bad_source_log.warning(
                    "%s: repository %s named publisher %s, whose host is not in the allowed hosts; not pulling "
                    "from it", self.stream, repository.address, source.endpoint,
                )
                continue
            self._asked = n
            return source
        if nobody:
            self.state.nobody_publishes()  # those that failed may be back; try everyone again next time
        return None
