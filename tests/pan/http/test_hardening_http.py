"""Issue 10, findings 7 (HTTP part) and 8: connections are bounded, and every error is the JSON contract.

Finding 7: 1,000 half-sent HTTP headers were all held for 30 s.  Finding 8:
aiohttp's own refusals (over-long queries, non-UTF-8 bytes, bad HTTP) were
``400 text/plain`` with a logged ERROR traceback each, and query integers
took ``" +5"``, ``1_000`` and Arabic-Indic digits.  Everything runs against
real servers (a worker, the repository, a bare ``HttpServer``) over real
loopback sockets, most of them raw so that they can send what no client would.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

import pan.http.limits
from pan.http.addresses import free_port
from pan.http.limits import HttpLimits, http_stats
from pan.http.responses import json_response
from pan.http.server import HttpServer
from pan.http.web import make_app
from pan.repository.server import RepositoryServer
from pan.util.ratelimit import RateLimitedLog
from pan.worker.worker import Worker
from tests.conftest import HOST, forwarder, make_workflow, wait_until
from tests.support import prometheus

# --- raw HTTP -----------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    content_type: str
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


def parse_answer(raw: bytes) -> Answer:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", len(body)))
    return Answer(status, headers.get("content-type", "").split(";")[0], body[:length])


async def exchange(port: int, request: bytes, timeout_s: float = 20.0) -> Answer:
    """Send raw bytes; read the answer up to the server's close (every request here ends in one)."""
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        writer.write(request)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), timeout_s)
    finally:
        writer.close()
    return parse_answer(raw)


def get(target: bytes, *headers: bytes) -> bytes:
    extra = b"".join(h + b"\r\n" for h in headers)
    return b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + extra + b"\r\n"


def assert_json_error(answer: Answer, status: int) -> dict[str, Any]:
    assert answer.status == status, answer
    assert answer.content_type == "application/json", answer
    body = answer.json()
    assert body["status"] == "error" and isinstance(body["error"], str) and body["error"], body
    return body


# --- servers ----------------------------------------------------------------------------------------


@pytest.fixture
async def worker(repository: RepositoryServer) -> AsyncIterator[Worker]:
    workflow = make_workflow(repository.port, [forwarder("F", ["S"])])
    started = Worker(workflow.workers[0], workflow.repository)
    await started.start()
    yield started
    await started.stop()


@pytest.fixture(params=["worker", "repository"])
async def any_server(request: pytest.FixtureRequest, repository: RepositoryServer) -> AsyncIterator[HttpServer]:
    """The HTTP server of a real worker, or of the real repository."""
    if request.param == "repository":
        yield repository.server
        return
    workflow = make_workflow(repository.port, [forwarder("F", ["S"])])
    started = Worker(workflow.workers[0], workflow.repository)
    await started.start()
    yield started.server
    await started.stop()


@pytest.fixture
def fresh_log(monkeypatch: pytest.MonkeyPatch) -> RateLimitedLog:
    """A refusal log with a budget of its own, so that earlier tests cannot have spent it."""
    limiter = RateLimitedLog(logging.getLogger("pan.http.limits"), burst=1000)
    monkeypatch.setattr(pan.http.limits, "refusals_log", limiter)
    return limiter


async def serve(limits: HttpLimits) -> HttpServer:
    """A bare server with a slow handler, to tell a slow answer from a slow request."""

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(float(request.query.get("s", "0")))
        return json_response({"status": "ok"})

    async def echo(request: web.Request) -> web.Response:
        return json_response({"status": "ok", "bytes": len(await request.read())})

    app = make_app(max_body_bytes=1000)
    app.add_routes([web.get("/slow", slow), web.post("/echo", echo)])
    server = HttpServer(app, HOST, free_port(), limits=limits)
    await server.start()
    return server


# --- finding 8: aiohttp's own refusals are JSON, logged in one line -------------------------------------

RAW_BAD_REQUESTS = [
    (get(b"/health?s=" + b"A" * 9000), 414),  # a query over 8 KB
    (get(b"/health?s=\xff\xfe"), 400),  # raw bytes that are not UTF-8
    (get(b"/health?s=%ff%fe"), 400),  # escaped bytes that are not UTF-8
    (get(b"/health", b"X-Big: " + b"b" * 9000), 431),
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400),
    (b"GET /health HTTP/9.9\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n", 400),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40, 400),  # TLS to an HTTP port
    (get(b"/nowhere"), 404),
    (b"POST /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", 405),
    (b"DELETE /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 405),
]


@pytest.mark.parametrize(("request_bytes", "status"), RAW_BAD_REQUESTS)
async def test_every_refusal_is_json_and_logs_one_warning_line_without_traceback(
    any_server: HttpServer,
    caplog: pytest.LogCaptureFixture,
    fresh_log: RateLimitedLog,
    request_bytes: bytes,
    status: int,
) -> None:
    port = any_server.port
    caplog.set_level(logging.DEBUG)
    caplog.clear()
    assert_json_error(await exchange(port, request_bytes), status)
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(records) == (0 if status == 404 else 1), [r.getMessage() for r in records]
    assert all(r.exc_info is None and r.levelno == logging.WARNING and "\n" not in r.getMessage() for r in records)
    assert not [r for r in caplog.records if r.name.startswith("aiohttp") and r.exc_info is not None]
    assert http_stats(any_server.app).refused[status] == 1


async def test_body_over_the_limit_is_413_json(repository: RepositoryServer, fresh_log: RateLimitedLog) -> None:
    body = b'{"s": ["' + b"x" * (2 << 20) + b'"]}'
    request = (
        b"POST /publish HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:100]
    )
    assert_json_error(await exchange(repository.port, request), 413)
    chunked = b"POST /publish HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"x" * 65536
    chunked += (b"%x\r\n" % len(chunk) + chunk + b"\r\n") * 20 + b"0\r\n\r\n"
    assert_json_error(await exchange(repository.port, chunked), 413)


@pytest.mark.parametrize(
    "raw",
    ["%20%2B5", "+5", "%205", "5%20", "1_000", "%D9%A5", "%EF%BC%95", "5.0", "0x10", "--5", "5-", "", "1e3"],
)
async def test_query_integers_are_ascii_digits_with_an_optional_minus(worker: Worker, raw: str) -> None:
    answer = await exchange(worker.server.port, get(b"/data?s=S&i=" + raw.encode()))
    body = assert_json_error(answer, 400)
    assert "'i'" in body["error"]


@pytest.mark.parametrize("raw", ["5", "-1", "0005", "9223372036854775807"])
async def test_plain_integers_still_parse(worker: Worker, raw: str) -> None:
    answer = await exchange(worker.server.port, get(b"/data?s=S&i=" + raw.encode()))
    assert answer.status == 200 and answer.json()["status"] == "ok"


async def test_huge_integers_are_out_of_range_not_a_crash(worker: Worker) -> None:
    answer = await exchange(worker.server.port, get(b"/data?s=S&i=" + b"9" * 5000))
    assert "must be <=" in assert_json_error(answer, 400)["error"]


async def test_refusal_log_is_rate_limited_but_every_refusal_is_counted(
    repository: RepositoryServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusals = RateLimitedLog(logging.getLogger("pan.http.limits"), burst=3, window_s=3600)
    monkeypatch.setattr(pan.http.limits, "refusals_log", refusals)
    caplog.set_level(logging.WARNING)
    for _ in range(10):
        assert_json_error(await exchange(repository.port, b"GARBAGE\r\n\r\n"), 400)
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 3
    assert http_stats(repository.server.app).refused[400] == 10
    async with aiohttp.ClientSession() as session, session.get(f"http://{HOST}:{repository.port}/metrics") as response:
        assert prometheus.value(await response.text(), "pan_http_refused_total", role="repository", status="400") == 10


# --- finding 7: timeouts and the per-address cap -------------------------------------------------------


async def closed_by_server(reader: asyncio.StreamReader, timeout_s: float = 30.0) -> bytes:
    """Everything the server sent until it closed the connection (fails if it never does)."""
    return await asyncio.wait_for(reader.read(), timeout_s)


async def test_half_sent_headers_are_cut_after_the_header_timeout(fresh_log: RateLimitedLog) -> None:
    server = await serve(HttpLimits(header_timeout_s=0.3, idle_timeout_s=60))
    try:
        conns = [await asyncio.open_connection(HOST, server.port) for _ in range(50)]
        for _, writer in conns:
            writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\nX-Half: ")  # never finished
        answers = await asyncio.gather(*(closed_by_server(reader) for reader, _ in conns))
        for raw in answers:
            assert_json_error(parse_answer(raw), 408)
        assert server.stats.header_timeouts == 50
        for _, writer in conns:
            writer.close()
    finally:
        await server.stop()


async def test_a_trickled_header_is_cut_too(fresh_log: RateLimitedLog) -> None:
    """One byte at a time (slowloris) does not restart the header timer."""
    server = await serve(HttpLimits(header_timeout_s=0.5, idle_timeout_s=60))
    try:
        reader, writer = await asyncio.open_connection(HOST, server.port)
        started = time.monotonic()
        closed = asyncio.create_task(closed_by_server(reader))
        for byte in b"GET /slow HTTP/1.1\r\nHost: x\r\n" * 100:
            if closed.done():
                break
            writer.write(bytes([byte]))
            await asyncio.sleep(0.05)
        assert_json_error(parse_answer(await closed), 408)
        assert time.monotonic() - started < 30  # cut long before the 3,000 bytes were all sent
        writer.close()
    finally:
        await server.stop()


async def test_idle_connections_are_closed(fresh_log: RateLimitedLog) -> None:
    server = await serve(HttpLimits(idle_timeout_s=0.3))
    try:
        silent_reader, silent_writer = await asyncio.open_connection(HOST, server.port)  # never sends a byte
        reader, writer = await asyncio.open_connection(HOST, server.port)
        writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")  # one request, then idle keep-alive
        raw = await closed_by_server(reader)
        assert raw.startswith(b"HTTP/1.1 200") and raw.count(b"HTTP/1.1") == 1
        assert await closed_by_server(silent_reader) == b""
        await wait_until(lambda: server.stats.open_connections == 0)
        silent_writer.close()
        writer.close()
    finally:
        await server.stop()


async def test_a_slow_body_is_cut_after_the_body_timeout(fresh_log: RateLimitedLog) -> None:
    server = await serve(HttpLimits(body_timeout_s=0.3))
    try:
        reader, writer = await asyncio.open_connection(HOST, server.port)
        writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
        assert_json_error(parse_answer(await closed_by_server(reader)), 408)
        assert server.stats.body_timeouts == 1
        writer.close()
    finally:
        await server.stop()


async def test_slow_answers_are_not_cut_by_the_request_timeouts(fresh_log: RateLimitedLog) -> None:
    """The timeouts are on reading a request; a handler may take longer than all of them."""
    server = await serve(HttpLimits(header_timeout_s=0.2, body_timeout_s=0.2, idle_timeout_s=0.2))
    try:
        reader, writer = await asyncio.open_connection(HOST, server.port)
        for _ in range(2):  # twice on one keep-alive connection
            writer.write(b"GET /slow?s=1.0 HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            assert head.startswith(b"HTTP/1.1 200")
            answer = parse_answer(head)
            assert orjson.loads(await reader.readexactly(len(b'{"status":"ok"}'))) == {"status": "ok"}
            assert answer.content_type == "application/json"
        writer.close()
    finally:
        await server.stop()


async def test_a_worker_long_poll_outlasts_the_timeouts(repository: RepositoryServer) -> None:
    workflow = make_workflow(repository.port, [forwarder("F", ["S"])])
    worker = Worker(workflow.workers[0], workflow.repository)
    worker.server.limits = HttpLimits(header_timeout_s=0.2, body_timeout_s=0.2, idle_timeout_s=0.2)
    await worker.start()
    try:
        started = time.monotonic()
        answer = await exchange(worker.server.port, get(b"/data?s=S&i=-1&w=1500"))
        assert answer.status == 200 and answer.json()["tuples"] == []
        assert time.monotonic() - started >= 1.4  # it waited for data, and was not cut
    finally:
        await worker.stop()


async def test_connections_per_address_are_capped(fresh_log: RateLimitedLog) -> None:
    server = await serve(HttpLimits(max_connections_per_address=3, idle_timeout_s=60, header_timeout_s=60))
    try:
        held = [await asyncio.open_connection(HOST, server.port) for _ in range(3)]
        await wait_until(lambda: server.stats.open_connections == 3)
        reader, writer = await asyncio.open_connection(HOST, server.port)
        assert_json_error(parse_answer(await closed_by_server(reader)), 429)
        writer.close()
        assert server.stats.connections_refused == 1
        held[0][1].close()  # one slot frees up
        await wait_until(lambda: server.stats.open_connections == 2)
        answer = await exchange(server.port, get(b"/slow"))
        assert answer.status == 200 and answer.json() == {"status": "ok"}
        for _, w in held[1:]:
            w.close()
    finally:
        await server.stop()
