"""The worker runtime: one component between input and output ring buffers.

Lifecycle (``start`` then ``stop``), in this order so that nobody ever
subscribes to a stream that is not served yet:

1. serve HTTP and let the component acquire its resources;
2. publish every output to the repository (soft state, refreshed forever);
3. start one pull task per input stream, then the component's own task.

All background tasks are owned by the worker and cancelled and awaited by
``stop``.  The repository may be down at any time: publishing is retried on
the next refresh and the pull tasks only need it to find a new publisher.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import re
import uuid
from typing import Any

import aiohttp
from aiohttp import web

from pan.catalog import get_component_type
from pan.client import StreamSubscriber
from pan.component import Component, ComponentContext
from pan.local import LocalPublishers
from pan.metrics import MetricsText
from pan.progress import EMPTY, StreamProgress
from pan.repository_client import Lease, Registration, RepositoryClient
from pan.ringbuffer import RingBuffer
from pan.specs import RepositorySpec, WorkerSpec
from pan.streams import InputStream, OutputStream
from pan.web import (
    BadRequest,
    HttpServer,
    NotFound,
    add_http_metrics,
    json_response,
    make_app,
    query_bool,
    query_int,
    query_str,
    raw_json_response,
)

MAX_PAGE = 100_000  # tuples per /data answer
DEFAULT_PAGE = 10_000  # when neither l nor n is given
MAX_WAIT_MS = 60_000
HOLDER_NAME = re.compile(r"[A-Za-z0-9._:-]{1,64}")
MAX_INDEX = 2**63 - 1
PULL_WAIT_MS = 1000
PULL_PAGE = 10_000  # a worker (e.g. a repeater) must drain a fast stream in few round trips
INPUT_BUFFER_MIN = 20_000  # tuples per input stream
REPOSITORY_TIMEOUT_S = 2.0


class Worker:
    def __init__(
        self,
        spec: WorkerSpec,
        repository: RepositorySpec,
        *,
        epoch: str | None = None,
        local: LocalPublishers | None = None,
    ) -> None:
        component_type = get_component_type(spec.type)
        if component_type is None:
            raise ValueError(f"unknown worker type {spec.type!r}")
        self.spec = spec
        self.repository = repository
        self.local = local  # this peer's directory of in-process publishers, if any
        self.epoch = epoch or uuid.uuid4().hex[:16]
        self.log = logging.getLogger(f"pan.worker.{spec.name}")
        self.level = component_type.repeater_level(spec)
        self.rep = component_type.repeats
        producer = EMPTY if self.rep else StreamProgress(epoch=self.epoch)  # a repeater passes its source's on
        self.outputs = {
            name: OutputStream(name, spec.buffer_size, producer, spec.buffer_bytes)
            for name in component_type.output_names(spec)
        }
        # Input buffers are not sized by ``buffer_size`` (which is for outputs): a component that
        # lags its pull task must not lose input because the worker keeps few outputs.
        input_capacity = max(spec.buffer_size, INPUT_BUFFER_MIN)
        self.inputs = {
            name: InputStream(name, RingBuffer(input_capacity)) for name in component_type.input_names(spec)
        }
        self.component: Component = component_type(
            ComponentContext(spec=spec, inputs=self.inputs, outputs=self.outputs, log=self.log)
        )
        self.subscribers: dict[str, StreamSubscriber] = {}
        self.server = HttpServer(self._build_app(), spec.host, spec.port)
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.lease: Lease | None = None  # the outputs' registration, once the port is known

    @property
    def endpoint(self) -> str:
        return f"{self.spec.host}:{self.server.port}"

    # --- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        await self.server.start()
        if self.local is not None:
            self.local.register(self.spec.host, self.server.port, self.serve_data)
        await self.component.start()
        registration = Registration(
            tuple(self.outputs), self.spec.host, self.server.port, self.rep, self.level, 3 * self.repository.refresh_ms
        )
        client = RepositoryClient(
            (self.repository.host, self.repository.port), session=self._session, timeout_s=REPOSITORY_TIMEOUT_S
        )
        self.lease = Lease(client, registration, self.repository.refresh_ms / 1000, self.log)
        await self.lease.publish()
        for name, stream in self.inputs.items():
            self._spawn(self._pull(name, stream), f"pull {name}")
        self._spawn(self.component.run(), "component")
        self._spawn(self.lease.keep(), "refresh")
        self.log.info("started %s on %s (epoch %s)", self.spec.type, self.endpoint, self.epoch)

    async def stop(self) -> None:
        if self.local is not None:  # first, so that neighbours fail over exactly as over HTTP
            self.local.unregister(self.spec.host, self.server.port)
        for output in self.outputs.values():
            output.buffer.wake_all()  # answer pending long polls now rather than at their timeout
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self.component.stop()
        if self.lease is not None:
            with contextlib.suppress(Exception):
                await self.lease.release()
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self.server.stop()
        inputs = {
            key: sum(getattr(stream.counters, key) for stream in self.inputs.values())
            for key in ("received", "missed", "resets", "failovers")
        }
        self.log.info("stopped: %s", _summary({**self.component.counters(), "inputs": inputs}))

    def _spawn(self, coro: Any, what: str) -> None:
        task = asyncio.create_task(coro, name=f"{self.spec.name}: {what}")
        task.add_done_callback(self._report_crash)
        self._tasks.append(task)

    def _report_crash(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.log.error("task %r failed", task.get_name(), exc_info=task.exception())

    # --- data plane ---------------------------------------------------------------

    async def _pull(self, name: str, stream: InputStream) -> None:
        """Fill one input buffer from whichever publisher the repository offers."""
        subscriber = StreamSubscriber(
            name,
            (self.repository.host, self.repository.port),
            start="earliest",
            reset="earliest",
            max_wait_ms=PULL_WAIT_MS,
            page_size=PULL_PAGE,
            below_level=self.level if self.rep else None,
            exclude=(self.endpoint,),
            session=self._session,
            local=self.local,
            wake_on_meta=True,  # K notices and watermarks must reach this worker's ordering unit at once
        )
        self.subscribers[name] = subscriber
        while True:
            await stream.wait_for_room(PULL_PAGE)  # a slow component holds the pull; nothing is overwritten
            fetch = await subscriber.fetch()
            stream.upstream_last = subscriber.upstream_last
            stream.set_progress(fetch.progress)
            stream.source = (
                None
                if subscriber.source is None
                else {
                    "host": subscriber.source.host,
                    "port": subscriber.source.port,
                    "rep": subscriber.source.rep,
                    "lvl": subscriber.source.lvl,
                    "local": subscriber.source_is_local,
                }
            )
            if fetch.reset:
                stream.reset()
            if fetch.tuples:
                stream.add(fetch.tuples)
            self._copy_pull_counters(name)

    def _copy_pull_counters(self, name: str) -> None:
        """The subscriber's counts into the input's; also before every report, since a fetch that keeps
        failing over (an undecodable page, a bad publisher address) does not return to ``_pull``."""
        subscriber = self.subscribers.get(name)
        if subscriber is not None:
            counters, stats = self.inputs[name].counters, subscriber.stats
            counters.missed, counters.failovers = stats.missed, stats.failovers
            counters.decode_errors, counters.bad_sources = stats.decode_errors, stats.bad_sources

    # --- HTTP ---------------------------------------------------------------------

    def _build_app(self) -> web.Application:
        app = make_app()
        app.add_routes(
            [
                web.get("/data", self.handle_data),
                web.get("/streams", self.handle_streams),
                web.get("/debug", self.handle_debug),
                web.get("/health", self.handle_health),
                web.get("/metrics", self.handle_metrics),
            ]
        )
        return app

    async def handle_data(self, request: web.Request) -> web.Response:
        q = request.query
        name = query_str(q, "s", required=True)
        after = query_int(q, "i", default=-1, minimum=-1, maximum=MAX_INDEX)
        latest = query_int(q, "l", minimum=1, maximum=MAX_PAGE)
        oldest = query_int(q, "n", minimum=1, maximum=MAX_PAGE)
        wait_ms = query_int(q, "w", default=0, minimum=0, maximum=MAX_WAIT_MS)
        wake_on_meta = query_bool(q, "m")
        hold = query_str(q, "hold")
        if latest is not None and oldest is not None:
            raise BadRequest("parameters 'l' (latest) and 'n' (oldest) cannot be used together")
        if hold is not None and not HOLDER_NAME.fullmatch(hold):
            raise BadRequest("parameter 'hold' must be 1-64 letters, digits or . _ : -")
        assert name is not None and after is not None and wait_ms is not None
        return raw_json_response(await self.serve_data(name, after, oldest, latest, wait_ms, wake_on_meta, hold))

    async def serve_data(
        self, name: str, after: int, oldest: int | None, latest: int | None, wait_ms: int, wake_on_meta: bool,
        hold: str | None = None,
    ) -> bytes:
        """The `/data` answer body for validated parameters (HTTP and in-process subscribers).

        ``hold``: the reader's name, if it must lose nothing (``OutputStream.hold``).
        """
        stream = self.outputs.get(name)
        if stream is None:
            raise NotFound(f"worker '{self.spec.name}' does not publish stream '{name}'")
        if hold is not None:
            stream.hold(hold, after)
        if latest is None and oldest is None:
            oldest = DEFAULT_PAGE
        if wait_ms and stream.buffer.last <= after:
            await stream.buffer.wait_beyond(after, wait_ms / 1000, meta=wake_on_meta)
        return stream.render(after, oldest=oldest, latest=latest)

    def describe(self) -> dict[str, Any]:
        for name in self.inputs:
            self._copy_pull_counters(name)
        return {
            "status": "ok",
            "worker": self.spec.name,
            "type": self.spec.type,
            "host": self.spec.host,
            "port": self.server.port,
            "epoch": self.epoch,
            "rep": self.rep,
            "lvl": self.level,
            "inputs": {name: stream.describe() for name, stream in self.inputs.items()},
            "outputs": {name: stream.counters() for name, stream in self.outputs.items()},
            "component": self.component.counters(),
        }

    async def handle_streams(self, request: web.Request) -> web.Response:
        return json_response(self.describe())

    async def handle_health(self, request: web.Request) -> web.Response:
        return json_response({"status": "ok", "worker": self.spec.name, "epoch": self.epoch})

    async def handle_metrics(self, request: web.Request) -> web.Response:
        metrics = MetricsText(worker=self.spec.name)
        for name in self.inputs:
            self._copy_pull_counters(name)
        for name, out in self.outputs.items():
            metrics.add("pan_output_last_index", out.buffer.last, "gauge", stream=name)
            metrics.add("pan_output_held_tuples", len(out.buffer), "gauge", stream=name)
            metrics.add("pan_output_appended_total", out.appended, "counter", stream=name)
            metrics.add("pan_output_requests_total", out.requests, "counter", stream=name)
            metrics.add("pan_output_served_tuples_total", out.served_tuples, "counter", stream=name)
            metrics.add("pan_output_held_bytes", out.held_bytes, "gauge", stream=name)
            metrics.add("pan_output_dropped_for_bytes_total", out.dropped_for_bytes, "counter", stream=name)
        for name, inp in self.inputs.items():
            metrics.add("pan_input_last_index", inp.buffer.last, "gauge", stream=name)
            metrics.add("pan_input_received_total", inp.counters.received, "counter", stream=name)
            metrics.add("pan_input_missed_total", inp.counters.missed, "counter", stream=name)
            metrics.add("pan_input_resets_total", inp.counters.resets, "counter", stream=name)
            metrics.add("pan_input_failovers_total", inp.counters.failovers, "counter", stream=name)
            metrics.add("pan_input_decode_errors_total", inp.counters.decode_errors, "counter", stream=name)
            metrics.add("pan_input_bad_sources_total", inp.counters.bad_sources, "counter", stream=name)
            metrics.add("pan_input_waits_for_reader_total", inp.counters.waits_for_reader, "counter", stream=name)
        counters = self.component.counters()
        ordering = counters.get("ordering")
        if isinstance(ordering, dict) and "delay_histogram" in ordering:
            hist = ordering["delay_histogram"]
            metrics.add_histogram(
                "pan_ordering_delay_seconds", hist["buckets"], hist["sum_ps"], hist["count"], scale=1e-12
            )
        metrics.add_flat("pan_component", counters)
        add_http_metrics(metrics, self.server)
        return web.Response(text=metrics.render(), content_type="text/plain", charset="utf-8")

    async def handle_debug(self, request: web.Request) -> web.Response:
        def table(title: str, rows: dict[str, dict[str, Any]]) -> str:
            keys = sorted({key for row in rows.values() for key in row})
            head = "".join(f"<th>{html.escape(k)}</th>" for k in ["stream", *keys])
            body = "".join(
                "<tr><td>" + html.escape(name) + "</td>"
                + "".join(f"<td>{html.escape(str(row.get(k, '')))}</td>" for k in keys)
                + "</tr>"
                for name, row in rows.items()
            )
            return f"<h2>{title}</h2><table border=1><tr>{head}</tr>{body}</table>"

        info = self.describe()
        page = (
            f"<!doctype html><html><head><title>PAN worker {html.escape(self.spec.name)}</title></head><body>"
            f"<h1>{html.escape(self.spec.name)} ({html.escape(self.spec.type)})</h1>"
            f"<p>epoch {self.epoch}, level {self.level}, repository {self.repository.address}</p>"
            + table("Inputs", info["inputs"])
            + table("Outputs", info["outputs"])
            + f"<h2>Component</h2><pre>{html.escape(str(info['component']))}</pre></body></html>"
        )
        return web.Response(text=page, content_type="text/html")


def _summary(counters: dict[str, Any]) -> str:
    """The non-zero numbers among a component's counters, one level of nesting flattened (a last word in logs)."""
    flat: dict[str, Any] = {}
    for key, value in counters.items():
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, v in items:
            if isinstance(v, int | float) and not isinstance(v, bool) and v:
                flat[key if sub is None else f"{key}.{sub}"] = v
    return " ".join(f"{k}={v}" for k, v in flat.items()) or "no counts"
