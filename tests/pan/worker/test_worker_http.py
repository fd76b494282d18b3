"""Contract tests for a worker's REST endpoints (DESIGN §4, "Worker")."""

import asyncio
import time

import pytest

from pan.repository.server import RepositoryServer
from pan.wire.progress import StreamProgress
from pan.worker.worker import Worker
from tests.conftest import WorkerGroup, forwarder, get_json, make_workflow
from tests.support import prometheus


@pytest.fixture
async def worker(repository: RepositoryServer, workers: WorkerGroup) -> Worker:
    spec = forwarder("F", ["S", "T"], buffer_size=5)
    (started,) = await workers.start(make_workflow(repository.port, [spec]))
    return started


def data_url(worker: Worker) -> str:
    return f"http://127.0.0.1:{worker.server.port}/data"


def fill(worker: Worker, stream: str, count: int) -> None:
    for n in range(count):
        worker.outputs[stream].append({"ts": 1000 + n, "k": n})


async def test_first_index_is_zero_and_answer_has_the_contract_fields(worker: Worker) -> None:
    fill(worker, "S", 3)
    status, answer = await get_json(data_url(worker), s="S")
    assert status == 200
    assert answer["status"] == "ok" and answer["stream"] == "S"
    assert [t["i"] for t in answer["tuples"]] == [0, 1, 2]
    assert answer["tuples"][0] == {"i": 0, "ts": 1000, "k": 0}
    assert (answer["first"], answer["last"], answer["missed"]) == (0, 2, 0)
    assert answer["meta"]["epoch"] == worker.epoch


async def test_empty_stream_reports_minus_one(worker: Worker) -> None:
    status, answer = await get_json(data_url(worker), s="T")
    assert status == 200
    assert (answer["tuples"], answer["first"], answer["last"], answer["missed"]) == ([], -1, -1, 0)


async def test_l_returns_latest_and_n_returns_oldest(worker: Worker) -> None:
    fill(worker, "S", 5)
    _, latest = await get_json(data_url(worker), s="S", i=0, l=2)
    _, oldest = await get_json(data_url(worker), s="S", i=0, n=2)
    assert [t["i"] for t in latest["tuples"]] == [3, 4]
    assert [t["i"] for t in oldest["tuples"]] == [1, 2]
    _, newest = await get_json(data_url(worker), s="S", l=1)
    assert [t["i"] for t in newest["tuples"]] == [4]


async def test_missed_after_overwrite(worker: Worker) -> None:
    fill(worker, "S", 12)  # capacity 5: indices 7..11 remain
    _, answer = await get_json(data_url(worker), s="S", i=2)
    assert [t["i"] for t in answer["tuples"]] == [7, 8, 9, 10, 11]
    assert (answer["first"], answer["last"], answer["missed"]) == (7, 11, 4)
    _, answer = await get_json(data_url(worker), s="S", i=-1)
    assert answer["missed"] == 7


async def test_long_poll_returns_as_soon_as_data_arrives(worker: Worker) -> None:
    fill(worker, "S", 1)
    asyncio.get_running_loop().call_later(0.1, fill, worker, "S", 1)
    started = time.monotonic()
    status, answer = await get_json(data_url(worker), s="S", i=0, w=10_000)
    elapsed = time.monotonic() - started
    assert status == 200 and [t["i"] for t in answer["tuples"]] == [1]
    assert elapsed < 5.0  # far below the 10 s wait: it returned on arrival, not on timeout


async def test_meta_change_ends_only_long_polls_that_ask_for_it(worker: Worker) -> None:
    fill(worker, "S", 1)
    loop = asyncio.get_running_loop()
    loop.call_later(0.1, worker.outputs["S"].publish, StreamProgress(k=7))
    started = time.monotonic()

    async def timed(**params: object) -> tuple[float, dict]:
        _, answer = await get_json(data_url(worker), s="S", i=0, **params)
        return time.monotonic() - started, answer

    (meta_s, with_meta), (plain_s, plain) = await asyncio.gather(timed(w=10_000, m=1), timed(w=1500))
    assert with_meta["tuples"] == [] and with_meta["meta"]["k"] == 7 and meta_s < 1.0
    assert plain["tuples"] == [] and plain_s >= 1.4  # ran to its timeout: a K change is not data


async def test_long_poll_times_out_empty(worker: Worker) -> None:
    fill(worker, "S", 1)
    status, answer = await get_json(data_url(worker), s="S", i=0, w=100)
    assert status == 200 and answer["tuples"] == [] and answer["last"] == 0


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"s": "S", "i": "abc"}, "'i' must be an integer"),
        ({"s": "S", "i": "1.5"}, "'i' must be an integer"),
        ({"s": "S", "i": -2}, "'i' must be >= -1"),
        ({"s": "S", "l": -1}, "'l' must be >= 1"),
        ({"s": "S", "n": 0}, "'n' must be >= 1"),
        ({"s": "S", "n": 10**9}, "'n' must be <="),
        ({"s": "S", "l": 10**12}, "'l' must be <="),
        ({"s": "S", "l": 1, "n": 1}, "cannot be used together"),
        ({"s": "S", "w": -3}, "'w' must be >= 0"),
        ({"s": "S", "w": 10**8}, "'w' must be <="),
        ({"s": "S", "i": "9" * 40}, "'i' must be <="),
        ({"s": "S", "hold": "a b"}, "'hold' must be"),
        ({"s": "S", "hold": "x" * 65}, "'hold' must be"),
        ({}, "missing parameter 's'"),
    ],
)
async def test_bad_parameters_get_400(worker: Worker, params: dict, needle: str) -> None:
    status, answer = await get_json(data_url(worker), **params)
    assert status == 400
    assert answer["status"] == "error" and needle in answer["error"]


async def test_unknown_stream_gets_404(worker: Worker) -> None:
    status, answer = await get_json(data_url(worker), s="NOPE")
    assert status == 404 and answer["status"] == "error" and "NOPE" in answer["error"]


async def test_server_survives_bad_requests(worker: Worker) -> None:
    for params in ({"s": "S", "i": "x"}, {"s": "\x00\xff"}, {"s": "S", "l": "", "n": ""}):
        await get_json(data_url(worker), **params)
    fill(worker, "S", 1)
    status, answer = await get_json(data_url(worker), s="S")
    assert status == 200 and len(answer["tuples"]) == 1


async def test_streams_health_metrics_debug(worker: Worker) -> None:
    fill(worker, "S", 7)
    base = f"http://127.0.0.1:{worker.server.port}"
    await get_json(data_url(worker), s="S", n=2)
    status, streams = await get_json(f"{base}/streams")
    assert status == 200 and streams["worker"] == "F" and streams["inputs"] == {}
    out = streams["outputs"]["S"]
    assert (out["first"], out["last"], out["held"], out["appended"], out["served_tuples"]) == (2, 6, 5, 7, 2)
    assert (await get_json(f"{base}/health"))[1] == {"status": "ok", "worker": "F", "epoch": worker.epoch}
    status, metrics = await get_json(f"{base}/metrics")
    assert status == 200
    assert prometheus.value(metrics, "pan_output_appended_total", worker="F", stream="S") == 7
    assert prometheus.families(metrics)["pan_output_appended"] == "counter"
    assert prometheus.value(metrics, "pan_component_rows", worker="F") == 0
    status, page = await get_json(f"{base}/debug")
    assert status == 200 and "<table" in page and ">S<" in page


async def test_a_holding_reader_loses_nothing_and_the_ring_shrinks_back(worker: Worker) -> None:
    """``hold=NAME``: a burst of 40 into a 5-deep ring reaches the holder whole; others still miss."""
    _, first = await get_json(data_url(worker), s="S", i=-1, hold="rec-1")  # registers, has read nothing
    assert first["tuples"] == []
    fill(worker, "S", 40)
    stream = worker.outputs["S"]
    assert stream.buffer.capacity >= 40 and stream.counters()["holders"] == 1
    _, other = await get_json(data_url(worker), s="S", i=-1, n=100)  # a plain reader
    assert other["missed"] == 0  # nothing was overwritten for anyone yet
    got: list[int] = []
    position = -1
    while position < 39:
        _, page = await get_json(data_url(worker), s="S", i=position, n=7, hold="rec-1")
        assert page["missed"] == 0
        got += [t["i"] for t in page["tuples"]]
        position = got[-1]
    assert got == list(range(40))
    await get_json(data_url(worker), s="S", i=position, hold="rec-1")  # says it has read everything
    assert stream.buffer.capacity == 5 and len(stream.buffer) == 5
    _, late = await get_json(data_url(worker), s="S", i=-1)
    assert late["missed"] == 35 and [t["i"] for t in late["tuples"]] == [35, 36, 37, 38, 39]


async def test_a_silent_holder_is_forgotten(worker: Worker, monkeypatch: pytest.MonkeyPatch) -> None:
    import pan.buffers.streams

    await get_json(data_url(worker), s="S", i=-1, hold="gone")
    monkeypatch.setattr(pan.buffers.streams, "HOLD_EXPIRY_S", 0.0)
    fill(worker, "S", 20)
    assert worker.outputs["S"].buffer.capacity == 5 and worker.outputs["S"].counters()["holders"] == 0


async def test_pages_stop_at_the_byte_limit_but_hold_at_least_one_tuple(
        worker: Worker, monkeypatch: pytest.MonkeyPatch) -> None:
    import pan.buffers.streams

    fill(worker, "S", 4)
    size = len(worker.outputs["S"].buffer.read(-1, oldest=1).items[0])
    monkeypatch.setattr(pan.buffers.streams, "PAGE_BYTES", 2 * size)
    _, page = await get_json(data_url(worker), s="S", i=-1, n=4)
    assert [t["i"] for t in page["tuples"]] == [0, 1] and page["last"] == 3
    monkeypatch.setattr(pan.buffers.streams, "PAGE_BYTES", 1)
    _, page = await get_json(data_url(worker), s="S", i=1, n=4)
    assert [t["i"] for t in page["tuples"]] == [2]
    _, page = await get_json(data_url(worker), s="S", l=3)  # the latest N are never cut
    assert [t["i"] for t in page["tuples"]] == [1, 2, 3]
