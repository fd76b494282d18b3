"""Many subscribers' `/data` requests to one publisher, sent as one ``POST /pages``.

A reader of hundreds of streams (the replay's recorder, a dashboard) would
otherwise make one HTTP request per stream and long poll, and the requests,
not the tuples, would be most of its CPU and of its publishers'. A
``PageBatcher`` shared by the subscribers of one session sends every page
asked for of one publisher in the same event-loop round as one request. Each
subscriber keeps its own position, failover and checks
(``pan.input.subscription``); only the transport is shared.

A page never waits for a request that is already out: that request may be a
long poll on streams that stay quiet, and the page's own stream may have data
now. (An earlier version kept one request in flight per publisher, as Kafka's
fetcher does per broker; a quiet stream's long poll then held back its
busy neighbours by up to the wait, and K notices came too late.) So a page
asked for while a request is out starts the next one. Subscribers that are
answered together ask again together and stay coalesced; the rest cost what
they would cost with `/data`.

A reader that is not latency-bound (the replay's recorder, whose subscribers
each linger before asking again, so hardly two ask in the same round) sets
``one_request_out``: then a page asked for while a request is out waits for it
and goes in the next, the fewest requests. Only a page asked for without a long
poll (its reader knows the publisher has more) never waits behind a long poll:
such pages go in requests of their own, one out at a time too (a lane each).

A publisher without ``/pages`` (an older peer) is asked with `/data` from then
on. A batcher of ``lines`` asks for line pages (pan/wire/line_pages.py): the tuples
stay the publisher's bytes.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections import deque
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson

from pan.repository.client import BadAnswer, Source
from pan.security.auth import bearer
from pan.security.tls import scheme
from pan.wire import line_pages
from pan.wire.data_query import MAX_PAGES

#: Answers of a publisher that has no ``POST /pages``: ask it page by page.
NO_ROUTE = (404, 405)
#: What ``urlencode`` leaves as it is in a key or value (RFC 3986's unreserved characters).
_UNRESERVED = re.compile(r"[A-Za-z0-9_.~-]*")
#: Pages per request: what a publisher takes; more wait for the next request.
PAGES_PER_REQUEST = MAX_PAGES

Pending = list[tuple[dict[str, str], "asyncio.Future[dict[str, Any] | None]"]]
#: Pages that share requests: a publisher's endpoint, and whether the pages long-poll (``one_request_out`` only).
Lane = tuple[str, bool]


class SubscriberRefused(Exception):
    """The publisher refused a page for a reason failing over cannot fix (a bad query, a missing token)."""


class PageBatcher:
    """Every page asked for of one publisher in one event-loop round goes in one ``POST /pages``.

    ``one_request_out``: at most one request per publisher is out (and one without a long poll); pages asked for
    meanwhile wait for it.
    ``lines``: ask for line pages; a page's ``tuples`` are then bytes, with ``indices`` beside them (unless
    the publisher answered JSON).
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        request_timeout_s: float,
        token: str | None = None,
        tls: ssl.SSLContext | None = None,
        one_request_out: bool = False,
        lines: bool = False,
    ) -> None:
        self.session = session
        self.one_request_out = one_request_out
        self.lines = lines
        self.request_timeout_s = request_timeout_s
        self._headers = {"Accept": line_pages.ACCEPT if lines else "application/json", **bearer(token)}
        self._scheme = scheme(tls)
        self._ssl: dict[str, Any] = {} if tls is None else {"ssl": tls}
        #: Per lane, the pages asked for that no request carries yet, as the requests they will make.
        self._unsent: dict[Lane, deque[Pending]] = {}
        self._senders: set[asyncio.Task[None]] = set()
        #: With ``one_request_out``: the lanes whose sender is running (it takes the next pages too).
        self._sending: set[Lane] = set()
        #: Publishers that answered ``POST /pages`` with 404 or 405.
        self.unsupported: set[str] = set()
        self.requests = 0  # POSTs sent
        self.pages = 0  # pages they carried

    async def page(self, source: Source, query: dict[str, str]) -> dict[str, Any] | None:
        """``source``'s `/data` answer for ``query`` (a `/data` query), decoded but not checked.

        None: the publisher has no ``/pages``; ask it with `/data`. Raises ``SubscriberRefused`` for a
        page the publisher refuses, and ``ValueError``, ``aiohttp.ClientError``, ``TimeoutError`` or
        ``OSError`` when the request fails.
        """
        endpoint = source.endpoint
        if endpoint in self.unsupported:
            return None
        future: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
        lane = (endpoint, not self.one_request_out or "w" in query)
        unsent = self._unsent.setdefault(lane, deque())
        if not unsent or len(unsent[-1]) >= PAGES_PER_REQUEST:
            # A new request; it is sent next loop round, and the pages asked for meanwhile go along.
            unsent.append([])
            if not self.one_request_out or lane not in self._sending:
                self._start_sender(source, lane)
        unsent[-1].append((query, future))
        return await future

    def _start_sender(self, source: Source, lane: Lane) -> None:
        if self.one_request_out:
            self._sending.add(lane)
        sender = asyncio.create_task(self._send_later(source, lane), name=f"pages {source.endpoint}")
        self._senders.add(sender)
        sender.add_done_callback(self._senders.discard)

    async def close(self) -> None:
        senders = list(self._senders)
        for task in senders:
            task.cancel()
        await asyncio.gather(*senders, return_exceptions=True)
        for unsent in self._unsent.values():
            while unsent:
                _fail(unsent.popleft(), ConnectionError("the page batcher was closed"))

    async def _send_later(self, source: Source, lane: Lane) -> None:
        """Send the oldest unsent request of ``lane`` (its pages asked for until now), and with
        ``one_request_out`` then the next ones, one at a time; every future hears how its request ended."""
        unsent = self._unsent[lane]
        try:
            while unsent:
                pending = unsent.popleft()  # from now on, pages go in a new request
                try:
                    await self._send(source, pending)
                except asyncio.CancelledError:
                    _fail(pending, ConnectionError("the page batcher was closed"))
                    raise
                except Exception as exc:  # every future must hear how its request ended
                    _fail(pending, exc)
                if not self.one_request_out:
                    return
        finally:
            if self.one_request_out:
                self._sending.discard(lane)

    async def _send(self, source: Source, pending: Pending) -> None:
        """One ``POST /pages`` for ``pending``; each future gets its page, or the failure."""
        wait_ms = max(int(query.get("w", 0)) for query, _ in pending)
        body = {
            "pages": [_query_text(query) for query, _ in pending],
            "w": wait_ms,
            "m": any(query.get("m") == "1" for query, _ in pending),
        }
        timeout = aiohttp.ClientTimeout(total=wait_ms / 1000 + self.request_timeout_s)
        self.requests += 1
        async with self.session.post(source.url("/pages", self._scheme), data=orjson.dumps(body),
                                     headers={**self._headers, "Content-Type": "application/json"},
                                     timeout=timeout, **self._ssl) as response:
            chunks = await _body(response)
        if response.status in NO_ROUTE:
            self.unsupported.add(source.endpoint)
            for _, future in pending:
                if not future.done():
                    future.set_result(None)
            return
        if response.status in (400, 401, 403):
            raise SubscriberRefused(f"{source.endpoint} refused POST /pages: {b''.join(chunks)[:200]!r}")
        if response.status != 200:
            raise ValueError(f"{source.endpoint} answered HTTP {response.status} to POST /pages")
        if response.content_type == line_pages.LINES_TYPE:
            pages = decoded_line_pages(chunks, len(pending))
        else:
            pages = _pages(b"".join(chunks), len(pending))
        self.pages += len(pages)
        for (_, future), page in zip(pending, pages, strict=True):
            if future.done():  # its subscriber gave up meanwhile
                continue
            if page.get("status") == "error":
                code = page.get("code")
                error = f"{source.endpoint}: {str(page.get('error'))[:200]}"
                future.set_exception(SubscriberRefused(error) if code in (400, 401, 403) else ValueError(error))
            else:
                future.set_result(page)


async def _body(response: aiohttp.ClientResponse) -> list[bytes]:
    """The body as the chunks it arrived in: ``read()`` joins them (twice), which for a reader of hundreds of
    megabytes (the replay's recorder) costs a copy and, for each fresh buffer, the kernel's page faults. Line
    pages are decoded from the chunks as they are (`line_pages.decode`)."""
    chunks = []
    while chunk := (await response.content.readchunk())[0]:
        chunks.append(chunk)
    return chunks


def _query_text(query: dict[str, str]) -> str:
    """A page's `/data` query as ``urlencode`` writes it, without the wait and the wake (they go with the request).
    Values of unreserved characters only (numbers, stream names) are written as they are: ``urlencode`` quotes
    each one, which a reader of hundreds of streams pays thousands of times a second."""
    pairs = [(k, v) for k, v in query.items() if k not in ("w", "m")]
    if all(_UNRESERVED.fullmatch(k) and _UNRESERVED.fullmatch(v) for k, v in pairs):
        return "&".join([f"{k}={v}" for k, v in pairs])
    return urlencode(pairs)


def _pages(answer: bytes, count: int) -> list[dict[str, Any]]:
    """The ``pages`` of a ``POST /pages`` answer, one object per query, else ``BadAnswer``."""
    try:
        decoded = orjson.loads(answer)
    except orjson.JSONDecodeError as exc:
        raise BadAnswer(f"undecodable: {exc}") from None
    pages = decoded.get("pages") if isinstance(decoded, dict) else None
    if not isinstance(pages, list) or len(pages) != count or not all(isinstance(p, dict) for p in pages):
        raise BadAnswer(f"expected {count} page objects in 'pages'")
    return pages


def decoded_line_pages(answer: bytes | list[bytes], count: int | None = None) -> list[dict[str, Any]]:
    """The line pages of an answer, else ``BadAnswer``: ``count`` of them (a ``POST /pages`` answer, one per
    query), or exactly one (a `/data` answer, ``count`` None)."""
    try:
        return line_pages.decode(answer, count)
    except line_pages.PageFormatError as exc:
        raise BadAnswer(f"undecodable: {exc}") from None


def _fail(pending: Pending, exc: BaseException) -> None:
    for _, future in pending:
        if not future.done():
            future.set_exception(exc)
