"""Inter-PAN ingest into a forwarder over real TCP (DESIGN §4, "Inter-PAN input")."""

import asyncio

import pytest

from pan.ingest.server import send_lines
from pan.input.subscriber import StreamSubscriber
from pan.repository.server import RepositoryServer
from pan.worker.worker import Worker
from tests.conftest import WorkerGroup, forwarder, make_workflow, sensor_row, wait_until


@pytest.fixture
async def fwd(repository: RepositoryServer, workers: WorkerGroup) -> Worker:
    spec = forwarder("F", ["SENSOR4", "SENSOR47", "INTERRUPTIONS"], buffer_size=50_000)
    (started,) = await workers.start(make_workflow(repository.port, [spec]))
    return started


def counters(worker: Worker) -> dict:
    return worker.component.counters()


def held(worker: Worker, stream: str) -> list[dict]:
    import orjson

    return [orjson.loads(b) for b in worker.outputs[stream].buffer.read(-1, oldest=100_000).items]


async def send(worker: Worker, lines: list[bytes]) -> None:
    await send_lines("127.0.0.1", worker.spec.params["ingest_port"], lines)


async def test_bad_lines_are_counted_and_valid_rows_delivered_in_order(fwd: Worker) -> None:
    lines = [
        sensor_row(4, 100).encode(),
        b"this is not a row",
        sensor_row(47, 101).encode(),
        b"4,102,1,2,3",  # too few fields
        b"4,1x3,1,2,3,4,5,6,7,8,9,10,11",  # not an integer
        sensor_row(99, 104).encode(),  # a sensor nobody expects
        b'{"stream":"INTERRUPTIONS","ts":105,"event":"begin"}',
        b'{"stream":"INTERRUPTIONS"}',  # no ts
        b'{"stream":"INTERRUPTIONS","ts":"soon"}',
        b"{broken json",
        b"[1,2,3]",
        b'{"stream":"NOBODY","ts":1}',
        b"",  # empty lines are ignored, not errors
        sensor_row(4, 106).encode() + b"\r",
    ]
    await send(fwd, lines)
    await wait_until(lambda: counters(fwd)["rows"] == 4)
    c = counters(fwd)
    assert (c["rows"], c["malformed"], c["unexpected"], c["truncated"]) == (4, 7, 2, 0)
    assert c["per_stream"] == {"SENSOR4": 2, "SENSOR47": 1, "INTERRUPTIONS": 1}
    assert [t["ts"] for t in held(fwd, "SENSOR4")] == [100, 106]
    assert held(fwd, "SENSOR4")[0]["sid"] == 4 and held(fwd, "SENSOR4")[0]["x"] == 1000
    assert held(fwd, "INTERRUPTIONS") == [{"i": 0, "ts": 105, "event": "begin"}]


async def test_connection_closed_mid_line(fwd: Worker) -> None:
    _reader, writer = await asyncio.open_connection("127.0.0.1", fwd.spec.params["ingest_port"])
    writer.write((sensor_row(4, 1) + "\n" + sensor_row(4, 2)[:10]).encode())
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    await wait_until(lambda: counters(fwd)["truncated"] == 1)
    assert counters(fwd)["rows"] == 1
    assert [t["ts"] for t in held(fwd, "SENSOR4")] == [1]


async def test_ten_thousand_rows_in_one_write(fwd: Worker) -> None:
    lines = [sensor_row(4 if n % 3 else 47, n, n).encode() for n in range(10_000)]
    _reader, writer = await asyncio.open_connection("127.0.0.1", fwd.spec.params["ingest_port"])
    writer.write(b"\n".join(lines) + b"\n")  # one write call
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    await wait_until(lambda: counters(fwd)["rows"] == 10_000)
    assert [t["ts"] for t in held(fwd, "SENSOR4")] == [n for n in range(10_000) if n % 3]
    assert [t["ts"] for t in held(fwd, "SENSOR47")] == [n for n in range(10_000) if n % 3 == 0]
    assert counters(fwd)["malformed"] == 0


async def test_oversized_line_is_dropped_and_the_connection_goes_on(fwd: Worker) -> None:
    await send(fwd, [b"9" * 200_000, sensor_row(4, 7).encode()])
    await wait_until(lambda: counters(fwd)["rows"] == 1)
    assert counters(fwd)["oversized"] == 1
    assert [t["ts"] for t in held(fwd, "SENSOR4")] == [7]


async def test_server_survives_abuse_and_keeps_accepting(fwd: Worker) -> None:
    for _ in range(5):
        _reader, writer = await asyncio.open_connection("127.0.0.1", fwd.spec.params["ingest_port"])
        writer.write(bytes(range(256)) * 10)
        writer.transport.abort()  # reset, not a clean close
    await send(fwd, [sensor_row(47, 9).encode()])
    await wait_until(lambda: counters(fwd)["per_stream"].get("SENSOR47") == 1)
    assert counters(fwd)["connections"] == 6


async def test_rows_reach_a_subscriber_over_http(fwd: Worker, repository: RepositoryServer) -> None:
    await send(fwd, [sensor_row(4, ts).encode() for ts in range(50)])
    async with StreamSubscriber("SENSOR4", ("127.0.0.1", repository.port), max_wait_ms=200) as sub:
        got: list[dict] = []
        async for item in sub:
            got.append(item)
            if len(got) == 50:
                break
    assert [t["i"] for t in got] == list(range(50))
    assert [t["ts"] for t in got] == list(range(50))
