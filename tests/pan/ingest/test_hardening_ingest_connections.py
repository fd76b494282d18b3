"""Issue 10, ingest side, finding 7: connection limits.  Idle connections are closed without ending their
streams (and without dropping rows already sent), and connections per address are capped."""

from __future__ import annotations

import asyncio
import time

from pan.ingest.lines import promise_line
from pan.repository.server import RepositoryServer
from pan.worker.worker import Worker
from tests.conftest import WorkerGroup, sensor_row, wait_until
from tests.pan.ingest.ingest_forwarder import connect, counters, held, send, start_forwarder


async def test_an_idle_connection_is_closed_without_ending_its_streams(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    worker = await start_forwarder(repository, workers, params={"idle_timeout_s": 0.3})
    reader, writer = await connect(worker)
    try:
        writer.write(sensor_row(4, 1).encode() + b"\n" + sensor_row(4, 2).encode()[:5])
        await writer.drain()
        async with asyncio.timeout(10):
            assert await reader.read() == b""  # the forwarder closed it
    finally:
        writer.close()
    assert counters(worker)["idle_timeouts"] == 1 and counters(worker)["truncated"] == 1
    assert counters(worker)["open_connections"] == 0
    assert worker.outputs["SENSOR4"].progress.wm is None  # it did not say goodbye: more may come
    await send(worker, [sensor_row(4, 3).encode()])  # a sender that reconnects goes on
    await wait_until(lambda: worker.outputs["SENSOR4"].buffer.last == 1)


async def test_rows_that_arrive_while_the_forwarder_is_stalled_past_the_idle_deadline_are_read(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """A stalled (stopped, starved) forwarder wakes with its idle deadline due and a sender's rows waiting: the
    timer fires first in that loop round. The rows must be read, not dropped unread with the connection as if it
    were idle: an unpaced sender that wrote the rest of its stream and its end promise meanwhile never sends them
    again (a replay beside CPU hogs hung on 20 streams that lost their second half this way)."""
    worker = await start_forwarder(repository, workers, params={"idle_timeout_s": 0.3})
    _reader, writer = await connect(worker)
    try:
        await wait_until(lambda: counters(worker)["open_connections"] == 1)  # reading, its idle deadline set
        rows = [sensor_row(4, ts).encode() for ts in range(1, 101)]
        writer.write(b"\n".join([*rows, promise_line("SENSOR4")]) + b"\n")  # into the socket at once
        time.sleep(0.6)  # noqa: ASYNC251 (the stall under test: this process does not run past the deadline)
        await wait_until(lambda: worker.outputs["SENSOR4"].progress.ended)
    finally:
        writer.close()
    assert counters(worker)["rows"] == 100 and counters(worker)["idle_timeouts"] == 0
    assert len(held(worker, "SENSOR4")) == 100


async def test_connections_per_address_are_capped(repository: RepositoryServer, workers: WorkerGroup) -> None:
    worker = await start_forwarder(repository, workers, params={"max_connections_per_address": 3})
    held_open = [await connect(worker) for _ in range(3)]
    try:
        await wait_until(lambda: counters(worker)["open_connections"] == 3)
        reader, writer = await connect(worker)
        async with asyncio.timeout(10):  # refused: closed at once rather than held
            try:
                closed = await reader.read(1024) == b""
            except ConnectionResetError:
                closed = True
        writer.close()
        assert closed
        assert counters(worker)["refused_connections"] == 1
        for n, (_reader, open_writer) in enumerate(held_open):
            open_writer.write(sensor_row(4, n).encode() + b"\n")
            await open_writer.drain()
        await wait_until(lambda: counters(worker)["rows"] == 3)
    finally:
        for _reader, open_writer in held_open:
            open_writer.close()
    await wait_until(lambda: counters(worker)["open_connections"] == 0)
    await send(worker, [sensor_row(8, 1).encode()])  # room again
    await wait_until(lambda: counters(worker)["rows"] == 4)
    assert counters(worker)["refused_connections"] == 1 and counters(worker)["connections"] == 4


async def test_the_default_cap_admits_a_simulator_with_a_connection_per_sensor(fwd: Worker) -> None:
    connections = [await connect(fwd) for _ in range(60)]
    try:
        for n, (_reader, writer) in enumerate(connections):
            writer.write(sensor_row(4 if n % 2 else 8, n).encode() + b"\n")
            await writer.drain()
        await wait_until(lambda: counters(fwd)["rows"] == 60)
        assert counters(fwd)["refused_connections"] == 0 and counters(fwd)["open_connections"] == 60
    finally:
        for _reader, writer in connections:
            writer.close()


async def test_a_simulated_sensor_that_pauses_past_the_idle_timeout_reconnects_without_losing_rows(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """A paced replay pauses over the half-time break; the forwarder closes the idle link meanwhile."""
    from simulator.sensor_link import Link
    from simulator.simulate_summary import StreamStats

    worker = await start_forwarder(repository, workers, params={"idle_timeout_s": 0.3})
    assert worker.spec.params["ingest_port"] is not None
    link = Link("SENSOR4", "127.0.0.1", worker.spec.params["ingest_port"], StreamStats(), connect_timeout_s=10)
    try:
        assert await link.ensure(force=True)
        assert await link.send(sensor_row(4, 1).encode() + b"\n")
        await wait_until(lambda: counters(worker)["idle_timeouts"] == 1)
        await wait_until(lambda: not link.connected)  # the link notices the receiver's close
        assert await link.ensure(force=True) and await link.send(sensor_row(4, 2).encode() + b"\n")
        await wait_until(lambda: counters(worker)["rows"] == 2)
        assert worker.outputs["SENSOR4"].progress.wm is None  # the idle close ended nothing
    finally:
        await link.close()
    assert [int(t.split(b'"ts":')[1].split(b",")[0]) for t in held(worker, "SENSOR4")] == [1, 2]
    assert link.stats.connects == 2
