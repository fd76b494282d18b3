"""Many subscribers' `/data` requests to one publisher, sent as one ``POST /pages``.

A reader of hundreds of streams (the replay's recorder, a dashboard) would
otherwise make one HTTP request per stream and long poll, and the requests,
not the tuples, would be most of its CPU and of its publishers'. As Kafka's
fetcher asks each broker once for all the partitions it leads, a
``PageBatcher`` shared by the subscribers of one session keeps one request in
flight per publisher: every page asked for while it is out goes in the next
one. Each subscriber keeps its own position, failover and checks
(``pan.subscription``); only the transport is shared.

The price is latency: a page asked for while a long poll to the same
publisher is out waits for it. So batching is for readers that are not
latency-bound, and it is asked for explicitly. A publisher without
``/pages`` (an older peer) is asked with `/data` from then on.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson

from pan.auth import bearer
from pan.data_query import MAX_PAGES
from pan.repository_client import BadAnswer, Source
from pan.tls import scheme

#: Answers of a publisher that has no ``POST /pages``: ask it page by page.
NO_ROUTE = (404, 405)
#: Pages per request: what a publisher takes; more wait for the next request.
PAGES_PER_REQUEST = MAX_PAGES

Pending = list[tuple[dict[str, str], "asyncio.Future[dict[str, Any] | None]"]]


class SubscriberRefused(Exception):
    """The publisher refused a page for a reason failing over cannot fix (a bad query, a missing token)."""


class PageBatcher:
    """One ``POST /pages`` in flight per publisher, carrying every page asked for meanwhile."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        request_timeout_s: float,
        token: str | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.session = session
        self.request_timeout_s = request_timeout_s
        self._headers = {"Accept": "application/json", **bearer(token)}
        self._scheme = scheme(tls)
        self._ssl: dict[str, Any] = {} if tls is None else {"ssl": tls}
        self._pending: dict[str, Pending] = {}
        self._senders: dict[str, asyncio.Task[None]] = {}
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
        self._pending.setdefault(endpoint, []).append((query, future))
        if endpoint not in self._senders:  # it starts next loop round: pages asked for meanwhile go along
            self._senders[endpoint] = asyncio.create_task(self._send_all(source), name=f"pages {endpoint}")
        return await future

    async def close(self) -> None:
        senders = list(self._senders.values())
        for task in senders:
            task.cancel()
        await asyncio.gather(*senders, return_exceptions=True)

    async def _send_all(self, source: Source) -> None:
        endpoint = source.endpoint
        try:
            while pending := self._pending.pop(endpoint, None):
                if len(pending) > PAGES_PER_REQUEST:  # the rest go next, with what is asked for meanwhile
                    pending, self._pending[endpoint] = pending[:PAGES_PER_REQUEST], pending[PAGES_PER_REQUEST:]
                try:
                    await self._send(source, pending)
                except asyncio.CancelledError:
                    _fail(pending, ConnectionError("the page batcher was closed"))
                    raise
                except Exception as exc:  # every future must hear how its request ended
                    _fail(pending, exc)
        finally:
            del self._senders[endpoint]

    async def _send(self, source: Source, pending: Pending) -> None:
        """One ``POST /pages`` for ``pending``; each future gets its page, or the failure."""
        wait_ms = max(int(query.get("w", 0)) for query, _ in pending)
        body = {
            "pages": [urlencode({k: v for k, v in query.items() if k not in ("w", "m")}) for query, _ in pending],
            "w": wait_ms,
            "m": any(query.get("m") == "1" for query, _ in pending),
        }
        timeout = aiohttp.ClientTimeout(total=wait_ms / 1000 + self.request_timeout_s)
        self.requests += 1
        async with self.session.post(source.url("/pages", self._scheme), data=orjson.dumps(body),
                                     headers={**self._headers, "Content-Type": "application/json"},
                                     timeout=timeout, **self._ssl) as response:
            answer = await response.read()
        if response.status in NO_ROUTE:
            self.unsupported.add(source.endpoint)
            for _, future in pending:
                if not future.done():
                    future.set_result(None)
            return
        if response.status in (400, 401, 403):
            raise SubscriberRefused(f"{source.endpoint} refused POST /pages: {answer[:200]!r}")
        if response.status != 200:
            raise ValueError(f"{source.endpoint} answered HTTP {response.status} to POST /pages")
        pages = _pages(answer, len(pending))
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


def _fail(pending: Pending, exc: BaseException) -> None:
    for _, future in pending:
        if not future.done():
            future.set_exception(exc)
