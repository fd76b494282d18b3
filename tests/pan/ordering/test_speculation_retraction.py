"""Speculation across levels: a speculative producer's output withdraws what a replay changed, and a
speculative unit that reads it raw replays, settles and ends by what its producer settled."""

from __future__ import annotations

import json

from pan.buffers.streams import OutputStream
from pan.ordering.settings import OrderingSettings
from pan.ordering.speculation import SpeculativeUnit
from pan.ordering.speculation_settings import SpeculationSettings
from pan.ordering.unit import OrderingUnit
from tests.pan.ordering.speculation_targets import Detector


def test_a_replay_that_emits_the_same_tuples_withdraws_nothing() -> None:
    from pan.buffers.streams import OutputStream

    out = OutputStream("X", 100)
    out.extend([{"ts": t} for t in (1, 2, 3, 4)])
    out.replay_from(1)  # a restore to the snapshot taken at index 2
    assert out.next_index == 2
    out.extend([{"ts": 3}, {"ts": 4}])  # emitted again, unchanged
    out.end_replay()
    assert out.retractions == 0 and out.replayed_same == 2 and out.next_index == 4
    out.replay_from(1)
    out.extend([{"ts": 3}, {"ts": 5}, {"ts": 6}])  # index 3 changed: withdrawn from there on
    out.end_replay()
    assert out.retractions == 1 and out.retracted_tuples == 1
    assert out.retract_notice(0) == {"after": 2, "generation": 1}
    assert [t["ts"] for t in map(json.loads, out.buffer.read(-1, oldest=10).items)] == [1, 2, 3, 5, 6]
    out.replay_from(2)
    out.extend([{"ts": 5}])
    out.end_replay()  # index 4 was not emitted again: withdrawn
    assert out.retractions == 2 and out.next_index == 4


def merge_target() -> tuple[Detector, SpeculativeUnit]:
    detector = Detector()
    settings = OrderingSettings(clock_mode="watermark", lam=0, min_k=1000, window=1000)
    unit = SpeculativeUnit(settings, ["X", "C"], detector, SpeculationSettings(alpha=0), raw_streams=["X"])
    return detector, unit


def test_a_retraction_replays_only_when_withdrawn_events_were_emitted() -> None:
    detector, unit = merge_target()
    unit.upstream_settled("X", -1)  # the producer is speculative; nothing of X is final yet
    unit.push("C", [{"ts": t, "n": f"C{t}"} for t in (12, 22, 32, 42)])
    unit.push("X", [{"ts": t, "i": i, "n": f"X{t}"} for i, t in enumerate((10, 20, 30, 40, 50))])
    # Raw X counts for emission (below min(50, 42)), not for settling (K 1000: nothing settles).
    assert detector.state == ["X10", "C12", "X20", "C22", "X30", "C32", "X40"]
    assert unit.release_limit is None or unit.release_limit < 10
    unit.retract("X", 4)  # nothing after index 4: nothing withdrawn
    assert unit.retractions_received == [0, 0]
    unit.retract("X", 3)  # X50 was not emitted: dropped, no replay
    assert unit.replays == 0 and unit.retractions_received == [1, 0]
    # X40 was emitted: back to the state before the first event after X30, the last of X that stays (the
    # replacements come no earlier), and nothing is emitted until the replacement comes.
    unit.retract("X", 2)
    assert unit.replays == 1 and unit.input_replays == [1, 0]
    assert detector.state == ["X10", "C12", "X20", "C22", "X30"]
    unit.push("X", [{"ts": 31, "i": 3, "n": "X31"}, {"ts": 45, "i": 4, "n": "X45"}])
    assert detector.state == ["X10", "C12", "X20", "C22", "X30", "X31", "C32"]  # strictly below min(45, 42)
    assert unit.replays == 1  # X31 lands behind the AEP, though before C32: no second replay
    # Settling goes by what the producer settled: up to X31, then everything at the end.
    unit.upstream_settled("X", 3)
    released = unit.promise("C", 2**62)  # C ends: X31 is final, X45 not yet
    assert unit.metrics()["speculation"]["inputs"]["unsettled"] == {"X": 1}
    released.extend(unit.upstream_settled("X", None))
    released.extend(unit.promise("X", 2**62))
    assert unit.buffered == 0 and unit.ended
    assert [e["n"] for e in released.events] == detector.state  # every event settled, in order, once
    assert detector.state == ["X10", "C12", "X20", "C22", "X30", "X31", "C32", "C42", "X45"]


def test_a_channel_tells_its_reader_what_was_withdrawn() -> None:
    from pan.buffers.ringbuffer import RingBuffer
    from pan.input.channel import InputChannel

    channel = InputChannel("X", RingBuffer(16))
    cursor = channel.cursor()
    channel.add([{"i": i, "ts": i} for i in range(5)])
    assert [t["i"] for t in cursor.read(3).items] == [0, 1, 2]
    channel.retract(3, 1)  # the cursor has not read past 3: nothing to say
    assert cursor.read(10).retracted is None
    channel.add([{"i": 4, "ts": 40}])
    assert [t["ts"] for t in cursor.read(10).items] == [40]
    channel.retract(1, 2)
    channel.add([{"i": 2, "ts": 15}])
    batch = cursor.read(10)
    assert batch.retracted == 1 and [t["ts"] for t in batch.items] == [15]
    assert channel.retractions == 2 and channel.retract_generation == 2


def test_a_raw_event_the_settling_unit_passed_before_it_was_final_becomes_late() -> None:
    """Max mode: the clock stream C settles past a raw X event its producer has not settled yet. The
    unit takes it back (it was emitted) and, once final, it is late, as in a buffering unit."""
    detector = Detector()
    unit = SpeculativeUnit(OrderingSettings(clock=("C",), lam=0, window=1000), ["X", "C"], detector,
                           SpeculationSettings(alpha=0), raw_streams=["X"])
    unit.upstream_settled("X", -1)
    unit.push("X", [{"ts": 3, "i": 0, "n": "X3"}])
    unit.push("C", [{"ts": 5, "n": "C5"}])
    assert detector.state == ["X3", "C5"]
    released = unit.push("C", [{"ts": 20, "n": "C20"}])  # settles C5; X3 is in front of it but not final
    assert [e["n"] for e in released.events] == ["C5"]
    assert detector.state == ["C5", "C20"] and unit.replays == 1
    released = unit.upstream_settled("X", 0)  # final now: the settling unit finds it late when it releases it
    released.extend(unit.promise("C", 2**62))
    released.extend(unit.promise("X", 2**62))
    assert [e["n"] for e in released.late] == ["X3"] and unit.late_count == 1
    assert [e["n"] for e in released.events] == ["C20"] and detector.state == ["C5", "C20"]


def test_flush_takes_a_raw_inputs_unsettled_events_as_final() -> None:
    detector, unit = merge_target()
    unit.upstream_settled("X", -1)
    unit.push("X", [{"ts": 10, "i": 0, "n": "X10"}, {"ts": 30, "i": 1, "n": "X30"}])
    unit.push("C", [{"ts": 20, "n": "C20"}])
    released = unit.flush()
    assert [e["n"] for e in released.events] == ["X10", "C20", "X30"] == detector.state
    assert unit.buffered == 0 and unit.metrics()["speculation"]["inputs"]["unsettled"] == {"X": 0}


def test_unsettled_min_ts_follows_appends_settling_and_retractions() -> None:
    """What a speculative worker's watermark must stay below: the smallest ts after the settled prefix."""
    out = OutputStream("X", 100)
    out.extend([{"ts": t} for t in (10, 30, 20, 40)])
    assert out.unsettled_min_ts() is None  # not speculative: every tuple is final
    out.settle(-1)
    assert out.unsettled_min_ts() == 10
    out.settle(0)
    assert out.unsettled_min_ts() == 20  # 30 is unsettled too, but 20 comes after it with a smaller ts
    out.settle(2)
    assert out.unsettled_min_ts() == 40
    out.extend_encoded([b'{"i":4,"ts":35,"cells":[1,2]}'])  # encoded by the component (the heat maps do)
    assert out.unsettled_min_ts() == 35
    out.rewind(3)  # 35 withdrawn
    assert out.unsettled_min_ts() == 40
    out.extend([{"ts": 50}, {"ts": 5}])  # its replacements
    assert out.unsettled_min_ts() == 5
    out.settle(out.next_index - 1)
    assert out.unsettled_min_ts() is None


def test_a_raw_inputs_raw_watermark_moves_emission_but_never_settling() -> None:
    """A quiet raw input (a detector's rare hits) holds emission back only as far as its producer's
    ``raw_wm``; an event that still comes below it (through a retraction) is a replay, and the settled
    result is the buffering unit's."""
    detector, unit = merge_target()
    unit.upstream_settled("X", -1)
    unit.push("C", [{"ts": t, "n": f"C{t}"} for t in (12, 22, 32, 42)])
    assert detector.state == [] and unit.emitted_limit is None  # X has said nothing: no clock yet
    unit.raw_promise("X", 35)
    assert detector.state == ["C12", "C22", "C32"]  # strictly below min(35, 42)
    assert unit.emitted_limit == 34 and unit.release_limit is None  # nothing settled (K 1000)
    unit.raw_promise("X", 30)  # a raw watermark never goes back
    assert unit.metrics()["speculation"]["inputs"]["raw_promised"] == {"X": 35}
    unit.push("X", [{"ts": 20, "i": 0, "n": "X20"}])  # below what was emitted: replay from C22
    assert detector.state == ["C12", "X20", "C22", "C32"] and unit.replays == 1
    unit.retract("X", -1)  # X20 withdrawn: the promise goes with it until the producer says it again
    assert unit.metrics()["speculation"]["inputs"]["raw_promised"] == {}
    assert detector.state == [] and unit.replays == 2  # nothing of X is left: its replacements may come anywhere
    unit.push("X", [{"ts": 25, "i": 0, "n": "X25"}])
    unit.upstream_settled("X", None)
    released = unit.promise("X", 2**62)
    released.extend(unit.promise("C", 2**62))
    reference = OrderingUnit(OrderingSettings(clock_mode="watermark", lam=0, min_k=1000, window=1000), ["X", "C"])
    expected = reference.push("C", [{"ts": t, "n": f"C{t}"} for t in (12, 22, 32, 42)]).events
    expected += reference.push("X", [{"ts": 25, "n": "X25"}]).events
    for stream in ("X", "C"):
        expected += reference.promise(stream, 2**62).events
    assert detector.state == [e["n"] for e in expected] == ["C12", "C22", "X25", "C32", "C42"]
    assert unit.buffered == 0 and unit.ended
