"""Watermark clock mode: clk follows the slowest active input stream."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from pan.ordering.released import Released
from pan.ordering.settings import OrderingSettings
from pan.ordering.unit import OrderingUnit
from pan.wire.progress import END_OF_STREAM

WATERMARK = OrderingSettings(clock_mode="watermark")


def drain(unit: OrderingUnit, arrivals: list[tuple[str, list[dict]]]) -> Released:
    out = Released()
    for stream, events in arrivals:
        out.extend(unit.push(stream, events))
    out.extend(unit.flush())
    return out


def sorted_streams(seed: int, streams: list[str], n: int) -> dict[str, list[dict]]:
    rng = random.Random(seed)
    data = {}
    for s in streams:
        ts = sorted(rng.randrange(0, 10_000) for _ in range(n))
        data[s] = [{"ts": t, "i": i, "s": s} for i, t in enumerate(ts)]
    return data


def random_arrivals(data: dict[str, list[dict]], seed: int) -> list[tuple[str, list[dict]]]:
    """Interleave the streams' batches in a random order, keeping each stream's own order."""
    rng = random.Random(seed)
    cursors = dict.fromkeys(data, 0)
    arrivals = []
    while any(cursors[s] < len(data[s]) for s in data):
        s = rng.choice([s for s in data if cursors[s] < len(data[s])])
        k = rng.randint(1, 30)
        arrivals.append((s, data[s][cursors[s] : cursors[s] + k]))
        cursors[s] += k
    return arrivals


@settings(max_examples=40, deadline=None)
@given(data_seed=st.integers(0, 10**6), arrival_seed=st.integers(0, 10**6))
def test_in_order_streams_are_never_late_whatever_the_interleaving(data_seed: int, arrival_seed: int) -> None:
    streams = ["A", "B", "C"]
    data = sorted_streams(data_seed, streams, 200)
    unit = OrderingUnit(WATERMARK, streams)
    out = drain(unit, random_arrivals(data, arrival_seed))
    assert unit.late_count == 0 and out.late == []
    reference = drain(OrderingUnit(WATERMARK, streams), [(s, data[s]) for s in streams])
    assert out.events == reference.events  # identical output for any arrival interleaving
    assert [e["ts"] for e in out.events] == sorted(e["ts"] for e in out.events)
    assert len(out.events) == 600


def test_an_unseen_stream_blocks_until_its_producer_promises() -> None:
    """No wall time: B is waited for however long it takes, until it sends or its producer promises."""
    unit = OrderingUnit(WATERMARK, ["A", "B"])
    assert unit.push("A", [{"ts": t} for t in range(10)]).events == []  # B unheard of: wait
    assert unit.push("A", [{"ts": t} for t in range(10, 30)]).events == []
    # The edge declared B idle and promised A's progress for it: release strictly below 29.
    assert unit.promise("B", 29).events == [{"ts": t} for t in range(29)]
    # B comes back and counts again: the watermark is now min(50, 40).
    assert unit.push("B", [{"ts": 40}]).events == []
    assert [e["ts"] for e in unit.push("A", [{"ts": 50}]).events] == [29]
    assert unit.late_count == 0


def test_disorder_inside_a_stream_is_covered_by_k() -> None:
    unit = OrderingUnit(OrderingSettings(clock_mode="watermark", lam=2.0, window=600), ["A", "B"])
    rng = random.Random(3)
    late_after_warm_up = 0
    for step in range(400):
        base = step * 10
        a = sorted(base + rng.randrange(10) for _ in range(3))
        b = [base + rng.randrange(10) for _ in range(3)]
        b[0] -= 25  # B runs up to 24 behind its own maximum
        before = unit.late_count
        unit.push("A", [{"ts": t} for t in a])
        unit.push("B", [{"ts": t} for t in b])
        if step > 100:
            late_after_warm_up += unit.late_count - before
    assert unit.k >= 20 and late_after_warm_up == 0


def test_min_k_is_a_floor() -> None:
    unit = OrderingUnit(OrderingSettings(clock_mode="watermark", min_k=100), ["A"])
    assert unit.k == 100
    assert unit.push("A", [{"ts": t} for t in range(0, 150, 10)]).events == [{"ts": t} for t in range(0, 40, 10)]
    assert unit.k == 100


def test_settings_validation() -> None:
    assert OrderingSettings(clock_mode="sometimes").validate(["A"])
    assert OrderingSettings(clock_mode="watermark", clock=("A",)).validate(["A"])
    assert OrderingSettings(min_k=5, max_k=1).validate(["A"])
    assert OrderingSettings.from_params({"clock_mode": "watermark", "min_k": 7}, ["A"]).min_k == 7


def test_an_end_is_no_delay_and_a_stream_may_resume_after_it() -> None:
    """Issue 11 item 1: a stream ended (2^62) that sends again must not push K to max_k."""
    unit = OrderingUnit(OrderingSettings(clock_mode="watermark", lam=1.0, window=100), ["A", "B"])
    out = Released()
    for base in range(0, 1000, 100):
        out.extend(unit.push("A", [{"ts": t} for t in range(base, base + 100, 10)]))
        out.extend(unit.push("B", [{"ts": t} for t in range(base + 5, base + 100, 10)]))
    out.extend(unit.promise("B", END_OF_STREAM))  # B said it has ended...
    out.extend(unit.push("A", [{"ts": t} for t in range(1000, 1100, 10)]))
    for base in range(1100, 2000, 100):  # ...and comes back after all, in order
        out.extend(unit.push("B", [{"ts": t} for t in range(base + 5, base + 100, 10)]))
        out.extend(unit.push("A", [{"ts": t} for t in range(base, base + 100, 10)]))
    assert unit.k == 0  # in-order streams: no delay was ever measured, the end is not one
    assert unit.late_count == 0
    out.extend(unit.promise("A", END_OF_STREAM))
    assert unit.buffered > 0  # B runs again, so it is waited for
    out.extend(unit.promise("B", END_OF_STREAM))
    assert unit.buffered == 0 and unit.release_limit == END_OF_STREAM
    assert [e["ts"] for e in out.events] == sorted(e["ts"] for e in out.events)


def test_a_promise_is_progress_not_a_delay() -> None:
    """Events older than a promise are late (counted), and do not raise K."""
    unit = OrderingUnit(OrderingSettings(clock_mode="watermark"), ["A", "B"])
    unit.push("A", [{"ts": t} for t in range(0, 100, 10)])
    unit.promise("B", 95)  # e.g. the forwarder's idle promise
    released = unit.push("B", [{"ts": 50}])  # a broken promise: B had something older after all
    assert released.late == [{"ts": 50}] and unit.late_count == 1 and unit.k == 0


def test_a_promise_moves_a_quiet_stream_without_events() -> None:
    unit = OrderingUnit(WATERMARK, ["A", "SPARSE"])
    unit.push("SPARSE", [{"ts": 5}])
    assert unit.push("A", [{"ts": t} for t in range(0, 100, 10)]).events == [{"ts": 0}]
    released = unit.promise("SPARSE", 60)  # its producer says: nothing older than 60 will come
    assert [e["ts"] for e in released.events] == [5, 10, 20, 30, 40, 50]
    assert unit.push("SPARSE", [{"ts": 65}]).events == [{"ts": 60}]
    assert unit.late_count == 0
    assert OrderingUnit(OrderingSettings(), ["A"]).promise("A", 10).events == []  # max mode: no effect
