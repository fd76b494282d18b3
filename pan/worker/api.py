"""A worker's HTTP API: ``/data``, ``/streams``, ``/metrics``, ``/debug`` and ``/health``.

The routes and their handlers, apart from the worker's lifecycle (as aiohttp's
application is apart from its runner and site): the worker builds its
``WorkerApi``, serves ``api.app`` with an ``HttpServer`` and registers
``api.serve_local`` for in-process subscribers. The contracts are in
docs/openapi-worker.yaml.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from aiohttp import web

from pan.buffers.column_ring import ColumnOutputStream
from pan.http import pages
from pan.http.accept import choose
from pan.http.responses import JSON_TYPE, BadRequest, NotFound, json_response, raw_json_response
from pan.http.server import add_http_metrics
from pan.http.web import make_app
from pan.input.local import PageForm
from pan.security.auth import Gate
from pan.util.metrics import CONTENT_TYPE as METRICS_TYPE
from pan.util.metrics import MetricsText
from pan.wire import arrow_pages, line_pages
from pan.wire.data_query import DEFAULT_PAGE, NO_WM, DataQuery, data_query, error_page, page_query, pages_body

if TYPE_CHECKING:
    from pan.buffers.streams import OutputStream
    from pan.components.base import Component
    from pan.config.specs import WorkerSpec
    from pan.config.trust import Trust
    from pan.http.server import HttpServer
    from pan.input.channel import InputChannel


class ServedWorker(Protocol):
    """What the API reads of the worker it serves (``pan.worker.worker.Worker`` is one).

    A protocol rather than the class, so that the API does not import the worker that imports it.
    """

    spec: WorkerSpec
    trust: Trust
    server: HttpServer
    epoch: str
    rep: bool
    level: int
    inputs: dict[str, InputChannel]
    outputs: dict[str, OutputStream]
    component: Component
    failed_tasks: dict[str, str]
    repositories: list[tuple[str, int]]

#: What ``/data`` answers in, the default first: curl and browsers get JSON whatever they send.
DATA_TYPES = (JSON_TYPE, arrow_pages.ARROW_TYPE, line_pages.LINES_TYPE)
#: What ``POST /pages`` answers in.
PAGES_TYPES = (JSON_TYPE, line_pages.LINES_TYPE)
VARY = {"Vary": "Accept"}


def _output_samples(out: OutputStream) -> list[tuple[str, str, str, float]]:
    """(name, kind, help, value) of one output stream's samples."""
    return [
        ("pan_output_last_index", "gauge", "newest index the output stream holds (-1: none)", out.buffer.last),
        ("pan_output_held_tuples", "gauge", "tuples the output stream's buffer holds", len(out.buffer)),
        ("pan_output_held_bytes", "gauge", "bytes the output stream's tuples take (JSON, or column buffers' rows)",
         out.held_bytes),
        ("pan_output_appended_total", "counter", "tuples appended to the output stream", out.appended),
        ("pan_output_requests_total", "counter", "pages served from the output stream (/data, POST /pages entries)",
         out.requests),
        ("pan_output_served_tuples_total", "counter", "tuples served from the output stream", out.served_tuples),
        ("pan_output_dropped_for_bytes_total", "counter", "tuples dropped early to stay within buffer_bytes",
         out.dropped_for_bytes),
    ]


def _input_samples(inp: InputChannel) -> list[tuple[str, str, str, float]]:
    """(name, kind, help, value) of one input's samples."""
    c = inp.counters
    return [
        ("pan_input_last_index", "gauge", "newest index received on the input (-1: none)", inp.buffer.last),
        ("pan_input_received_total", "counter", "tuples received on the input", c.received),
        ("pan_input_missed_total", "counter", "tuples the publisher no longer held when asked", c.missed),
        ("pan_input_resets_total", "counter", "times the producer restarted (a new epoch)", c.resets),
        ("pan_input_failovers_total", "counter", "switches to another publisher after a failure", c.failovers),
        ("pan_input_decode_errors_total", "counter", "pages that could not be used", c.decode_errors),
        ("pan_input_bad_sources_total", "counter", "unusable publishers a repository named", c.bad_sources),
        ("pan_input_waits_for_reader_total", "counter", "times the pull waited for the component to read",
         c.waits_for_reader),
    ]


def _ready(stream: OutputStream, query: DataQuery) -> bool:
    """Something after ``query.after`` can be served now."""
    if stream.settled is not None and query.raw_generation is None:
        return stream.settled > query.after
    return stream.buffer.last > query.after


def _meta_moved(stream: OutputStream, query: DataQuery) -> bool:
    """The stream announced a watermark the reader does not know (``known_wm``) with a poke that came before
    this long poll (an end right after the reader's last page, say): waiting on meta would wait for the next
    poke, or the whole ``w``."""
    if query.known_wm is None:
        return False
    return stream.missed_poke(None if query.known_wm == NO_WM else query.known_wm)


async def _wait_any(targets: list[tuple[DataQuery, OutputStream]], timeout_s: float, wake_on_meta: bool) -> None:
    """Until one of the queried streams has something new, or the time is up."""
    waiters = {stream.buffer.waiter(meta=wake_on_meta or (stream.settled is not None and query.raw_generation is None))
               for query, stream in targets}  # settling a speculative output is a poke
    if waiters:
        await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)  # cancels none


def _render(stream: OutputStream, query: DataQuery, lines: bool) -> bytes:
    return stream.render(query.after, oldest=_oldest(query), latest=query.latest, raw_generation=query.raw_generation,
                         lines=lines)


def _oldest(query: DataQuery) -> int | None:
    """How many of the oldest new tuples a page holds at most (``DEFAULT_PAGE`` unless the query says)."""
    return DEFAULT_PAGE if query.latest is None and query.oldest is None else query.oldest


def _page_wants_columns(stream: OutputStream, query: DataQuery) -> bool:
    """The page of ``query`` is large enough for columns (``arrow_from``, ``/data?a=``; index holes counted, as
    they are rare), or no size was asked."""
    if query.arrow_from is None:
        return True
    start, end, _missed = stream.buffer.span(query.after, oldest=_oldest(query), latest=query.latest)
    return end - start >= query.arrow_from


def _column_stream(stream: OutputStream, query: DataQuery) -> ColumnOutputStream | None:
    """``stream`` if its page for ``query`` can be made straight from rows: a column buffer read in its
    settled view."""
    return stream if type(stream) is ColumnOutputStream and query.raw_generation is None else None


def _arrow_from_rows(stream: OutputStream, query: DataQuery) -> bytes | None:
    """The Arrow page of ``query`` made straight from a column buffer's rows (None: not one, or not here)."""
    column = _column_stream(stream, query)
    return None if column is None else column.arrow_page(query.after, oldest=_oldest(query), latest=query.latest)


def _rows_page(stream: OutputStream, query: DataQuery) -> dict[str, Any] | None:
    """``_arrow_from_rows``'s page, decoded, for a reader in this process (None: not a column buffer's)."""
    column = _column_stream(stream, query)
    return None if column is None else column.row_page(query.after, oldest=_oldest(query), latest=query.latest)


class WorkerApi:
    """Answers HTTP (and in-process ``/data``) requests about one worker's streams."""

    def __init__(self, worker: ServedWorker, *, arrow: bool | None = None) -> None:
        self.worker = worker
        #: Answer ``/data`` in Arrow to readers that ask for it (default: when pyarrow is there and
        #: ``PAN_WIRE`` is not ``json``); False makes this worker an older, JSON-only peer.
        self.arrow = arrow_pages.enabled() if arrow is None else arrow
        #: With the workflow's secret, every route but ``/health`` needs the read token (pan.security.auth).
        credentials = worker.trust.credentials
        self.gate = None if credentials is None else Gate(credentials)
        self.app = make_app(gate=self.gate)
        self.batch_requests = 0  # ``POST /pages`` answered
        self.batch_pages = 0  # the pages they carried
        self.app.add_routes(
            [
                web.get("/data", self.handle_data),
                web.post("/pages", self.handle_pages),
                web.get("/streams", self.handle_streams),
                web.get("/debug", self.handle_debug),
                web.get("/", self.handle_debug),
                web.get("/health", self.handle_health),
                web.get("/metrics", self.handle_metrics),
            ]
        )

    # --- /data ----------------------------------------------------------------------

    async def handle_data(self, request: web.Request) -> web.Response:
        query = data_query(request.query)
        wanted = choose(request.headers.get("Accept"), DATA_TYPES)
        form: PageForm = "lines" if wanted == line_pages.LINES_TYPE else "arrow" if wanted == arrow_pages.ARROW_TYPE \
            else "json"
        body = await self.serve_data(query, form)
        if form == "lines":
            return web.Response(body=body, content_type=line_pages.LINES_TYPE, headers=VARY)
        if form == "arrow" and not body.startswith(b"{"):
            return web.Response(body=body, content_type=arrow_pages.ARROW_TYPE, headers=VARY)
        return raw_json_response(body, headers=VARY)

    async def handle_pages(self, request: web.Request) -> web.Response:
        """``POST /pages``: the `/data` pages of many streams in one answer, for a reader of many streams.

        The body is ``{"pages": [QUERY, ...], "w": MS, "m": BOOL}``: each QUERY is a `/data` query string
        (without ``w`` and ``m``). The answer's ``pages`` are what `/data` would answer for each, in order,
        or ``{"status": "error", "error": ..., "code": 400|404}`` for a query `/data` would refuse. With
        ``w``, the answer waits until one of the streams has something new (``m``: or new meta) or ``w``
        ms pass, as a long poll of each would. JSON, or line pages one after another (pan/wire/line_pages.py).
        """
        lines = choose(request.headers.get("Accept"), PAGES_TYPES) == line_pages.LINES_TYPE
        pages, wait_ms, wake_on_meta = pages_body(await request.read())
        targets = [self._target(page) for page in pages]  # holds are taken here, before any wait
        live = [t for t in targets if type(t) is tuple]
        if wait_ms and not any(_ready(stream, query) or (wake_on_meta and _meta_moved(stream, query))
                               for query, stream in live):
            await _wait_any(live, wait_ms / 1000, wake_on_meta)
        bodies = [(t + b"\n" if lines else t) if type(t) is bytes else _render(t[1], t[0], lines) for t in targets]
        self.batch_requests += 1
        self.batch_pages += len(bodies)
        if lines:
            return web.Response(body=b"".join(bodies), content_type=line_pages.LINES_TYPE, headers=VARY)
        return raw_json_response(b"".join([b'{"status":"ok","pages":[', b",".join(bodies), b"]}"]), headers=VARY)

    def _target(self, page: str) -> tuple[DataQuery, OutputStream] | bytes:
        """One ``POST /pages`` query and its (held) stream, or the error page `/data` would answer."""
        try:
            query = page_query(page)
            return query, self._held_stream(query)
        except BadRequest as exc:
            return error_page(exc)

    def _held_stream(self, query: DataQuery) -> OutputStream:
        """The queried output, holding what a ``hold`` reader has not read yet (before any wait)."""
        stream = self.worker.outputs.get(query.name)
        if stream is None:
            raise NotFound(f"worker '{self.worker.spec.name}' does not publish stream '{query.name}'")
        if query.hold is not None:
            stream.hold(query.hold, query.after)
        return stream

    async def serve_data(self, query: DataQuery, form: PageForm = "json") -> bytes:
        """The `/data` answer body for a validated query (HTTP and in-process subscribers).

        ``form``: ``json``, ``lines`` (a line page, pan/wire/line_pages.py) or ``arrow`` (an Arrow page,
        pan/wire/arrow_pages.py, where this worker serves Arrow and the page is columnar, of at least
        ``query.arrow_from`` tuples; else the JSON page, which begins with ``{`` as no Arrow stream does).
        """
        stream = await self._ready_stream(query)
        if form == "arrow" and self.arrow and _page_wants_columns(stream, query):
            encoded = _arrow_from_rows(stream, query)
            if encoded is not None:
                return encoded
            body = _render(stream, query, False)  # the JSON page, transposed
            return _as_arrow(body) or body  # (not columnar: it goes as JSON)
        return _render(stream, query, form == "lines")

    async def serve_local(self, query: DataQuery, form: PageForm) -> bytes | dict[str, Any]:
        """``serve_data`` for a reader in this process (``pan.input.local.DataFunction``), which may also ask for
        ``rows``: a column buffer's page decoded already, its tuples the rows (``ColumnOutputStream.row_page``);
        the JSON page where the stream is not one, or the page holds fewer than ``arrow_from`` tuples."""
        if form != "rows":
            return await self.serve_data(query, form)
        stream = await self._ready_stream(query)
        page = _rows_page(stream, query) if _page_wants_columns(stream, query) else None
        return _render(stream, query, False) if page is None else page

    async def _ready_stream(self, query: DataQuery) -> OutputStream:
        """The queried output once it has something to answer (a long poll waits here, ``wait_ms`` at most)."""
        stream = self._held_stream(query)
        if stream.settled is not None and query.raw_generation is None:
            await _wait_settled(stream, query.after, query.wait_ms / 1000)
        elif query.wait_ms and stream.buffer.last <= query.after and not (query.wake_on_meta and
                                                                           _meta_moved(stream, query)):
            await stream.buffer.wait_beyond(query.after, query.wait_ms / 1000, meta=query.wake_on_meta)
        return stream

    # --- state ----------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """The `/streams` answer."""
        worker = self.worker
        return {
            **self.status(),
            "type": worker.spec.type,
            "host": worker.spec.host,
            "port": worker.server.port,
            "epoch": worker.epoch,
            "rep": worker.rep,
            "lvl": worker.level,
            "inputs": {name: stream.describe() for name, stream in worker.inputs.items()},
            "outputs": {name: stream.counters() for name, stream in worker.outputs.items()},
            "component": worker.component.counters(),
        }

    async def handle_streams(self, request: web.Request) -> web.Response:
        return json_response(self.describe())

    def status(self) -> dict[str, Any]:
        """``ok``, or ``failing`` with the tasks that ended with an error (their input or output is dead)."""
        worker = self.worker
        if worker.failed_tasks:
            return {"status": "failing", "failed_tasks": dict(worker.failed_tasks), "worker": worker.spec.name}
        return {"status": "ok", "worker": worker.spec.name}

    async def handle_health(self, request: web.Request) -> web.Response:
        status = self.status()
        return json_response({**status, "epoch": self.worker.epoch}, status=200 if status["status"] == "ok" else 503)

    async def handle_metrics(self, request: web.Request) -> web.Response:
        worker = self.worker
        metrics = MetricsText(worker=worker.spec.name, peer=worker.spec.peer)
        for name, out in worker.outputs.items():
            for metric, kind, help_text, value in _output_samples(out):
                metrics.add(metric, value, kind, help_text, stream=name)
        for name, inp in worker.inputs.items():
            for metric, kind, help_text, value in _input_samples(inp):
                metrics.add(metric, value, kind, help_text, input=name)
        component = worker.component.counters()
        ordering = component.get("ordering")
        if isinstance(ordering, dict) and "delay_histogram" in ordering:
            hist = ordering["delay_histogram"]
            metrics.add_histogram("pan_ordering_delay_seconds", hist["buckets"], hist["sum_ps"], hist["count"],
                                  scale=1e-12, help="event time an event waited in the ordering unit")
        streams = {**worker.outputs, **worker.inputs}
        metrics.add_flat("pan_component", component, label_for=streams)
        metrics.add("pan_batch_requests_total", self.batch_requests, "counter", "POST /pages requests answered")
        metrics.add("pan_batch_pages_total", self.batch_pages, "counter", "pages the POST /pages answers carried")
        add_http_metrics(metrics, worker.server)
        return web.Response(body=metrics.render(), headers={"Content-Type": METRICS_TYPE})

    async def handle_debug(self, request: web.Request) -> web.Response:
        worker = self.worker
        info = self.describe()
        link_scheme = "http" if worker.trust.tls is None else "https"
        sections = []
        for title, rows in (("Inputs", info["inputs"]), ("Outputs", info["outputs"])):
            keys = sorted({key for row in rows.values() for key in row})
            sections.append({"title": title, "rows": rows, "columns": keys})
        return pages.render(
            "worker.html", name=worker.spec.name, type=worker.spec.type, peer=worker.spec.peer, epoch=worker.epoch,
            level=worker.level, sections=sections, component=pages.flat(info["component"]),
            repositories=[pages.endpoint_link(host, port, link_scheme) for host, port in worker.repositories],
        )


def _as_arrow(body: bytes) -> bytes | None:
    """The Arrow form of a JSON page body, or None where the page is not columnar (it goes as JSON)."""
    try:
        page = orjson.loads(body)
    except orjson.JSONDecodeError:  # a number orjson cannot read back: JSON readers fail on it the same way
        return None
    return arrow_pages.encode_page(page)


async def _wait_settled(stream: OutputStream, after: int, timeout_s: float) -> None:
    """Long poll of a settled view: until a tuple after ``after`` is settled, or the time is up."""
    deadline = time.monotonic() + timeout_s
    while stream.settled is not None and stream.settled <= after:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        await stream.buffer.wait_beyond(stream.buffer.last, left, meta=True)
