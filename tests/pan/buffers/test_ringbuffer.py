import asyncio
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pan.buffers.ringbuffer import RingBuffer


def test_indices_start_at_zero_and_increase() -> None:
    buf: RingBuffer[str] = RingBuffer(4)
    assert (buf.first, buf.last) == (-1, -1)
    assert [buf.append(x) for x in "abc"] == [0, 1, 2]
    assert (buf.first, buf.last, len(buf)) == (0, 2, 3)


def test_overwrite_keeps_the_newest_and_reports_missed() -> None:
    buf: RingBuffer[int] = RingBuffer(3)
    for n in range(10):
        buf.append(n * 10)
    page = buf.read(-1)
    assert page.indices == [7, 8, 9]
    assert page.items == [70, 80, 90]
    assert (page.first, page.last, page.missed) == (7, 9, 7)
    # A reader at index 5 lost 6 only.
    assert buf.read(5).missed == 1
    # A reader that is up to date lost nothing.
    assert buf.read(8).missed == 0 and buf.read(8).indices == [9]


def test_latest_versus_oldest() -> None:
    buf: RingBuffer[int] = RingBuffer(100)
    for n in range(10):
        buf.append(n)
    assert buf.read(2, oldest=3).indices == [3, 4, 5]
    assert buf.read(2, latest=3).indices == [7, 8, 9]
    # Skipping tuples on purpose with `latest` is not "missed".
    assert buf.read(2, latest=3).missed == 0


def test_explicit_indices_leave_holes_that_count_as_missed() -> None:
    buf: RingBuffer[str] = RingBuffer(10)
    buf.append("a", 0)
    buf.append("d", 3)
    page = buf.read(-1)
    assert page.indices == [0, 3]
    assert page.missed == 2
    with pytest.raises(ValueError):
        buf.append("x", 3)


def test_gap_larger_than_capacity_clears_everything() -> None:
    buf: RingBuffer[str] = RingBuffer(4)
    buf.append("a")
    buf.append("z", 100)
    page = buf.read(-1)
    assert page.indices == [100]
    assert (page.first, page.last, page.missed) == (100, 100, 100)


def test_extend_matches_append() -> None:
    a: RingBuffer[int] = RingBuffer(5)
    b: RingBuffer[int] = RingBuffer(5)
    a.extend(list(range(12)))
    for n in range(12):
        b.append(n)
    assert a.read(-1) == b.read(-1)


@given(
    capacity=st.integers(1, 20),
    count=st.integers(0, 60),
    after=st.integers(-1, 70),
    limit=st.integers(1, 30),
    use_latest=st.booleans(),
)
def test_read_agrees_with_a_plain_list(capacity: int, count: int, after: int, limit: int, use_latest: bool) -> None:
    buf: RingBuffer[int] = RingBuffer(capacity)
    buf.extend([n * 3 for n in range(count)])
    held = list(range(max(0, count - capacity), count))
    wanted = [i for i in held if i > after]
    wanted = wanted[-limit:] if use_latest else wanted[:limit]
    page = buf.read(after, latest=limit) if use_latest else buf.read(after, oldest=limit)
    assert page.indices == wanted
    assert page.items == [i * 3 for i in wanted]
    assert page.missed == max(0, min(held[0] if held else count, count) - (after + 1))


async def test_wait_returns_as_soon_as_data_arrives() -> None:
    buf: RingBuffer[int] = RingBuffer(8)
    loop = asyncio.get_running_loop()
    loop.call_later(0.05, buf.append, 1)
    started = time.monotonic()
    assert await buf.wait_beyond(-1, timeout=5.0)
    assert time.monotonic() - started < 2.0


async def test_wait_times_out_without_data() -> None:
    buf: RingBuffer[int] = RingBuffer(8)
    buf.append(0)
    assert not await buf.wait_beyond(0, timeout=0.05)
    assert await buf.wait_beyond(-1, timeout=0.05)


async def test_many_waiters_wake_on_one_append() -> None:
    buf: RingBuffer[int] = RingBuffer(8)
    waiters = [asyncio.create_task(buf.wait_beyond(-1, timeout=5.0)) for _ in range(50)]
    await asyncio.sleep(0.01)
    buf.append(7)
    assert all(await asyncio.gather(*waiters))


async def test_poke_wakes_only_readers_that_wait_for_metadata() -> None:
    buf: RingBuffer[int] = RingBuffer(8)
    data_only = asyncio.create_task(buf.wait_beyond(-1, timeout=5.0))
    with_meta = asyncio.create_task(buf.wait_beyond(-1, timeout=5.0, meta=True))
    await asyncio.sleep(0.01)
    buf.poke()
    assert await asyncio.wait_for(with_meta, 1.0) is False  # woken, but there is no new data
    await asyncio.sleep(0.05)
    assert not data_only.done()
    buf.wake_all()
    assert await asyncio.wait_for(data_only, 1.0) is False
