"""Publishers for the readers' hardening tests: real workers filled in one go and asked over HTTP, and fake
ones (a real aiohttp server) that answer every request with one fixed body."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

from pan.http.server import HttpServer
from pan.worker.worker import Worker
from tests.conftest import HOST, get_json


def append(worker: Worker, stream: str, count: int) -> None:
    """``count`` tuples in one synchronous go: nothing else runs on this event loop meanwhile."""
    out = worker.outputs[stream]
    for _ in range(count):
        out.append({"ts": 10 * out.buffer.next_index})


async def answer(url: str, **params: Any) -> dict[str, Any] | None:
    """A worker's JSON answer, or None if it does not answer (in time)."""
    try:
        status, body = await get_json(url, **params)
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None
    return body if status == 200 else None


class FakePublisher:
    """A real aiohttp server answering `/data` with a fixed body, counting every request by path."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.requests: list[str] = []
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.server = HttpServer(app, HOST, 0)

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        return web.Response(body=self.body, content_type="application/json")

    @property
    def port(self) -> int:
        return self.server.port


@contextlib.asynccontextmanager
async def serving(body: bytes) -> AsyncIterator[FakePublisher]:
    publisher = FakePublisher(body)
    await publisher.server.start()
    try:
        yield publisher
    finally:
        await publisher.server.stop()


def page(tuples_json: bytes, last: int = 0) -> bytes:
    head = b'{"status":"ok","stream":"S","tuples":['
    return head + tuples_json + b'],"first":0,"last":%d,"missed":0,"meta":{}}' % last
