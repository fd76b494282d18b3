"""Issue 10, ingest side, finding 4: checked promises.  Only a stream's sender may promise, within its bound or
the end, and no hostile value makes `/streams` or `/metrics` fail (of the forwarder or a merge downstream)."""

from __future__ import annotations

from pan.http.addresses import free_port
from pan.ingest.lines import END_OF_STREAM, promise_line
from pan.repository.server import RepositoryServer
from pan.worker.worker import Worker
from tests.conftest import WorkerGroup, forwarder, get_json, make_workflow, sensor_row, wait_until
from tests.pan.ingest.ingest_forwarder import (
    assert_prometheus_text,
    connect,
    counters,
    data_page,
    send,
    start_forwarder,
)

PS_PER_MS = 10**9


async def test_a_forged_promise_from_another_connection_is_refused(fwd: Worker) -> None:
    """The issue's attack: 2^62 promised for a live stream by someone who does not carry it."""
    _reader, sensor = await connect(fwd)
    try:
        sensor.write(b"".join(sensor_row(4, ts).encode() + b"\n" for ts in range(10)))
        await sensor.drain()
        await wait_until(lambda: counters(fwd)["rows"] == 10)
        await send(fwd, [promise_line("SENSOR4", 2**62), promise_line("SENSOR4", 5 * 10**12)])
        await wait_until(lambda: counters(fwd)["promises_refused"].get("not_sender") == 2)
        assert fwd.outputs["SENSOR4"].progress.wm is None
        sensor.write(sensor_row(4, 10).encode() + b"\n")  # the real sensor goes on
        await sensor.drain()
        await wait_until(lambda: counters(fwd)["rows"] == 11)
    finally:
        sensor.close()
    # Its clean close ends nothing (a reconnect resumes the stream); once it is closed, the
    # sensor's next connection may promise, here its end.
    await wait_until(lambda: counters(fwd)["open_connections"] == 0)
    assert fwd.outputs["SENSOR4"].progress.wm is None
    await send(fwd, [promise_line("SENSOR4")])
    await wait_until(lambda: fwd.outputs["SENSOR4"].progress.wm == END_OF_STREAM)


async def test_the_sender_may_promise_within_its_bound_or_the_end(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    worker = await start_forwarder(repository, workers, params={"promise_ahead_ms": 1000})
    base = 10**15
    _reader, sensor = await connect(worker)
    try:
        sensor.write(sensor_row(4, base).encode() + b"\n" + promise_line("SENSOR4", base + 1000 * PS_PER_MS) + b"\n")
        await sensor.drain()
        await wait_until(lambda: worker.outputs["SENSOR4"].progress.wm == base + 1000 * PS_PER_MS)
        sensor.write(promise_line("SENSOR4", base + 1000 * PS_PER_MS + 1) + b"\n")
        await sensor.drain()
        await wait_until(lambda: counters(worker)["promises_refused"] == {"too_far_ahead": 1})
        sensor.write(promise_line("SENSOR4") + b"\n")  # the end: it could as well have closed
        await sensor.drain()
        await wait_until(lambda: worker.outputs["SENSOR4"].progress.wm == END_OF_STREAM)
        assert counters(worker)["promises"] == 2
    finally:
        sensor.close()


async def test_a_stream_without_data_may_still_be_promised_its_end(fwd: Worker) -> None:
    """What `pan simulate` and `pan replay` send for sensors the data set has no rows for."""
    await send(fwd, [promise_line("SENSOR8")])
    await wait_until(lambda: fwd.outputs["SENSOR8"].progress.wm == END_OF_STREAM)
    assert counters(fwd)["promises"] == 1 and counters(fwd)["promises_refused"] == {}


async def test_hostile_values_never_make_streams_or_metrics_fail(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """Before, a promise beyond int64 became the stream's watermark (in the issue, `/streams` then answered 500).

    A merge downstream sees whatever gets through, so its endpoints are checked too.
    """
    fwd, merger = await workers.start(make_workflow(repository.port, [
        forwarder("F", ["SENSOR4", "SENSOR8", "INTERRUPTIONS"]),
        {"name": "M", "type": "merge", "host": "127.0.0.1", "port": free_port(), "inputs": ["SENSOR4", "SENSOR8"],
         "params": {"output": "X", "clock_mode": "watermark"}},
    ]))
    hostile = [
        b'{"stream":"SENSOR8","ts":18446744073709551615,"promise":true}',
        b'{"stream":"SENSOR8","ts":%d,"promise":true}' % 2**200,
        b'{"stream":"SENSOR8","ts":-1,"promise":true}',
        b'{"stream":"SENSOR8","ts":"soon","promise":true}',
        b'{"stream":"INTERRUPTIONS","ts":1,"x":18446744073709551615}',
        b'{"stream":"INTERRUPTIONS","ts":1,"x":1e308,"y":-1e308}',
        b'{"stream":"INTERRUPTIONS","ts":1,"\\u0000\\n\\"":"\\ud800"}',
        b"8,1," + b"9" * 4000 + b",0,0,0,0,0,0,0,0,0,0",
        b"4,18446744073709551615,0,0,0,0,0,0,0,0,0,0,0",
        bytes(range(256)),
        sensor_row(4, 5).encode(),  # the last line: once it is in, every line before it was handled
    ]
    await send(fwd, hostile)
    await wait_until(lambda: counters(fwd)["per_stream"].get("SENSOR4", 0) >= 1)
    await wait_until(lambda: merger.inputs["SENSOR4"].buffer.last == 0)
    for worker in (fwd, merger):
        status, info = await get_json(f"http://127.0.0.1:{worker.server.port}/streams")
        assert status == 200 and isinstance(info, dict) and info["status"] == "ok"
        status, text = await get_json(f"http://127.0.0.1:{worker.server.port}/metrics")
        assert status == 200 and isinstance(text, str)
        assert_prometheus_text(text)
    assert fwd.outputs["SENSOR8"].progress.wm is None and counters(fwd)["per_stream"]["SENSOR4"] == 1
    for stream in ("SENSOR4", "SENSOR8", "INTERRUPTIONS"):
        await data_page(fwd, stream)  # decodes
    assert counters(fwd)["promises_refused"] == {"not_int64": 2, "ts_out_of_range": 1}  # "soon": malformed
