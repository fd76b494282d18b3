"""JSON and Arrow `/data` pages side by side on real aiohttp servers (issue 13, item 1).

A JSON reader and an Arrow reader of one stream see the same tuples, indices
and ``missed``; Arrow readers and JSON-only (older) publishers mix in both
directions; any ``Accept`` a reader sends gets a page, never an error.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from pan.http.addresses import free_port
from pan.input.fetcher import PageFetcher, default_wire
from pan.input.subscriber import StreamSubscriber
from pan.repository.client import Source
from pan.repository.server import RepositoryServer
from pan.wire import arrow_pages
from pan.wire.arrow_pages import ARROW_TYPE, decode_page
from pan.worker.worker import Worker
from tests.conftest import HOST, ROOT, WorkerGroup, data_server, forwarder, make_workflow, repeater, wait_until

TIMEOUT = aiohttp.ClientTimeout(total=30)


def rows(start: int, count: int) -> list[dict[str, Any]]:
    """Tuples of varying shape: every third lacks ``v``, every fifth carries a nested value and a null."""
    out: list[dict[str, Any]] = []
    for n in range(start, start + count):
        row: dict[str, Any] = {"ts": 10753295594424116 + n * 1_000_000_007, "x": n * 0.25 - 3.0}
        if n % 3:
            row["v"] = n * 7
        if n % 5 == 0:
            row["cells"] = [n, n / 3, {"k": None}]
            row["note"] = None
        row["who"] = f"A{n % 8}"
        out.append(row)
    return out


def append(worker: Worker, stream: str, items: list[dict[str, Any]]) -> None:
    for item in items:
        worker.outputs[stream].append(item)


async def get_page(worker_port: int, accept: str | None, **params: Any) -> tuple[aiohttp.ClientResponse, bytes]:
    headers = {} if accept is None else {"Accept": accept}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{HOST}:{worker_port}/data", params={k: str(v) for k, v in params.items()},
                    headers=headers, timeout=TIMEOUT) as response,
    ):
        return response, await response.read()


@pytest.fixture
async def producer(repository: RepositoryServer, workers: WorkerGroup) -> Worker:
    (started,) = await workers.start(make_workflow(repository.port, [forwarder("F", ["S"], buffer_size=40)]))
    return started


async def read(sub: StreamSubscriber, until_index: int, out: list[dict[str, Any]]) -> None:
    async for batch in sub.batches():
        out.extend(batch)
        if out and out[-1].get("i", -1) >= until_index:
            return


# --- one worker, both formats ------------------------------------------------------


async def test_json_and_arrow_readers_get_the_same_tuples_indices_and_missed(
    repository: RepositoryServer, producer: Worker
) -> None:
    append(producer, "S", rows(0, 100))  # buffer 40: the first 60 are overwritten, both readers miss them
    readers = {
        wire: StreamSubscriber("S", (HOST, repository.port), page_size=7, max_wait_ms=500, wire=wire)
        for wire in ("json", "arrow")
    }
    got: dict[str, list[dict[str, Any]]] = {"json": [], "arrow": []}

    async def feed() -> None:
        for start in range(100, 400, 20):
            # both readers have everything before this batch, so neither misses more than the first 60
            await wait_until(lambda start=start: all(v and v[-1]["i"] >= start - 1 for v in got.values()), 60)
            append(producer, "S", rows(start, 20))

    async with readers["json"], readers["arrow"]:
        await asyncio.wait_for(
            asyncio.gather(feed(), *(read(sub, 399, got[wire]) for wire, sub in readers.items())), 120
        )
    assert got["arrow"] == got["json"]
    assert [t["i"] for t in got["json"]] == list(range(60, 400))
    assert readers["arrow"].stats.missed == readers["json"].stats.missed == 60
    assert got["json"][-5]["cells"] == [395, 395 / 3, {"k": None}] and "v" not in got["json"][-1]


async def test_plain_get_and_arrow_get_decode_to_the_same_page(producer: Worker) -> None:
    append(producer, "S", rows(0, 55))
    plain, plain_body = await get_page(producer.server.port, None, s="S", i=3, n=30)
    arrow, arrow_body = await get_page(producer.server.port, f"{ARROW_TYPE}, application/json;q=0.5", s="S", i=3, n=30)
    assert plain.status == arrow.status == 200
    assert plain.content_type == "application/json" and arrow.content_type == ARROW_TYPE
    assert plain.headers["Vary"] == arrow.headers["Vary"] == "Accept"
    expected = orjson.loads(plain_body)
    assert expected["missed"] == 11 and len(expected["tuples"]) == 30
    assert decode_page(arrow_body) == expected


@pytest.mark.parametrize(
    "accept",
    [None, "", "garbage", "*/*", f"{ARROW_TYPE};q=0", f"{ARROW_TYPE};q=zero", "text/html,application/xhtml+xml",
     "\u00e9/\u00e9", ";;,,=", "application/*", f"application/json, {ARROW_TYPE};q=0.99"],
)
async def test_any_other_accept_gets_json_with_status_200(producer: Worker, accept: str | None) -> None:
    append(producer, "S", rows(0, 5))
    response, body = await get_page(producer.server.port, accept, s="S")
    assert response.status == 200
    assert response.content_type == "application/json" and response.headers["Vary"] == "Accept"
    assert [t["i"] for t in orjson.loads(body)["tuples"]] == [0, 1, 2, 3, 4]


async def test_errors_stay_json_when_arrow_is_asked_for(producer: Worker) -> None:
    response, body = await get_page(producer.server.port, ARROW_TYPE, s="NOPE")
    assert response.status == 404 and response.content_type == "application/json"
    assert orjson.loads(body)["status"] == "error"


async def test_a_page_that_cannot_be_columnar_is_answered_in_json(producer: Worker) -> None:
    append(producer, "S", [{"ts": 1, "a": 1, "b": 2}, {"ts": 2, "b": 3, "a": 4}])  # two key orders
    response, body = await get_page(producer.server.port, ARROW_TYPE, s="S")
    assert response.status == 200 and response.content_type == "application/json"
    async with aiohttp.ClientSession() as session:
        fetcher = PageFetcher("S", page_size=10, max_wait_ms=0, request_timeout_s=10, local=None,
                              wake_on_meta=False, hold=None, wire="arrow")
        page = await fetcher.get(session, Source(HOST, producer.server.port, False, 0), -1)
    assert page == orjson.loads(body)
    assert [list(t) for t in page["tuples"]] == [["i", "ts", "a", "b"], ["i", "ts", "b", "a"]]


# --- mixed networks ----------------------------------------------------------------


@pytest.fixture
async def older_peer(producer: Worker) -> AsyncIterator[tuple[int, bytes]]:
    """An aiohttp server that ignores ``Accept`` and serves a JSON page recorded from the real worker."""
    append(producer, "S", rows(0, 30))
    _, recorded = await get_page(producer.server.port, None, s="S", i=4, n=100)
    seen: list[str | None] = []

    async def data(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Accept"))
        return web.Response(body=recorded, content_type="application/json")

    async with data_server(data) as port:
        yield port, recorded
    assert seen and all(accept is not None and ARROW_TYPE in accept for accept in seen)


async def test_an_arrow_reader_reads_an_older_json_only_peer(older_peer: tuple[int, bytes]) -> None:
    port, recorded = older_peer
    async with aiohttp.ClientSession() as session:
        fetcher = PageFetcher("S", page_size=100, max_wait_ms=0, request_timeout_s=10, local=None,
                              wake_on_meta=False, hold=None, wire="arrow")
        page = await fetcher.get(session, Source(HOST, port, False, 0), 4)
    assert page == orjson.loads(recorded) and [t["i"] for t in page["tuples"]] == list(range(5, 30))


async def test_arrow_and_json_only_workers_chain_both_ways(repository: RepositoryServer, workers: WorkerGroup) -> None:
    """Forwarder (JSON only) -> repeater level 1 (Arrow) -> repeater level 2 (JSON only): every hop over HTTP."""
    specs = [forwarder("F", ["S"], buffer_size=500), repeater("R1", ["S"], 1), repeater("R2", ["S"], 2)]
    wf = make_workflow(repository.port, specs)
    (source,) = await workers.start(wf, ["F"])
    source.api.arrow = False  # an older peer
    (middle,) = await workers.start(wf, ["R1"])
    (top,) = await workers.start(wf, ["R2"])
    top.api.arrow = False
    assert middle.api.arrow
    append(source, "S", rows(0, 120))
    expected = orjson.loads((await get_page(source.server.port, None, s="S", n=1000))[1])["tuples"]
    for worker in (middle, top):
        await wait_until(lambda w=worker: w.outputs["S"].buffer.last == 119, 60)
    for worker, wire in ((middle, "arrow"), (top, "arrow"), (middle, "json")):
        response, body = await get_page(worker.server.port, "application/json" if wire == "json" else ARROW_TYPE,
                                        s="S", n=1000)
        is_arrow = response.content_type == ARROW_TYPE
        assert is_arrow == (worker is middle and wire == "arrow")
        page = decode_page(body) if is_arrow else orjson.loads(body)
        assert page["tuples"] == expected and page["missed"] == 0


@pytest.mark.process
async def test_pan_subscribe_json_and_arrow_print_the_same_lines(
    repository: RepositoryServer, producer: Worker
) -> None:
    append(producer, "S", rows(0, 45))  # buffer 40: 0..4 are gone
    outputs = []
    for wire in ("json", "arrow"):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "pan", "subscribe", "S", "--repository", f"{HOST}:{repository.port}",
            "--format", wire, "--count", "30", "--page-size", "8", "--wait-ms", "200",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode()[-2000:]
        outputs.append(out)
    assert outputs[0] == outputs[1]
    lines = [orjson.loads(line) for line in outputs[0].splitlines()]
    assert lines[0] == {"gap": {"from": 0, "to": 4}} and [t["i"] for t in lines[1:]] == list(range(5, 35))


# --- without pyarrow ---------------------------------------------------------------


@pytest.fixture
def no_pyarrow(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as if pyarrow were not installed (``import pyarrow`` raises ImportError)."""
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    arrow_pages.available.cache_clear()
    yield
    arrow_pages.available.cache_clear()


async def test_without_pyarrow_workers_answer_json_and_readers_ask_for_json(
    no_pyarrow: None, repository: RepositoryServer, workers: WorkerGroup
) -> None:
    assert not arrow_pages.available()
    (worker,) = await workers.start(make_workflow(repository.port, [forwarder("F", ["S"])]))
    assert not worker.api.arrow
    append(worker, "S", rows(0, 10))
    response, body = await get_page(worker.server.port, ARROW_TYPE, s="S")
    assert response.status == 200 and response.content_type == "application/json"
    async with StreamSubscriber("S", (HOST, repository.port), max_wait_ms=200) as sub:
        assert sub.fetcher.wire == "json"
        got: list[dict[str, Any]] = []
        await asyncio.wait_for(read(sub, 9, got), 60)
    assert got == orjson.loads(body)["tuples"]
    with pytest.raises(ValueError, match="pyarrow"):
        PageFetcher("S", page_size=10, max_wait_ms=0, request_timeout_s=10, local=None, wake_on_meta=False,
                    hold=None, wire="arrow")


@pytest.mark.process
async def test_pan_subscribe_format_arrow_without_pyarrow_is_a_clear_error() -> None:
    blocked = "import sys; sys.modules['pyarrow'] = None; from pan.cli import main; sys.exit(main())"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", blocked, "subscribe", "S", "--repository", f"{HOST}:{free_port()}", "--format", "arrow",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2 and b"needs pyarrow" in err and b"Traceback" not in err


@pytest.mark.parametrize(("env", "serves", "asks"), [(None, True, "json"), ("arrow", True, "arrow"),
                                                     ("json", False, "json"), (" ARROW ", True, "arrow"),
                                                     ("auto", True, "json")])
def test_pan_wire_chooses_what_servers_offer_and_subscribers_ask_for(
    monkeypatch: pytest.MonkeyPatch, env: str | None, serves: bool, asks: str
) -> None:
    if env is None:
        monkeypatch.delenv(arrow_pages.WIRE_ENV, raising=False)
    else:
        monkeypatch.setenv(arrow_pages.WIRE_ENV, env)
    assert arrow_pages.enabled() == serves and default_wire() == asks


@pytest.mark.parametrize(("env", "problem"), [(None, None), ("json", None), (" Arrow ", None),
                                              ("arow", "is not one of json, auto, arrow"), ("binary", "is not one of")])
def test_a_mistyped_pan_wire_is_named_not_taken_for_json(
    monkeypatch: pytest.MonkeyPatch, env: str | None, problem: str | None
) -> None:
    if env is None:
        monkeypatch.delenv(arrow_pages.WIRE_ENV, raising=False)
    else:
        monkeypatch.setenv(arrow_pages.WIRE_ENV, env)
    found = arrow_pages.wire_env_problem()
    assert (found is None) == (problem is None)
    if problem is not None:
        assert problem in found and repr(env) in found
