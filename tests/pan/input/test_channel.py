"""InputChannel: a reader's cursor, restarts, and back-pressure on a real pull."""

from __future__ import annotations

import asyncio
import contextlib

from pan.buffers.ringbuffer import RingBuffer
from pan.input.channel import InputChannel
from pan.input.subscriber import StreamSubscriber
from pan.repository.server import RepositoryServer
from pan.wire.progress import StreamProgress
from tests.conftest import HOST, WorkerGroup, forwarder, make_workflow, wait_until


def rows(first: int, count: int) -> list[dict]:
    return [{"i": i, "ts": 10 * i} for i in range(first, first + count)]


def test_a_cursor_reads_in_order_and_starts_over_after_a_reset() -> None:
    channel = InputChannel("S", RingBuffer(100))
    cursor = channel.cursor()
    channel.add(rows(0, 5))
    batch = cursor.read(3)
    assert (batch.after, batch.indices, batch.missed, batch.restarted) == (-1, [0, 1, 2], 0, False)
    assert cursor.read(10).indices == [3, 4] and cursor.read(10).items == []
    channel.reset()  # the producer restarted: its indices start over
    channel.add(rows(0, 2))
    batch = cursor.read(10)
    assert (batch.after, batch.indices, batch.restarted) == (-1, [0, 1], True)
    assert channel.counters.resets == 1 and channel.counters.received == 7


def test_room_counts_what_the_slowest_reader_has_not_taken() -> None:
    channel = InputChannel("S", RingBuffer(10))
    channel.add(rows(0, 10))
    assert channel.room() == 10 and channel.consumed is None  # nobody reads: overwriting is harmless
    slow, fast = channel.cursor(), channel.cursor()
    fast.read(10)
    slow.read(4)
    assert channel.consumed == 3 and channel.room() == 4
    channel.reset()
    assert channel.consumed == -1 and channel.room() == 10


def test_what_every_reader_has_taken_is_let_go_at_once() -> None:
    channel = InputChannel("S", RingBuffer(100))
    slow, fast = channel.cursor(), channel.cursor()
    channel.add(rows(0, 10))
    fast.read(8)
    assert channel.buffer.at(0) is not None  # the slow reader still needs it
    slow.read(5)
    assert [channel.buffer.at(i) for i in range(5)] == [None] * 5  # both took 0..4: freed, not left for the ring
    assert channel.buffer.at(5) == {"i": 5, "ts": 50} and channel.room() == 95
    assert slow.read(10).indices == list(range(5, 10)) and fast.read(10).indices == [8, 9]
    assert channel.buffer.at(9) == {"i": 9, "ts": 90}  # the newest is kept (the ring's first/last stay defined)
    channel.add(rows(10, 2))
    assert fast.read(10).indices == [10, 11] and slow.read(10).indices == [10, 11]
    assert channel.counters.missed == 0


async def test_the_pull_waits_for_room_and_the_reader_loses_nothing(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    (fwd,) = await workers.start(make_workflow(repository.port, [forwarder("F", ["S"])]))
    fwd.outputs["S"].extend([{"ts": 10 * n} for n in range(250)])
    fwd.outputs["S"].publish(StreamProgress(wm=5000))
    channel = InputChannel("S", RingBuffer(100))
    cursor = channel.cursor()
    async with StreamSubscriber("S", (HOST, repository.port), page_size=40, max_wait_ms=200) as subscriber:
        pulling = asyncio.create_task(channel.pull(subscriber, 40))
        try:
            await wait_until(lambda: channel.counters.waits_for_reader >= 1, timeout_s=30)
            assert channel.buffer.last < 100 and channel.behind and not cursor.caught_up
            assert channel.source == {"host": HOST, "port": fwd.server.port, "rep": False, "lvl": 0, "local": False}
            taken: list[int] = []

            async def read_all() -> bool:
                taken.extend(cursor.read(30).indices)
                return cursor.caught_up and len(taken) == 250

            await wait_until(read_all, timeout_s=30)
        finally:
            pulling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pulling
    assert taken == list(range(250)) and channel.counters.missed == 0
    assert channel.progress.wm == 5000 and channel.describe()["meta"]["wm"] == 5000
