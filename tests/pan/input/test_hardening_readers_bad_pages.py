"""Readers that no bad page can stop (issue 10, finding 2, readers' half): an undecodable page is reported
with the publisher's address and failed over, never retried silently."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import aiohttp
import pytest

from pan.input.subscriber import StreamSubscriber
from pan.repository.server import RepositoryServer
from tests.conftest import HOST, WorkerGroup, forwarder, get_json, make_workflow, repeater, wait_until
from tests.pan.input.publishers import append, page, serving
from tests.support import prometheus

POISON = b'{"i":0,"ts":1,"x":' + b"9" * 400 + b"}"


@pytest.mark.parametrize(
    "body",
    [
        page(POISON),  # "number is infinity when parsed as double"
        page(b'{"ts":1}'),  # a tuple without an index
        page(b'{"i":"0","ts":1}'),  # an index that is not an integer
        page(b"[1,2]"),  # a tuple that is not an object
        b'{"status":"ok","tuples":{"i":0},"last":0}',  # tuples that are not a list
        b"not json at all",
    ],
    ids=["400-digits", "no-index", "string-index", "not-an-object", "tuples-not-a-list", "not-json"],
)
async def test_a_bad_page_is_reported_with_the_publishers_address_and_failed_over(
    body: bytes, repository: RepositoryServer, workers: WorkerGroup, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pan.input.subscriber")
    wf = make_workflow(repository.port, [forwarder("F", ["S"])])
    async with serving(body) as poisoned:
        status, _ = await get_json(f"http://{HOST}:{repository.port}/publish", s="S", h=HOST, p=poisoned.port)
        assert status == 200
        async with StreamSubscriber(
            "S", (HOST, repository.port), max_wait_ms=100, retry_backoff_s=(0.01, 0.05)
        ) as sub:
            got: list[dict[str, Any]] = []

            async def consume() -> None:
                async for batch in sub.batches():
                    got.extend(batch)

            task = asyncio.create_task(consume())
            try:
                await wait_until(lambda: sub.stats.decode_errors >= 3 or task.done())
                assert not task.done(), "the subscriber gave up instead of failing over"
                # Every request the bad publisher saw is accounted for: no silent retry loop.
                assert sub.stats.decode_errors <= len(poisoned.requests) <= sub.stats.decode_errors + 1  # +1 in flight
                (producer,) = await workers.start(wf)  # a good publisher of the same stream appears
                append(producer, "S", 20)
                await wait_until(lambda: len(got) >= 20 or task.done(), timeout_s=20)
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    assert [t["i"] for t in got] == list(range(20))
    assert sub.stats.failovers >= sub.stats.decode_errors >= 3
    warnings = [r.getMessage() for r in caplog.records if "cannot be used" in r.getMessage()]
    assert warnings and all(f"{HOST}:{poisoned.port}" in w for w in warnings)
    assert len(warnings) < sub.stats.decode_errors  # rate-limited: one line, the rest counted


async def test_a_workers_pull_shows_undecodable_pages_in_streams_and_metrics(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """An operator sees a poisoned upstream on the pulling worker, not only in its log."""
    async with serving(page(POISON)) as poisoned:
        status, _ = await get_json(f"http://{HOST}:{repository.port}/publish", s="S", h=HOST, p=poisoned.port)
        assert status == 200
        wf = make_workflow(repository.port, [forwarder("F", ["S"]), repeater("R", ["S"], 1)])
        (rep,) = await workers.start(wf, names=["R"])  # the poisoned publisher is S's only one
        url = f"http://{HOST}:{rep.server.port}"

        async def decode_errors() -> int:
            _, info = await get_json(f"{url}/streams")
            return info["inputs"]["S"]["decode_errors"]

        await wait_until(lambda: decode_errors(), timeout_s=30)
        async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
            text = await response.text()
        assert prometheus.value(text, "pan_input_decode_errors_total", input="S") >= 1
