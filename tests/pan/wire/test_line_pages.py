"""Line pages: `/data` and ``POST /pages`` answers as the publisher's own tuple bytes, one per line.

A reader of encoded tuples (``StreamSubscriber(encoded=True)``, the replay's
recorder) must get, byte for byte, what a JSON reader gets decoded: the same
tuples, indices, ``missed`` and gaps, over `/data`, over ``POST /pages``, in
process, and from an older publisher that only answers JSON.
"""

from __future__ import annotations

import asyncio
import io
import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from pan.input.fetcher import PageFetcher
from pan.input.local import LocalPublishers
from pan.input.page_batches import PageBatcher
from pan.input.subscriber import StreamSubscriber
from pan.repository.client import BadAnswer, Source
from pan.repository.server import RepositoryServer
from pan.wire import line_pages
from pan.wire.line_pages import LINES_TYPE, PageFormatError
from pan.worker.worker import Worker
from tests.conftest import HOST, WorkerGroup, data_server, forwarder, make_workflow, wait_until

TIMEOUT = aiohttp.ClientTimeout(total=60)


def rows(start: int, count: int) -> list[dict[str, Any]]:
    """Tuples with floats, nulls, nesting and text that needs escaping (a newline inside a string)."""
    return [{"ts": 10**16 + n, "x": n / 3, "who": f"A{n}\n\"q\"", "deep": [n, None, {"k": n % 2 == 0}]}
            for n in range(start, start + count)]


@pytest.fixture
async def producer(repository: RepositoryServer, workers: WorkerGroup) -> Worker:
    (started,) = await workers.start(make_workflow(repository.port, [forwarder("F", ["S", "T"], buffer_size=40)]))
    return started


def append(worker: Worker, stream: str, items: list[dict[str, Any]], at: int | None = None) -> None:
    """Append ``items``; ``at``: the first gets that index (the skipped ones become holes)."""
    for n, item in enumerate(items):
        worker.outputs[stream].append(item, None if n or at is None else at)


async def get(worker: Worker, accept: str | None, **params: Any) -> tuple[aiohttp.ClientResponse, bytes]:
    headers = {} if accept is None else {"Accept": accept}
    async with aiohttp.ClientSession() as session, session.get(
        f"http://{HOST}:{worker.server.port}/data", params={k: str(v) for k, v in params.items()}, headers=headers,
        timeout=TIMEOUT,
    ) as response:
        return response, await response.read()


# --- the format --------------------------------------------------------------------


def test_a_page_without_holes_names_its_first_index_and_one_with_holes_every_index() -> None:
    items = [b'{"i":4}', b'{"i":5}']
    body = line_pages.render(b'"first":0,"last":5,"missed":0,"meta":{}', items, [4, 5])
    assert body.startswith(b'{"status":"ok","count":2,"bytes":16,"start":4,') and body.endswith(b'\n{"i":4}\n{"i":5}\n')
    (page,) = line_pages.decode(body)
    assert page["tuples"] == items and list(page["indices"]) == [4, 5] and "start" not in page and page["last"] == 5
    assert page["tuples"].body == b'{"i":4}\n{"i":5}\n' and "bytes" not in page  # one slice, split on a look
    holes = line_pages.render(b'"last":9', [b"{}", b"{}"], [2, 9])
    assert b'"indices":[2,9]' in holes and line_pages.decode(holes)[0]["indices"] == [2, 9]
    empty = line_pages.render(b'"last":-1', [], [])
    assert empty.count(b"\n") == 1 and line_pages.decode(empty)[0]["tuples"] == []


@pytest.mark.parametrize(("body", "why"), [
    (b'{"status":"ok","count":0}', "newline"),
    (b"not json\n", "undecodable"),
    (b"[1]\n", "not a JSON object"),
    (b'{"status":"ok","count":3,"start":0}\n{}\n{}\n', "'count'"),
    (b'{"status":"ok","count":-1}\n', "'count'"),
    (b'{"status":"ok","count":1,"start":0}\n\n', "empty tuple"),
    (b'{"status":"ok","count":1}\n{}\n', "'start'"),
    (b'{"status":"ok","count":2,"indices":[3,3]}\n{}\n{}\n', "increasing"),
    (b'{"status":"ok","count":2,"indices":[3]}\n{}\n{}\n', "increasing"),
    (b'{"status":"ok","count":1,"indices":["3"]}\n{}\n', "increasing"),
    (b'{"status":"error","count":1}\n{}\n', "error page"),
    (b'{"status":"ok","count":0}\n{"status":"ok","count":0}\n', "expected 1"),
    (b'{"status":"ok","count":2,"bytes":3,"start":0}\n{}\n{}\n', "'bytes' 3"),
    (b'{"status":"ok","count":2,"bytes":5,"start":0}\n{}\n{}\n', "'bytes' 5"),
    (b'{"status":"ok","count":2,"bytes":7,"start":0}\n{}\n{}\n', "'bytes' 7"),
    (b'{"status":"ok","count":1,"bytes":-1,"start":0}\n{}\n', "'bytes' -1"),
    (b'{"status":"ok","count":1,"bytes":"3","start":0}\n{}\n', "'bytes' '3'"),
])
def test_a_malformed_line_page_is_named(body: bytes, why: str) -> None:
    with pytest.raises(PageFormatError, match=why):
        line_pages.decode(body)


def test_pages_read_from_the_chunks_they_arrived_in_are_the_pages_of_the_whole_body() -> None:
    """An answer is decoded from its chunks as they came off the socket, cut anywhere (inside a header, a tuple,
    right after a newline): the same pages, and each page's tuples written out are the bytes of its lines."""
    rnd = random.Random(5)
    pages = [[b'{"i":%d,"x":"%s"}' % (i, b"y" * rnd.randint(0, 90)) for i in range(start, start + n)]
             for start, n in ((0, 40), (40, 0), (40, 1), (41, 300))]
    body = b"".join(line_pages.render(b'"last":%d' % (i * 100), items, list(range(100 * i, 100 * i + len(items))))
                    for i, items in enumerate(pages))
    whole = line_pages.decode(body, len(pages))
    newlines = [at for at, byte in enumerate(body) if byte == ord("\n")]
    at_newlines = [newlines, [at + 1 for at in newlines[:-1]]]  # chunks that start with a newline, or after one
    for cuts in [*at_newlines, *(sorted(rnd.sample(range(1, len(body)), rnd.randint(1, 40))) for _ in range(30))]:
        chunks = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
        decoded = line_pages.decode(chunks, len(pages))
        for got, want, items in zip(decoded, whole, pages, strict=True):
            assert got == want and list(got["tuples"]) == items
            out = io.BytesIO()
            line_pages.write(out, got["tuples"], encoded=True)
            assert out.getvalue() == b"".join(item + b"\n" for item in items)
    short = line_pages.render(b'"last":1', [b'{"a":1}', b'{"b":22}'], [0, 1]).replace(b'"bytes":17', b'"bytes":16')
    with pytest.raises(PageFormatError, match="'bytes' 16"):  # the header names a byte fewer than follow
        line_pages.decode([short[:20], short[20:60], short[60:]])


def test_a_page_of_an_older_publisher_without_bytes_is_split_and_read_the_same() -> None:
    items = [b'{"i":4,"x":"a"}', b'{"i":5}']
    body = line_pages.render(b'"last":5', items, [4, 5]) + line_pages.render(b'"last":9', [b'{"i":9}'], [9])
    older = body.replace(b'"bytes":24,', b"").replace(b'"bytes":8,', b"")
    assert b'"bytes"' not in older
    for pages in (line_pages.decode(body, 2), line_pages.decode(older, 2)):
        assert [list(p["tuples"]) for p in pages] == [items, [b'{"i":9}']]
        assert [list(p["indices"]) for p in pages] == [[4, 5], [9]]
    assert type(line_pages.decode(older, 2)[0]["tuples"]) is list


# --- one worker ---------------------------------------------------------------------


async def test_each_line_is_the_tuple_a_json_page_carries(producer: Worker) -> None:
    append(producer, "S", rows(0, 55))  # buffer 40: 0..14 are gone
    plain, plain_body = await get(producer, None, s="S", i=3, n=30)
    lines, lines_body = await get(producer, LINES_TYPE, s="S", i=3, n=30)
    assert plain.status == lines.status == 200
    assert lines.content_type == LINES_TYPE and lines.headers["Vary"] == "Accept"
    expected = orjson.loads(plain_body)
    (page,) = line_pages.decode(lines_body)
    assert [orjson.loads(t) for t in page.pop("tuples")] == expected.pop("tuples")
    assert page.pop("indices") == range(15, 45) and page.pop("count") == 30
    assert page == expected and page["missed"] == 11


async def test_holes_are_listed_and_an_unknown_stream_is_a_json_error(producer: Worker) -> None:
    append(producer, "S", rows(0, 2))
    append(producer, "S", rows(2, 2), at=7)  # 2..6 are holes
    _, body = await get(producer, LINES_TYPE, s="S")
    (page,) = line_pages.decode(body)
    assert page["indices"] == [0, 1, 7, 8] and page["missed"] == 5
    response, body = await get(producer, LINES_TYPE, s="NOPE")
    assert response.status == 404 and response.content_type == "application/json"


@pytest.mark.parametrize("accept", [f"{LINES_TYPE};q=0", "application/*", f"application/json, {LINES_TYPE};q=0.5"])
async def test_line_pages_only_when_preferred(producer: Worker, accept: str) -> None:
    append(producer, "S", rows(0, 3))
    response, body = await get(producer, accept, s="S")
    assert response.status == 200 and response.content_type == "application/json"
    assert len(orjson.loads(body)["tuples"]) == 3


async def test_post_pages_answers_line_pages_in_query_order_with_errors_in_place(producer: Worker) -> None:
    append(producer, "S", rows(0, 5))
    append(producer, "T", rows(0, 2))
    queries = ["s=S&i=1&n=2", "s=NOPE", "s=T", "s=S&i=x"]
    async with aiohttp.ClientSession() as session:
        async def post(accept: str) -> tuple[str, bytes]:
            async with session.post(f"http://{HOST}:{producer.server.port}/pages", headers={"Accept": accept},
                                    data=orjson.dumps({"pages": queries}), timeout=TIMEOUT) as response:
                assert response.status == 200
                return response.content_type, await response.read()

        (json_type, json_body), (lines_type, lines_body) = await post("application/json"), await post(LINES_TYPE)
    assert json_type == "application/json" and lines_type == LINES_TYPE
    expected = orjson.loads(json_body)["pages"]
    pages = line_pages.decode(lines_body, len(queries))
    for page, want in zip(pages, expected, strict=True):
        if want["status"] == "ok":
            assert [orjson.loads(t) for t in page.pop("tuples")] == want.pop("tuples")
            page.pop("indices"), page.pop("count")
        assert page == want
    assert [p["status"] for p in pages] == ["ok", "error", "ok", "error"] and pages[1]["code"] == 404


# --- readers ------------------------------------------------------------------------


async def read(sub: StreamSubscriber, until_index: int, out: list[Any]) -> None:
    """Collect batches until a tuple with index ``until_index`` or beyond (markers included)."""
    async for batch in sub.batches():
        out.extend(batch)
        last = out[-1] if isinstance(out[-1], dict) else orjson.loads(out[-1])
        if last.get("i", -1) >= until_index:
            return


@pytest.mark.parametrize("transport", ["data", "pages"])
async def test_an_encoded_reader_gets_the_bytes_of_what_a_decoding_reader_gets(
    repository: RepositoryServer, producer: Worker, transport: str
) -> None:
    append(producer, "S", rows(0, 100))  # buffer 40: both miss the first 60
    got: dict[bool, list[Any]] = {False: [], True: []}
    async with aiohttp.ClientSession() as session:
        batchers = {encoded: PageBatcher(session, request_timeout_s=30, lines=encoded) for encoded in got}
        readers = {
            encoded: StreamSubscriber("S", (HOST, repository.port), page_size=7, max_wait_ms=500, gaps=True,
                                      encoded=encoded, session=session,
                                      batcher=batchers[encoded] if transport == "pages" else None)
            for encoded in got
        }

        async def feed() -> None:
            for start in range(100, 300, 20):
                await wait_until(lambda start=start: all(v and _index(v[-1]) >= start - 1 for v in got.values()), 60)
                append(producer, "S", rows(start, 20))

        try:
            await asyncio.wait_for(asyncio.gather(feed(), *(read(sub, 299, got[e]) for e, sub in readers.items())),
                                   120)
        finally:
            for batcher in batchers.values():
                await batcher.close()
    assert all(type(line) is bytes for line in got[True])
    assert [orjson.loads(line) for line in got[True]] == got[False]
    assert got[False][0] == {"gap": {"from": 0, "to": 59}} and [t["i"] for t in got[False][1:]] == list(range(60, 300))
    assert readers[True].stats.missed == readers[False].stats.missed == 60
    if transport == "pages":
        assert batchers[True].requests > 0 and batchers[False].requests > 0


def _index(item: Any) -> int:
    decoded = item if isinstance(item, dict) else orjson.loads(item)
    return int(decoded.get("i", -1))


async def test_an_encoded_reader_in_process_gets_the_same_bytes(producer: Worker) -> None:
    append(producer, "S", rows(0, 10))
    append(producer, "S", rows(10, 3), at=20)
    local = LocalPublishers()
    local.register(HOST, producer.server.port, producer.api.serve_data)
    source = Source(HOST, producer.server.port, False, 0)
    pages = {}
    async with aiohttp.ClientSession() as session:
        for encoded in (False, True):
            fetcher = PageFetcher("S", page_size=100, max_wait_ms=0, request_timeout_s=10, local=local,
                                  wake_on_meta=False, hold=None, encoded=encoded)
            assert fetcher.is_local(source)
            pages[encoded] = await fetcher.get(session, source, 5)
    assert [orjson.loads(t) for t in pages[True]["tuples"]] == pages[False]["tuples"]
    assert pages[True]["indices"] == [6, 7, 8, 9, 20, 21, 22] == [t["i"] for t in pages[False]["tuples"]]


@pytest.fixture
async def older_peer(producer: Worker) -> AsyncIterator[tuple[int, bytes, list[str | None]]]:
    """A publisher that only answers JSON `/data` (an older peer): it ignores ``Accept`` and has no ``/pages``."""
    append(producer, "S", rows(0, 30))
    _, recorded = await get(producer, None, s="S", i=4, n=100)
    seen: list[str | None] = []

    async def data(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Accept"))
        return web.Response(body=recorded, content_type="application/json")

    async with data_server(data) as port:
        yield port, recorded, seen


@pytest.mark.parametrize("batched", [False, True])
async def test_an_encoded_reader_reads_an_older_json_only_peer(
    older_peer: tuple[int, bytes, list[str | None]], batched: bool
) -> None:
    port, recorded, seen = older_peer
    async with aiohttp.ClientSession() as session:
        batcher = PageBatcher(session, request_timeout_s=10, lines=True) if batched else None
        fetcher = PageFetcher("S", page_size=100, max_wait_ms=0, request_timeout_s=10, local=None,
                              wake_on_meta=False, hold=None, encoded=True, batcher=batcher)
        page = await fetcher.get(session, Source(HOST, port, False, 0), 4)
        if batcher is not None:
            assert batcher.unsupported == {f"{HOST}:{port}"}
            await batcher.close()
    expected = orjson.loads(recorded)["tuples"]
    assert page["tuples"] == [orjson.dumps(t) for t in expected] and page["indices"] == list(range(5, 30))
    assert seen == [line_pages.ACCEPT]


async def test_a_bad_line_page_fails_the_publisher_over_not_the_reader(producer: Worker) -> None:
    """A publisher answering a malformed line page is a bad answer (the subscriber fails over), not a crash."""
    bodies = [b'{"status":"ok","count":2,"start":0,"last":1}\n{"i":0}\n', b"garbage\n"]

    async def data(request: web.Request) -> web.Response:
        return web.Response(body=bodies.pop(0), content_type=LINES_TYPE)

    async with data_server(data) as port, aiohttp.ClientSession() as session:
        fetcher = PageFetcher("S", page_size=100, max_wait_ms=0, request_timeout_s=10, local=None,
                              wake_on_meta=False, hold=None, encoded=True)
        for why in ("'count'", "undecodable"):
            with pytest.raises(BadAnswer, match=why):
                await fetcher.get(session, Source(HOST, port, False, 0), -1)


async def test_an_encoded_reader_needs_a_batcher_of_line_pages() -> None:
    async with aiohttp.ClientSession() as session:
        for encoded, lines in ((True, False), (False, True)):
            with pytest.raises(ValueError, match="batcher of line pages"):
                PageFetcher("S", page_size=1, max_wait_ms=0, request_timeout_s=1, local=None, wake_on_meta=False,
                            hold=None, encoded=encoded, batcher=PageBatcher(session, request_timeout_s=1, lines=lines))
