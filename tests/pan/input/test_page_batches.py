"""``POST /pages`` (many streams' `/data` pages in one answer) and the ``PageBatcher`` that uses it."""

from __future__ import annotations

import asyncio
import random
import string
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson
import pytest
from aiohttp import web

from pan.http.addresses import free_port
from pan.input import page_batches
from pan.input.fetcher import PageFetcher
from pan.input.local import LocalPublishers
from pan.input.page_batches import PageBatcher
from pan.input.subscriber import StreamSubscriber
from pan.repository.client import Source
from pan.repository.server import RepositoryServer
from pan.wire.data_query import MAX_PAGES
from pan.wire.progress import END_OF_STREAM, StreamProgress
from pan.worker.worker import Worker
from pan.workflow.parser import WorkflowError, parse_workflow
from tests.conftest import (
    HOST,
    WorkerGroup,
    data_server,
    forwarder,
    get_json,
    make_workflow,
    repeater,
    wait_until,
    workflow_dict,
)

STREAMS = [f"S{n}" for n in range(12)]


@pytest.fixture
async def worker(repository: RepositoryServer, workers: WorkerGroup) -> Worker:
    (started,) = await workers.start(make_workflow(repository.port, [forwarder("F", STREAMS, buffer_size=1000)]))
    return started


def fill(worker: Worker, stream: str, count: int) -> None:
    for n in range(count):
        worker.outputs[stream].append({"ts": 1000 + n, "k": n})


async def post_pages(worker: Worker, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    async with aiohttp.ClientSession() as session, session.post(
        f"http://{HOST}:{worker.server.port}/pages", data=data, timeout=aiohttp.ClientTimeout(total=60)
    ) as response:
        return response.status, orjson.loads(await response.read())


async def test_each_page_is_what_data_answers_for_its_query(worker: Worker) -> None:
    fill(worker, "S0", 5)
    fill(worker, "S1", 2)
    queries = [{"s": "S0", "i": 1, "n": 2}, {"s": "S1"}, {"s": "S0", "l": 1}, {"s": "S2", "i": -1}]
    status, answer = await post_pages(
        worker, {"pages": ["&".join(f"{k}={v}" for k, v in q.items()) for q in queries]})
    assert status == 200 and answer["status"] == "ok"
    expected = [(await get_json(f"http://{HOST}:{worker.server.port}/data", **q))[1] for q in queries]
    assert answer["pages"] == expected
    assert [t["i"] for t in answer["pages"][0]["tuples"]] == [2, 3]


async def test_a_page_data_would_refuse_is_an_error_in_its_place(worker: Worker) -> None:
    fill(worker, "S0", 1)
    status, answer = await post_pages(worker, {"pages": ["s=S0", "s=NOPE", "s=S0&i=x", "s=S0&w=5", "i=3", "s=S0&l=1"]})
    assert status == 200
    pages = answer["pages"]
    assert [p["status"] for p in pages] == ["ok", "error", "error", "error", "error", "ok"]
    assert [p.get("code") for p in pages[1:5]] == [404, 400, 400, 400]
    assert "NOPE" in pages[1]["error"] and "'i'" in pages[2]["error"] and "'s'" in pages[4]["error"]


@pytest.mark.parametrize("body", [
    b"not json",
    b"[1, 2]",
    {"pages": "s=S0"},
    {"pages": [1]},
    {"pages": ["s=S0"], "w": True},
    {"pages": ["s=S0"], "w": -1},
    {"pages": ["s=S0"], "w": 10**9},
    {"pages": ["s=S0"], "m": "yes"},
    {"pages": ["s=S0"] * (MAX_PAGES + 1)},
])
async def test_a_bad_body_is_refused_and_the_worker_goes_on(worker: Worker, body: Any) -> None:
    status, answer = await post_pages(worker, body)
    assert status == 400 and answer["status"] == "error" and answer["error"]
    fill(worker, "S0", 1)
    assert (await post_pages(worker, {"pages": ["s=S0"]}))[1]["pages"][0]["last"] == 0


async def test_a_long_poll_over_many_streams_ends_when_one_of_them_gets_data(worker: Worker) -> None:
    asyncio.get_running_loop().call_later(0.2, fill, worker, "S7", 1)
    started = time.monotonic()
    status, answer = await post_pages(worker, {"pages": [f"s={s}" for s in STREAMS], "w": 30_000})
    assert status == 200
    assert [len(p["tuples"]) for p in answer["pages"]] == [1 if s == "S7" else 0 for s in STREAMS]
    assert time.monotonic() - started < 20  # it ended on the data, not after the 30 s wait


# --- the batcher -----------------------------------------------------------------------


async def read_all(stream: str, repository: RepositoryServer, session: aiohttp.ClientSession,
                   batcher: PageBatcher | None, count: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    subscriber = StreamSubscriber(stream, (HOST, repository.port), page_size=7, max_wait_ms=200, session=session,
                                  batcher=batcher, wire="json")
    async with subscriber:
        async with asyncio.timeout(60):
            async for batch in subscriber.batches():
                got.extend(batch)
                if len(got) >= count:
                    return got
    return got


@pytest.mark.parametrize("one_out", [False, True], ids=["per-round", "one-request-out"])
async def test_subscribers_sharing_a_batcher_read_what_they_would_alone_in_fewer_requests(
    worker: Worker, repository: RepositoryServer, one_out: bool
) -> None:
    for n, stream in enumerate(STREAMS):
        fill(worker, stream, 30 + n)
    async with aiohttp.ClientSession() as session:
        alone = [await read_all(s, repository, session, None, 30 + n) for n, s in enumerate(STREAMS)]
        batcher = PageBatcher(session, request_timeout_s=10, one_request_out=one_out)
        try:
            together = await asyncio.gather(
                *(read_all(s, repository, session, batcher, 30 + n) for n, s in enumerate(STREAMS)))
        finally:
            await batcher.close()
    assert together == alone
    assert batcher.pages >= sum(-(-(30 + n) // 7) for n in range(len(STREAMS)))  # every page went in a batch
    assert batcher.requests * 3 <= batcher.pages  # and they shared requests


@pytest.mark.parametrize("one_out", [False, True], ids=["per-round", "one-request-out"])
async def test_no_request_carries_more_pages_than_a_publisher_takes(
    worker: Worker, repository: RepositoryServer, monkeypatch: pytest.MonkeyPatch, one_out: bool
) -> None:
    monkeypatch.setattr(page_batches, "PAGES_PER_REQUEST", 5)
    sizes: list[int] = []
    send = PageBatcher._send

    async def counted(self: PageBatcher, source: Source, pending: page_batches.Pending) -> None:
        sizes.append(len(pending))
        await send(self, source, pending)

    monkeypatch.setattr(PageBatcher, "_send", counted)
    for stream in STREAMS:
        fill(worker, stream, 10)
    async with aiohttp.ClientSession() as session:
        batcher = PageBatcher(session, request_timeout_s=10, one_request_out=one_out)
        try:
            got = await asyncio.gather(*(read_all(s, repository, session, batcher, 10) for s in STREAMS))
        finally:
            await batcher.close()
    assert [[t["k"] for t in tuples] for tuples in got] == [list(range(10))] * len(STREAMS)
    assert sum(sizes) >= len(STREAMS) and max(sizes) <= 5


def long_poll(batcher: PageBatcher, source: Source, stream: str) -> asyncio.Task[dict[str, Any] | None]:
    """A page of ``stream`` from its start, waiting up to a minute for data."""
    return asyncio.create_task(batcher.page(source, {"s": stream, "i": "-1", "w": "60000"}))


async def quiet_long_poll_out(batcher: PageBatcher, source: Source) -> asyncio.Task[dict[str, Any] | None]:
    """A long poll on the empty stream S0, once its request is out."""
    task = long_poll(batcher, source, "S0")
    await wait_until(lambda: batcher.requests == 1)
    return task


def unsent_pages(batcher: PageBatcher, source: Source) -> int:
    return sum(len(pending) for (endpoint, _), unsent in batcher._unsent.items() if endpoint == source.endpoint
               for pending in unsent)


async def test_a_page_never_waits_for_a_long_poll_already_out(worker: Worker) -> None:
    """A quiet stream's long poll must not hold back a busy stream of the same publisher: with one request
    in flight per publisher, the busy page waited for the quiet one's full wait, and K notices came late."""
    fill(worker, "S1", 3)
    source = Source(HOST, worker.server.port, rep=False, lvl=0)
    async with aiohttp.ClientSession() as session:
        batcher = PageBatcher(session, request_timeout_s=10)
        try:
            quiet = await quiet_long_poll_out(batcher, source)
            busy = await asyncio.wait_for(long_poll(batcher, source, "S1"), 30)
            assert [t["k"] for t in busy["tuples"]] == [0, 1, 2]
            assert not quiet.done() and batcher.requests == 2
        finally:
            await batcher.close()
    with pytest.raises(ConnectionError):
        await quiet


async def test_with_one_request_out_a_page_waits_for_the_request_out(worker: Worker) -> None:
    fill(worker, "S1", 3)
    source = Source(HOST, worker.server.port, rep=False, lvl=0)
    async with aiohttp.ClientSession() as session:
        batcher = PageBatcher(session, request_timeout_s=10, one_request_out=True)
        try:
            quiet = await quiet_long_poll_out(batcher, source)
            busy = long_poll(batcher, source, "S1")
            await wait_until(lambda: unsent_pages(batcher, source) == 1)
            assert len(batcher._senders) == 1 and not busy.done()  # no second request: it waits
            fill(worker, "S0", 1)  # ends the long poll; the busy page goes in the next request
            quiet_page, busy_page = await asyncio.wait_for(asyncio.gather(quiet, busy), 30)
        finally:
            await batcher.close()
    assert [t["k"] for t in quiet_page["tuples"]] == [0] and [t["k"] for t in busy_page["tuples"]] == [0, 1, 2]
    assert batcher.requests == 2


async def test_with_one_request_out_a_reader_behind_its_publisher_does_not_wait_for_a_long_poll(
    repository: RepositoryServer, worker: Worker
) -> None:
    """A reader that knows its publisher has more asks without a long poll, and such a page does not wait behind
    another stream's long poll: the replay's recorder drained one page per stream per long poll before."""
    fill(worker, "S1", 20)
    source = Source(HOST, worker.server.port, rep=False, lvl=0)
    async with aiohttp.ClientSession() as session:
        batcher = PageBatcher(session, request_timeout_s=10, one_request_out=True)
        busy = StreamSubscriber("S1", (HOST, repository.port), page_size=5, max_wait_ms=60_000, session=session,
                                batcher=batcher)
        try:
            batches = busy.batches()
            got = [t["k"] for t in await asyncio.wait_for(anext(batches), 30)]
            quiet = long_poll(batcher, source, "S0")  # a minute's long poll on the empty S0 is out from now on
            await wait_until(lambda: batcher.requests == 2)
            while len(got) < 20:
                got += [t["k"] for t in await asyncio.wait_for(anext(batches), 30)]
            assert not quiet.done() and batcher.requests == 5  # three pages without a wait, each on its own
        finally:
            await batcher.close()
    assert got == list(range(20))
    with pytest.raises(ConnectionError):
        await quiet


async def test_closing_fails_the_pages_waiting_for_a_request_out(worker: Worker) -> None:
    source = Source(HOST, worker.server.port, rep=False, lvl=0)
    async with aiohttp.ClientSession() as session:
        batcher = PageBatcher(session, request_timeout_s=10, one_request_out=True)
        out = await quiet_long_poll_out(batcher, source)
        waiting = long_poll(batcher, source, "S1")
        await wait_until(lambda: unsent_pages(batcher, source) == 1)
        await batcher.close()
    for task in (out, waiting):
        with pytest.raises(ConnectionError):
            await task


@pytest.fixture
async def old_publisher() -> AsyncIterator[int]:
    """A publisher that only has `/data` (an older peer)."""
    page = {"status": "ok", "stream": "S", "tuples": [{"i": 0, "ts": 5}], "first": 0, "last": 0, "missed": 0,
            "meta": {"epoch": "e"}}

    async def data(_request: web.Request) -> web.Response:
        return web.json_response(page)

    async with data_server(data) as port:
        yield port


async def test_a_publisher_without_pages_is_asked_with_data(old_publisher: int) -> None:
    source = Source(HOST, old_publisher, rep=False, lvl=0)
    async with aiohttp.ClientSession() as session:
        batcher = PageBatcher(session, request_timeout_s=10)
        fetcher = PageFetcher("S", page_size=10, max_wait_ms=0, request_timeout_s=10, local=None,
                              wake_on_meta=False, hold=None, wire="json", batcher=batcher)
        for _ in range(2):
            answer = await fetcher.get(session, source, -1)
            assert answer["tuples"] == [{"i": 0, "ts": 5}]
        await batcher.close()
    assert batcher.unsupported == {source.endpoint} and batcher.requests == 1  # asked once, then remembered


@pytest.mark.parametrize("one_out", [False, True], ids=["per-round", "one-request-out"])
async def test_a_dead_publisher_fails_its_pages_and_the_batcher_goes_on(worker: Worker, one_out: bool) -> None:
    """Nothing listens on the dead port: every page of that request fails (its subscriber fails over), and the
    live publisher is still served through the same batcher."""
    fill(worker, "S1", 2)
    dead = Source(HOST, free_port(), rep=False, lvl=0)
    live = Source(HOST, worker.server.port, rep=False, lvl=0)
    async with aiohttp.ClientSession() as session:
        batcher = PageBatcher(session, request_timeout_s=10, one_request_out=one_out)
        try:
            failed = await asyncio.gather(batcher.page(dead, {"s": "S1", "i": "-1"}),
                                          batcher.page(dead, {"s": "S2", "i": "-1"}), return_exceptions=True)
            page = await batcher.page(live, {"s": "S1", "i": "-1"})
        finally:
            await batcher.close()
    assert all(isinstance(f, (aiohttp.ClientError, OSError)) for f in failed), failed
    assert [t["k"] for t in page["tuples"]] == [0, 1]


async def test_a_closed_batcher_fails_its_waiting_pages(worker: Worker) -> None:
    source = Source(HOST, worker.server.port, rep=False, lvl=0)
    async with aiohttp.ClientSession() as session:
        batcher = PageBatcher(session, request_timeout_s=10)
        waiting = await quiet_long_poll_out(batcher, source)
        await batcher.close()
        with pytest.raises(ConnectionError):
            await waiting


# --- a worker's pulls ------------------------------------------------------------------


def relay_workflow(repo_port: int, pulls: str | None) -> dict[str, Any]:
    data = workflow_dict(repo_port, [forwarder("F", ["S0", "S1", "S2"], buffer_size=1000),
                                     repeater("R", ["S0", "S1", "S2"], 1)])
    if pulls is not None:
        data["pulls"] = pulls
    return data


@pytest.mark.parametrize("pulls", ["batched", "per_stream", None])
async def test_a_worker_pulls_a_publishers_streams_in_one_request_unless_told_not_to(
    repository: RepositoryServer, workers: WorkerGroup, pulls: str | None
) -> None:
    workflow = parse_workflow(relay_workflow(repository.port, pulls))
    assert workflow.pulls == (pulls or "batched")
    source, relay = await workers.start(workflow)  # no shared LocalPublishers: the pulls go over HTTP
    for stream in ("S0", "S1", "S2"):
        fill(source, stream, 40)
    await wait_until(lambda: all(relay.outputs[s].buffer.last == 39 for s in ("S0", "S1", "S2")), timeout_s=60)
    for stream in ("S0", "S1", "S2"):
        page = orjson.loads(relay.outputs[stream].render(-1, oldest=100, latest=None))
        assert [(t["i"], t["k"]) for t in page["tuples"]] == [(n, n) for n in range(40)]
    if pulls != "per_stream":  # the pages asked for in one loop round go together
        await wait_until(lambda: source.api.batch_pages > source.api.batch_requests > 0, timeout_s=60)
    else:
        assert source.api.batch_requests == 0


def test_pulls_must_be_batched_or_per_stream() -> None:
    with pytest.raises(WorkflowError, match="pulls"):
        parse_workflow(relay_workflow(9000, "sometimes"))


async def test_a_long_poll_on_meta_answers_at_once_when_the_watermark_moved_before_it(worker: Worker) -> None:
    """A watermark (here the end) published between a reader's last page and its next long poll wakes no one:
    its poke came before the poll. A reader that says which watermark it knows (``wm``; ``none``: none) gets
    its page at once, over `/data` and `POST /pages`; one that knows the current watermark waits as before.

    Before, such a poll waited its whole ``w``: in a replay the hit detector heard of two player streams' ends
    one long poll (1 s) late, and everything after it waited."""
    fill(worker, "S3", 2)
    data = f"http://{HOST}:{worker.server.port}/data"
    _, page = await get_json(data, s="S3", i=-1)
    assert "wm" not in page["meta"] and page["last"] == 1
    worker.outputs["S3"].publish(StreamProgress(wm=END_OF_STREAM))  # nothing follows it, and nobody waits yet
    started = time.monotonic()
    status, page = await get_json(data, s="S3", i=1, w=60_000, m=1, wm="none")  # (get_json gives up after 10 s)
    assert status == 200 and page["meta"]["wm"] == END_OF_STREAM and page["tuples"] == []
    status, answer = await post_pages(worker, {"pages": ["s=S3&i=1&wm=none", "s=S4&i=-1&wm=none"], "w": 60_000,
                                               "m": True})
    assert status == 200 and answer["pages"][0]["meta"]["wm"] == END_OF_STREAM
    assert time.monotonic() - started < 30  # neither waited for its 60 s

    started = time.monotonic()  # the reader knows the end: nothing new, its long poll waits (no spinning)
    status, page = await get_json(data, s="S3", i=1, w=300, m=1, wm=str(END_OF_STREAM))
    assert status == 200 and page["tuples"] == [] and time.monotonic() - started >= 0.3
    status, page = await get_json(data, s="S3", i=1, wm="soon")
    assert status == 400 and "'wm'" in page["error"]


@pytest.mark.parametrize("in_process", [False, True], ids=["http", "in-process"])
async def test_a_meta_waiting_subscriber_hears_of_an_end_that_came_between_its_polls(
        worker: Worker, repository: RepositoryServer, in_process: bool) -> None:
    """``StreamSubscriber`` with ``wake_on_meta`` (a worker's pull) tells the publisher the watermark it knows,
    over HTTP and in process."""
    fill(worker, "S5", 3)
    local = None
    if in_process:
        local = LocalPublishers()
        local.register(HOST, worker.server.port, worker.api.serve_local)
    subscriber = StreamSubscriber("S5", (HOST, repository.port), max_wait_ms=60_000, wake_on_meta=True, wire="json",
                                  local=local)
    async with subscriber:
        fetched = await asyncio.wait_for(subscriber.fetch(), 30)
        assert len(fetched.tuples) == 3 and subscriber.progress.wm is None
        worker.outputs["S5"].publish(StreamProgress(wm=END_OF_STREAM))
        fetched = await asyncio.wait_for(subscriber.fetch(), 30)  # a minute's long poll without ``wm``
        assert subscriber.progress.ended and not fetched.tuples


def test_a_pages_query_is_written_as_urlencode_writes_it_without_wait_and_wake() -> None:
    """Plain values go as they are (the common case, without ``urlencode``'s quoting of each); any other
    character is quoted exactly as ``urlencode`` quotes it."""
    rnd = random.Random(3)
    plain, other = string.ascii_letters + string.digits + "_.-~", string.printable + "äé€/ &=?#%+"
    for _ in range(5000):
        keys = rnd.sample(["s", "i", "n", "hold", "a", "wm", "view", "g", "w", "m"], rnd.randint(1, 8))
        query = {k: "".join(rnd.choice(other if rnd.random() < 0.3 else plain) for _ in range(rnd.randint(0, 12)))
                 for k in keys}
        assert page_batches._query_text(query) == urlencode({k: v for k, v in query.items() if k not in ("w", "m")})
