"""A real forwarder for the ingest hardening tests: started, fed lines over real TCP, read back over HTTP.

The way senders and subscribers do; the ``fwd`` fixture (this folder's ``conftest.py``) is one with a
declared ``EVENTS`` schema.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pan.ingest.server import send_lines
from pan.repository.server import RepositoryServer
from pan.worker.worker import Worker
from tests.conftest import WorkerGroup, forwarder, get_json, make_workflow
from tests.support import prometheus

EVENTS_SCHEMA = {"fields": {"event": "str", "n": {"type": "int", "required": False}}}


async def start_forwarder(repository: RepositoryServer, workers: WorkerGroup, **extra: Any) -> Worker:
    spec = forwarder("F", ["SENSOR4", "SENSOR8", "INTERRUPTIONS", "EVENTS"], **extra)
    (started,) = await workers.start(make_workflow(repository.port, [spec]))
    return started


def counters(worker: Worker) -> dict[str, Any]:
    return worker.component.counters()


def held(worker: Worker, stream: str) -> list[bytes]:
    return worker.outputs[stream].buffer.read(-1, oldest=100_000).items


async def send(worker: Worker, lines: list[bytes]) -> None:
    assert worker.spec.params["ingest_port"] is not None
    await send_lines("127.0.0.1", worker.spec.params["ingest_port"], lines)


async def connect(worker: Worker) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    async with asyncio.timeout(10):
        return await asyncio.open_connection("127.0.0.1", worker.spec.params["ingest_port"])


async def data_page(worker: Worker, stream: str, after: int = -1) -> dict[str, Any]:
    """`/data` over HTTP, decoded the way every subscriber decodes it."""
    status, body = await get_json(f"http://127.0.0.1:{worker.server.port}/data", s=stream, i=after)
    assert status == 200 and isinstance(body, dict), body
    return body


def json_row(stream: str, **fields: Any) -> bytes:
    """A JSON line; the standard library writes integers of any size, as a hostile sender can."""
    return json.dumps({"stream": stream, **fields}, separators=(",", ":")).encode()


def assert_prometheus_text(text: str) -> None:
    """Prometheus's own parser accepts it, and no metric name carries a stream (streams are labels)."""
    for sample in prometheus.samples(text):
        assert "SENSOR" not in sample.name, sample
