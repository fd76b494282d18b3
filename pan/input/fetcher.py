"""One `/data` page from one publisher, over HTTP or in process, and nothing else.

The fetcher keeps no position and makes no choice of publisher (that is
``pan.input.subscription.SubscriptionState``); it turns "the tuples after index P
from publisher X" into a request and the answer into a checked page.

Nothing a publisher answers is trusted: a page that cannot be decoded, or
lacks what the subscriber relies on, raises ``BadAnswer`` (an error of that
publisher, reported and failed over by the caller, never a silent retry loop).
A publisher in this process (``pan/input/local.py``) is called directly, with the
same answer as over HTTP.

Over HTTP a fetcher asks for JSON pages, or for Arrow pages (``pan/wire/arrow_pages.py``)
with ``PAN_WIRE=arrow``, and reads whatever the publisher answers by its
``Content-Type``: an older publisher ignores ``Accept`` and answers JSON. A
fetcher of ``encoded`` tuples asks for line pages (``pan/wire/line_pages.py``) and
hands on each tuple as the publisher's bytes, undecoded.
"""

from __future__ import annotations

import ssl
from operator import itemgetter
from typing import Any, Literal

import aiohttp
import orjson

from pan.buffers.column_ring import MIN_HOT
from pan.buffers.row_store import RowTable
from pan.http.responses import BadRequest, NotFound
from pan.input.local import DataFunction, LocalPublishers, PageForm
from pan.input.page_batches import PageBatcher, SubscriberRefused, decoded_line_pages
from pan.repository.client import BadAnswer, Source
from pan.security.auth import bearer
from pan.security.tls import scheme
from pan.wire import arrow_pages, line_pages
from pan.wire.data_query import NO_WM, NO_WM_TEXT, DataQuery

_INDEX = itemgetter("i")
Wire = Literal["json", "arrow"]
#: A ``columns="prefer"`` reader's pages: JSON up to this many tuples, what a column buffer keeps as JSON at
#: least (pan/buffers/column_ring.py), so that such a page is mostly a join of kept bytes; Arrow from there on.
POLL_PAGE = MIN_HOT
#: The ``Accept`` of each wire format: Arrow preferred, JSON acceptable (q=0.5), so any publisher can answer.
ACCEPT: dict[Wire, str] = {
    "arrow": f"{arrow_pages.ARROW_TYPE}, application/json;q=0.5",
    "json": "application/json",
}


def default_wire() -> Wire:
    """Arrow when this process is told to prefer it (``PAN_WIRE=arrow``, pyarrow there), else JSON."""
    return "arrow" if arrow_pages.preferred() else "json"


class SubscriberError(Exception):
    """A failure the subscriber cannot recover from by switching publishers."""


class PageFetcher:
    """Fetches pages of one stream; ``get`` raises on any trouble, for the caller to fail over."""

    def __init__(
        self,
        stream: str,
        *,
        page_size: int,
        max_wait_ms: int,
        request_timeout_s: float,
        local: LocalPublishers | None,
        wake_on_meta: bool,
        hold: str | None,
        wire: Wire | None = None,
        token: str | None = None,
        tls: ssl.SSLContext | None = None,
        batcher: PageBatcher | None = None,
        encoded: bool = False,
        columns: bool | Literal["prefer"] = False,
    ) -> None:
        """``wire``: the page format asked for over HTTP (default: ``default_wire()``); ``token``: the read token
        of a workflow with a secret (pan.security.auth); ``tls``: HTTPS, trusting this context's CA (pan.security.tls);
        ``batcher``: JSON pages over HTTP go with other streams' in one ``POST /pages`` (pan/input/page_batches.py);
        ``encoded``: a page's ``tuples`` are the publisher's bytes, with their ``indices`` beside them (line
        pages whatever ``wire`` says; the batcher must ask for line pages too); ``columns``: a page's ``tuples``
        are one pyarrow record batch, with their ``indices`` beside them (Arrow pages; no batcher); ``"prefer"``:
        columns for the first page and whenever the reader is behind (``get(wait=False)``: a page of up to
        ``page_size`` rows, where columns save a JSON render and decode per tuple), but only for a page of
        at least ``POLL_PAGE`` tuples (``/data?a=``; a smaller one is JSON: an Arrow page's fixed cost is more
        than the JSON of a few tuples that a column buffer still keeps); JSON pages (and the batcher) of at
        most ``POLL_PAGE`` tuples for the long polls of a reader that caught up: should many tuples have come
        meanwhile, the reader is behind after that page and reads the rest as columns. A page the publisher
        answers in JSON keeps its tuples as dicts (not transposed). From a publisher in this process, a column
        page of a ``"prefer"`` reader is the rows themselves (a ``RowTable``, pan/buffers/row_store.py: nothing
        encoded or decoded, though still some numpy calls and a table for its row store: the same rule of
        ``POLL_PAGE`` applies), or JSON from a stream that holds no rows."""
        self.stream = stream
        self.page_size = page_size
        self.max_wait_ms = max_wait_ms
        self.request_timeout_s = request_timeout_s
        self.local = local
        self.wake_on_meta = wake_on_meta
        self.hold = hold
        self.wire: Wire = "arrow" if columns is True else default_wire() if wire is None else wire
        if (self.wire == "arrow" or columns) and not arrow_pages.available():
            raise ValueError("Arrow pages need pyarrow (pip install 'pan[arrow]')")
        if columns and encoded:
            raise ValueError("a fetcher hands on tuples as bytes (encoded) or as columns, not both")
        self.encoded = encoded
        self.columns = bool(columns)
        self.tuples_from_json = columns == "prefer"
        self._answered = False  # a page came: from now on a long poll means the reader had caught up
        if batcher is not None and batcher.lines != encoded:
            raise ValueError("a fetcher of encoded tuples needs a batcher of line pages, and only it")
        self._headers = {"Accept": line_pages.ACCEPT if encoded else ACCEPT[self.wire], **bearer(token)}
        self._arrow_headers = {**self._headers, "Accept": ACCEPT["arrow"]}
        self._scheme = scheme(tls)
        self._ssl: dict[str, Any] = {} if tls is None else {"ssl": tls}
        # The batched answer is JSON or line pages, never Arrow.
        self.batcher = batcher if encoded or self.wire == "json" else None  # (columns: Arrow; "prefer": its JSON)

    def is_local(self, source: Source) -> bool:
        """``source`` answers in this process, without HTTP."""
        return self.local is not None and self.local.lookup(source.host, source.port) is not None

    async def get(
        self, session: aiohttp.ClientSession, source: Source, after: int | None, raw_generation: int | None = None,
        *, wait: bool = True, known_wm: int | None = None,
    ) -> dict[str, Any]:
        """The publisher's `/data` answer for the tuples after index ``after``, decoded and checked.

        ``after=None`` asks only for the newest index (where ``start="latest"`` begins). ``raw_generation``:
        the raw view of a speculative stream, for a reader that has seen that retract generation. ``wait``
        False: no long poll (the caller knows the publisher has more; a batcher then sends the page without
        waiting for a long poll of other streams, pan/input/page_batches.py). ``known_wm``: the watermark of the
        caller's last page (None: none); a long poll that wakes on meta then answers at once for another
        watermark the stream announced before it (``/data?wm=``). Raises
        ``BadAnswer`` for an unusable page, ``SubscriberError`` if the publisher rejects the request,
        and ``ValueError``, ``aiohttp.ClientError``, ``TimeoutError`` or ``OSError`` if it fails.
        """
        columns = self.columns and not (self.tuples_from_json and wait and self._answered)  # "prefer": behind
        page_size = self.page_size if columns or not self.tuples_from_json else min(self.page_size, POLL_PAGE)
        arrow_from = POLL_PAGE if columns and self.tuples_from_json else None
        serve = self.local.lookup(source.host, source.port) if self.local is not None else None
        if serve is not None:
            # In process a column page is the rows themselves, not an Arrow stream (the same choice of page).
            form: PageForm = "json"
            if self.encoded:
                form = "lines"
            elif columns:
                form = "rows" if self.tuples_from_json else "arrow"
            body = await self._get_local(serve, source, after, raw_generation, wait, form, page_size, arrow_from,
                                         known_wm)
            if type(body) is dict:
                return self._checked(body, False)
            if form == "arrow" and not body.startswith(b"{"):
                return self._checked(_arrow_page(body, True), False)
            return self._checked(body, self.encoded)
        if after is None:
            params = {"s": self.stream, "l": "1"}
        else:
            params = {"s": self.stream, "i": str(after), "n": str(page_size)}
            if self.max_wait_ms and wait:
                params["w"] = str(self.max_wait_ms)
            if self.wake_on_meta:
                params["m"] = "1"
                params["wm"] = NO_WM_TEXT if known_wm is None else str(known_wm)
            if self.hold is not None:
                params["hold"] = self.hold
            if arrow_from is not None:
                params["a"] = str(arrow_from)
        if raw_generation is not None:
            params["view"], params["g"] = "raw", str(raw_generation)
        if self.batcher is not None and not columns:
            try:
                page = await self.batcher.page(source, params)
            except SubscriberRefused as exc:
                raise SubscriberError(str(exc)) from None
            if page is not None:
                return self._checked(page, False)
        timeout = aiohttp.ClientTimeout(total=int(params.get("w", 0)) / 1000 + self.request_timeout_s)
        headers = self._arrow_headers if columns else self._headers
        try:
            async with session.get(
                source.url("/data", self._scheme), params=params, headers=headers, timeout=timeout, **self._ssl
            ) as response:
                body = await response.read()
        except aiohttp.ClientConnectorCertificateError as exc:  # every publisher of the workflow shares the CA
            raise SubscriberError(f"{source.endpoint}: {exc.certificate_error}") from None
        if response.status == 400:
            raise SubscriberError(f"{source.endpoint} rejected the fetch: {body[:200]!r}")
        if response.status in (401, 403):  # every publisher of the workflow shares the secret: failing over is no use
            raise SubscriberError(f"{source.endpoint} refused to serve: {_error_text(body)}")
        if response.status != 200:
            raise ValueError(f"{source.endpoint} answered HTTP {response.status}")
        if response.content_type == arrow_pages.ARROW_TYPE:
            return self._checked(_arrow_page(body, self.columns), False)
        return self._checked(body, response.content_type == line_pages.LINES_TYPE)

    def _checked(self, body: bytes | dict[str, Any], lines: bool) -> dict[str, Any]:
        """The answer checked, in the form this fetcher hands on (``encoded``: a line page's; ``columns``: a
        record batch's)."""
        page = _checked_page(decoded_line_pages(body)[0] if lines and type(body) is bytes else body)
        self._answered = True
        if self.encoded and "indices" not in page:  # a publisher that answered JSON (or Arrow)
            return line_pages.from_json_page(page)
        if self.columns and "indices" not in page and isinstance(page.get("tuples"), list):  # it answered JSON
            if self.tuples_from_json:
                return page
            try:
                return arrow_pages.columns_of(page)
            except arrow_pages.PageFormatError as exc:
                raise BadAnswer(str(exc)) from None
        return page

    async def _get_local(
        self, serve: DataFunction, source: Source, after: int | None, raw_generation: int | None, wait: bool,
        form: PageForm, page_size: int, arrow_from: int | None, known_wm: int | None,
    ) -> bytes | dict[str, Any]:
        """The same fetch as over HTTP, answered by a publisher in this process (a reader of ``columns="prefer"``
        gets a column buffer's rows themselves: ``ColumnOutputStream.row_page``)."""
        if after is None:
            after, oldest, latest, wait_ms = -1, None, 1, 0
        else:
            oldest, latest, wait_ms = page_size, None, self.max_wait_ms if wait else 0
        query = DataQuery(self.stream, after, oldest, latest, wait_ms, self.wake_on_meta, self.hold, raw_generation,
                          arrow_from, (NO_WM if known_wm is None else known_wm) if self.wake_on_meta else None)
        try:
            return await serve(query, form)
        except NotFound as exc:
            raise ValueError(f"{source.endpoint}: {exc.message}") from None
        except BadRequest as exc:
            raise SubscriberError(f"{source.endpoint} rejected the fetch: {exc.message}") from None


def _error_text(body: bytes) -> str:
    """The message of a PAN error answer, else its first bytes."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return repr(body[:200])
    return str(answer.get("error", answer))[:200] if isinstance(answer, dict) else repr(body[:200])


def _arrow_page(body: bytes, columns: bool) -> dict[str, Any]:
    """An Arrow `/data` body decoded (``columns``: its tuples left as a record batch), else ``BadAnswer`` (also
    when this process cannot read Arrow)."""
    if not arrow_pages.available():
        raise BadAnswer("answered an Arrow page without being asked (pyarrow is not installed here)")
    try:
        return arrow_pages.decode_columns(body) if columns else arrow_pages.decode_page(body)
    except arrow_pages.PageFormatError as exc:
        raise BadAnswer(f"undecodable: {exc}") from None


def _checked_page(body: bytes | dict[str, Any]) -> dict[str, Any]:
    """A `/data` body (or an Arrow page, decoded) checked for what the subscriber relies on, else ``BadAnswer``.

    A tuple without an integer ``i`` or a number orjson cannot represent
    (a 400-digit integer) would otherwise stop the subscriber on every retry.
    """
    if isinstance(body, dict):
        answer: Any = body
    else:
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
    if "indices" in answer and (type(tuples) in (RowTable, line_pages.Lines) or arrow_pages.is_batch(tuples)):
        # A column page (its indices rise: the Arrow page's decoding checked them, a row page's are a ring's), or a
        # line page: its decoding checked the indices, its tuples stay bytes.
        return answer
    if not isinstance(tuples, list):
        raise BadAnswer("'tuples' is not a list")
    if "indices" in answer:  # a line page of a publisher that sends no ``bytes``: its tuples are split
        return answer
    try:
        index_types = set(map(type, map(_INDEX, tuples)))  # C loops: a few % of the decoding time
    except (KeyError, TypeError):
        raise BadAnswer("a tuple is not an object with an index 'i'") from None
    if not index_types <= {int}:
        raise BadAnswer("a tuple's 'i' is not an integer")
    return answer
