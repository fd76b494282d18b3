"""Row ids pushed as arrays (``OrderingUnit.push_rows``) come out as the same events, in the same order, with
the same late ones, K and clock, as the same ids pushed one Python int each (``push_timed``)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from pan.ordering.released import Released
from pan.ordering.settings import OrderingSettings
from pan.ordering.unit import OrderingUnit
from pan.wire.progress import END_OF_STREAM

STREAMS = ["a", "b", "c", "d"]
MS = 10**9


def _arrivals(seed: int, n_rows: int = 4000) -> list[tuple[str, list[int], list[int]]]:
    """Batches of (stream, ts, ids) as a network would deliver them: each stream a sensor at 2 kHz with a
    jittered clock, some rows held back and sent late, batches of any size, streams interleaved at random,
    and runs of equal ts within and across streams."""
    rnd = random.Random(seed)
    pending: dict[str, list[tuple[int, int]]] = {s: [] for s in STREAMS}
    for k in range(n_rows):  # k: the row's id
        stream = STREAMS[k % len(STREAMS)]
        ts = (k // len(STREAMS)) * MS // 2 + rnd.choice((0, 0, 0, rnd.randrange(MS)))
        pending[stream].append((ts, k))
    for rows in pending.values():  # a few rows are delayed by up to 40 ms: disorder within a stream
        for _ in range(len(rows) // 50):
            i = rnd.randrange(len(rows))
            j = min(len(rows) - 1, i + rnd.randrange(1, 80))
            rows.insert(j, rows.pop(i))
    batches = []
    cursors = dict.fromkeys(STREAMS, 0)
    while any(cursors[s] < len(pending[s]) for s in STREAMS):
        stream = rnd.choice([s for s in STREAMS if cursors[s] < len(pending[s])])
        size = rnd.choice((1, 2, 7, 40, 300))
        rows = pending[stream][cursors[stream]:cursors[stream] + size]
        cursors[stream] += len(rows)
        batches.append((stream, [t for t, _ in rows], [i for _, i in rows]))
    return batches


def _flat(released: Released) -> tuple[list[Any], list[Any]]:
    def listed(values: Any) -> list[Any]:
        return values.tolist() if isinstance(values, np.ndarray) else list(values)

    return listed(released.events), listed(released.late)


def _state(unit: OrderingUnit) -> dict[str, Any]:
    metrics = unit.metrics()
    return {key: metrics[key] for key in ("k", "clk", "buffered", "late", "pushed", "released", "k_increases")}


SETTINGS = [
    OrderingSettings(),  # max mode, every stream a clock, late ones aside
    OrderingSettings(late_policy="deliver", lam=0.0, window=64),  # K moves often
    OrderingSettings(clock=("a",), window=100),  # non-clock streams measured later
    OrderingSettings(clock_mode="watermark", min_k=2 * MS),
    OrderingSettings(initial_k=5 * MS, max_k=5 * MS, late_policy="deliver"),  # K capped: many late
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: f"{s.clock_mode}-{s.late_policy}-{s.clock}")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_arrays_release_what_lists_release(settings: OrderingSettings, seed: int) -> None:
    as_lists, as_arrays = OrderingUnit(settings, STREAMS), OrderingUnit(settings, STREAMS)
    rnd = random.Random(seed * 7)
    released_arrays = 0
    late_seen = 0
    for stream, tss, ids in _arrivals(seed):
        expected = _flat(as_lists.push_timed(stream, tss, ids))
        if rnd.random() < 0.1:  # now and then a batch of the other form (a JSON page among column pages)
            got_released = as_arrays.push_timed(stream, list(tss), list(ids))
        else:
            got_released = as_arrays.push_rows(stream, np.array(tss, dtype=np.int64), np.array(ids, dtype=np.int64))
        released_arrays += isinstance(got_released.events, np.ndarray) and len(got_released.events) > 0
        assert _flat(got_released) == expected
        late_seen += len(expected[1])
        if rnd.random() < 0.05:  # a producer's promise
            promise = tss[-1] - rnd.randrange(5 * MS)
            assert _flat(as_arrays.promise(stream, promise)) == _flat(as_lists.promise(stream, promise))
        assert _state(as_arrays) == _state(as_lists)
    for stream in STREAMS:  # the end: every input ends, everything still held is released in order
        assert _flat(as_arrays.promise(stream, END_OF_STREAM)) == _flat(as_lists.promise(stream, END_OF_STREAM))
    assert _state(as_arrays) == _state(as_lists)
    assert as_arrays.buffered == 0 and as_arrays.metrics()["delay_histogram"] == as_lists.metrics()["delay_histogram"]
    assert released_arrays > 0  # the array merge ran, not only the lists
    if settings.max_k == 5 * MS:
        assert late_seen > 0  # the late split was exercised


def test_equal_ts_across_streams_come_out_by_stream_position_then_index() -> None:
    unit = OrderingUnit(OrderingSettings(clock=("a",)), STREAMS)
    assert not len(unit.push_rows("c", np.array([5, 5, 6]), np.array([30, 31, 32])).events)  # no clock yet
    released = unit.push_rows("a", np.array([5, 5, 7]), np.array([10, 11, 12]))
    assert isinstance(released.events, np.ndarray)
    assert released.events.tolist() == [10, 11, 30, 31, 32, 12]  # ts 5 of a, then of c; 6 of c; 7 of a
    assert not len(unit.push_rows("b", np.array([5, 8]), np.array([20, 21])).events)
    assert not len(unit.push_rows("a", np.array([9]), np.array([13])).events)  # b's delay (4) makes K 5
    later = unit.push_rows("a", np.array([30]), np.array([14]))
    assert later.late.tolist() == [20]  # ts 5 of b, after ts 7 was released: late, and aside
    assert later.events.tolist() == [21, 13]  # up to 30 - K; 30 waits
    assert unit.late_count == 1 and unit.buffered == 1


def test_bad_arrays_are_refused_and_lose_nothing() -> None:
    unit = OrderingUnit(OrderingSettings(clock=("b",)), STREAMS)
    unit.push_rows("a", np.array([1, 2]), np.array([1, 2]))
    with pytest.raises(ValueError, match="int64"):
        unit.push_rows("a", np.array([3.0, 4.0]), np.array([3, 4]))
    with pytest.raises(ValueError, match="one length"):
        unit.push_rows("a", np.array([3, 4]), np.array([3]))
    with pytest.raises(ValueError, match="unknown input stream"):
        unit.push_rows("z", np.array([3]), np.array([3]))
    assert unit.buffered == 2
    assert _flat(unit.flush())[0] == [1, 2]


def test_releases_of_arrays_and_lists_add_up_in_order() -> None:
    """``Released.extend`` (how the speculative unit gathers what it hands on) takes arrays of ids too."""
    gathered = Released()
    gathered.extend(Released(events=np.array([1, 2]), late=np.array([9])))
    gathered.extend(Released(events=[3], late=[]))
    gathered.extend(Released(events=np.array([4]), late=[]))
    assert gathered.events == [1, 2, 3, 4] and gathered.late == [9]
    assert all(type(v) is int for v in gathered.events)
