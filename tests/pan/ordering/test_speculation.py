"""The speculative ordering unit (pan/ordering/speculation.py): seed 002's Fig. 8, snapshots, the memory cap,
equivalence."""

from __future__ import annotations

import json
import random
import time
from fractions import Fraction
from pathlib import Path

import pytest

from pan.buffers.streams import OutputStream
from pan.ordering.settings import OrderingSettings
from pan.ordering.speculation import SpeculativeUnit
from pan.ordering.speculation_settings import SpeculationSettings, validate_ordering_object
from pan.ordering.unit import OrderingUnit


class Detector:
    """A target whose state is every event name it processed, in order; it logs emits and restores."""

    def __init__(self) -> None:
        self.state: list[str] = []
        self.log: list[tuple[str, str | None]] = []

    def snapshot(self) -> bytes:
        return json.dumps(self.state).encode()

    def restore(self, snapshot: bytes) -> None:
        self.state = json.loads(snapshot)
        self.log.append(("restore", self.state[-1] if self.state else None))

    def process(self, events: list[dict]) -> None:
        for event in events:
            self.state.append(event["n"])
            self.log.append(("emit", event["n"]))


def fig8_unit(detector: Detector) -> SpeculativeUnit:
    # clk from events of type A, K by dynamic K-slack (lambda 0: K is the largest delay), alpha = 1/3.
    settings = OrderingSettings(clock=("A",), lam=0, window=1000)
    return SpeculativeUnit(settings, ["A", "B", "C"], detector, SpeculationSettings(alpha=Fraction(1, 3)))


def test_seed_fig8_emits_replays_and_purges_as_the_figure() -> None:
    """Seed 002 Fig. 8: emitted, restored (replayed) and purged events per arrival.

    B10 arrives between A11 and A12 (the figure leaves open where; before A11 gives the same
    columns). Purging is Algorithm 2's strict rule ts + K < clk, so C1, B4 and C5 leave the buffer
    one clock update after the narrative's <= would drop them (it argues C1 can go because no event
    with ts < 3 - K = 1 can come, which does not cover C1's own ts 1); emission and replay are the figure's.
    """
    detector = Detector()
    unit = fig8_unit(detector)
    expected = {
        # arrival: (K, clk, emitted or restored in order, purged)
        "A0": (0, 0, [("emit", "A0")], []),
        "A2": (0, 2, [("emit", "A2")], ["A0"]),
        # C1 lands in front of the AEP (A2): restore s2 (the state after A0), replay C1 and A2.
        "C1": (0, 2, [("restore", "A0"), ("emit", "C1"), ("emit", "A2")], []),
        "A3": (2, 3, [], []),  # 3 + 2/3 > 3: A3 waits
        "B4": (2, 3, [], []),
        "A6": (2, 6, [("emit", "A3"), ("emit", "B4")], ["C1", "A2", "A3"]),
        "C5": (2, 6, [("emit", "C5")], []),  # 5 + 2/3 <= 6, and A6 was not emitted: no replay
        "B8": (2, 6, [], []),
        "C7": (2, 6, [], []),
        "A11": (6, 11, [("emit", "A6"), ("emit", "C7"), ("emit", "B8")], ["B4"]),
        "B10": (6, 11, [], []),
        "A12": (6, 12, [("emit", "B10")], ["C5"]),  # 10 + 6/3 <= 12
        # C9 lands in front of the AEP (B10): restore s10 (the state after B8), replay C9 and B10.
        "C9": (6, 12, [("restore", "B8"), ("emit", "C9"), ("emit", "B10")], []),
    }
    for name, (k, clk, actions, purged) in expected.items():
        detector.log = []
        released = unit.push(name[0], [{"ts": int(name[1:]), "n": name}])
        assert (unit.k, unit.clk) == (k, clk), name
        assert detector.log == actions, name
        assert [e["n"] for e in released.events] == purged, name
        assert released.late == [], name
    assert unit.replays == 2
    assert detector.state == ["A0", "C1", "A2", "A3", "B4", "C5", "A6", "C7", "B8", "C9", "B10"]


def test_alpha_one_never_replays_what_buffering_would_not_release() -> None:
    detector = Detector()
    unit = SpeculativeUnit(OrderingSettings(clock=("A",), lam=0, window=1000), ["A", "B", "C"], detector)
    for name in ["A0", "A2", "C1", "A3", "B4", "A6"]:
        unit.push(name[0], [{"ts": int(name[1:]), "n": name}])
    # alpha 1 emits ts + K <= clk, the buffering unit's rule; C1 still lands behind A2 (K was 0).
    assert unit.replays == 1
    assert detector.state == ["A0", "C1", "A2", "A3", "B4"]


class Counter:
    """A target whose state changes only on events with ``count`` set: most snapshots repeat."""

    def __init__(self) -> None:
        self.n = 0
        self.seen: list[int] = []

    def snapshot(self) -> bytes:
        return json.dumps({"n": self.n, "pad": "x" * 1000}).encode()

    def restore(self, snapshot: bytes) -> None:
        self.n = json.loads(snapshot)["n"]

    def process(self, events: list[dict]) -> None:
        for event in events:
            self.n += event.get("count", 0)


def test_one_snapshot_per_emitted_batch_and_equal_snapshots_share_storage() -> None:
    target = Counter()
    unit = SpeculativeUnit(OrderingSettings(clock=("A",), lam=0, initial_k=100, window=1000), ["A", "B"], target,
                           SpeculationSettings(alpha=0))
    unit.push("B", [{"ts": 950 + i} for i in range(10)])
    unit.push("A", [{"ts": 1000}])  # alpha 0: all eleven emitted at once, in one batch; none settled (K 100)
    assert unit.emitted_unsettled == 11
    assert unit.snapshots_taken == 1 and unit.premature == 11
    one = len(target.snapshot())
    assert unit.snapshot_bytes == one
    for ts in (1001, 1002, 1003):  # one more event per call: a snapshot each, equal to the one before
        unit.push("A", [{"ts": ts}])
    assert unit.snapshots_taken == 4 and unit.snapshots_shared == 3
    assert unit.snapshot_bytes == one  # four references, one copy
    unit.push("B", [{"ts": 970, "count": 1}, {"ts": 990, "count": 1}])
    # 970 lands inside the first batch: the unit restores the state before that batch and replays everything
    # emitted since, with the new events, as one batch (one new snapshot).
    assert unit.replays == 1 and unit.replayed_events == 14
    assert unit.snapshots_taken == 5 and unit.snapshot_bytes == one
    assert target.n == 2


def test_a_replay_inside_a_partly_settled_batch_processes_its_settled_start_again() -> None:
    """The front batch's first events settle while the rest may still be replayed: the batch's snapshot stays,
    and a restore to it processes the settled ones again before the replay."""
    detector = Detector()
    unit = SpeculativeUnit(OrderingSettings(clock=("A",), lam=0, initial_k=10, max_k=10, window=1000),
                           ["A", "B"], detector, SpeculationSettings(alpha=0))
    unit.push("B", [{"ts": t, "n": f"B{t}"} for t in (100, 105, 113)])
    unit.push("A", [{"ts": 114, "n": "A114"}])  # B100 settles; alpha 0: B105, B113, A114 emitted as one batch
    assert detector.state == ["B100", "B105", "B113", "A114"]
    released = unit.push("A", [{"ts": 120, "n": "A120"}])  # settles ts < 120 - 10: B105
    assert [e["n"] for e in released.events] == ["B105"]
    detector.log = []
    unit.push("B", [{"ts": 107, "n": "B107"}])  # in front of B113, inside the batch whose start settled
    assert detector.log[:3] == [("restore", "B100"), ("emit", "B105"), ("emit", "B107")]  # from the batch's start
    assert detector.state == ["B100", "B105", "B107", "B113", "A114", "A120"]
    assert unit.replays == 1
    assert unit.flush().late == []
    assert detector.state == ["B100", "B105", "B107", "B113", "A114", "A120"]


def test_snapshot_cap_falls_back_to_buffering_and_resumes() -> None:
    target = Counter()
    one = len(target.snapshot())
    spec = SpeculationSettings(alpha=0, max_snapshot_bytes=3 * one)
    settings = OrderingSettings(clock=("A",), lam=0, initial_k=100, max_k=100, window=1000)  # K stays 100
    unit = SpeculativeUnit(settings, ["A", "B"], target, spec)
    for ts in (1000, 1001, 1002, 1003, 1004):  # one batch per call, every state differs
        unit.push("A", [{"ts": ts, "count": 1}])
    assert unit.emitted_unsettled == 3 and unit.capped and unit.fallbacks == 1
    assert unit.snapshot_bytes <= spec.max_snapshot_bytes
    assert target.n == 3  # the rest waits, as in a buffering unit
    unit.push("A", [{"ts": 1150, "count": 1}])  # settles ts < 1050: frees the snapshots, speculation resumes
    assert not unit.capped and unit.emitted_unsettled == 1
    assert target.n == 6
    unit.flush()
    assert target.n == 6 and unit.buffered == 0 and unit.snapshot_bytes == 0


def disordered(seed: int, streams: list[str], n: int) -> list[tuple[str, list[dict]]]:
    """Batches per stream, each stream mostly in ts order with some events delayed."""
    rng = random.Random(seed)
    per = {s: [] for s in streams}
    for i in range(n):
        s = rng.choice(streams)
        per[s].append({"ts": i * 10 + rng.randrange(3), "n": f"{s}{i}"})
    arrivals = []
    for s, evs in per.items():
        for e in evs:
            delay = rng.choice([0, 0, 0, 5, 40, 200]) if rng.random() < 0.3 else 0
            arrivals.append((e["ts"] + delay + rng.random(), s, e))
    arrivals.sort(key=lambda a: a[0])
    batches, i = [], 0
    while i < len(arrivals):
        size = rng.randint(1, 5)
        chunk = arrivals[i : i + size]
        i += size
        for s in streams:
            evs = [e for _, st, e in chunk if st == s]
            if evs:
                batches.append((s, evs))
    return batches


@pytest.mark.parametrize("mode", ["max", "watermark"])
@pytest.mark.parametrize("alpha", [Fraction(0), Fraction(1, 3), Fraction(1)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_settled_result_equals_the_buffering_units(mode: str, alpha: Fraction, seed: int) -> None:
    """After the end, the component's state is the buffering unit's output, late events alike (watermark mode).

    In max mode the speculative unit settles ties with clk - K one step later, so it may turn an
    event the buffering unit finds late into a replay; its late events are then a subset.
    """
    streams = ["A", "B", "C"]
    batches = disordered(seed, streams, 600)
    settings = OrderingSettings(clock_mode=mode, lam=0, window=50) if mode == "watermark" else \
        OrderingSettings(lam=0, window=50)
    buffering = OrderingUnit(settings, streams)
    reference, ref_late = [], []
    detector = Detector()
    unit = SpeculativeUnit(settings, streams, detector, SpeculationSettings(alpha=alpha))
    late = []
    for stream, events in batches:
        r = buffering.push(stream, events)
        reference += [e["n"] for e in r.events]
        ref_late += [e["n"] for e in r.late]
        late += [e["n"] for e in unit.push(stream, events).late]
    for s in streams:
        r = buffering.promise(s, 2**62)
        reference += [e["n"] for e in r.events]
        ref_late += [e["n"] for e in r.late]
        late += [e["n"] for e in unit.promise(s, 2**62).late]
    assert unit.buffered == 0 and unit.snapshot_bytes == 0
    if mode == "watermark":
        assert late == ref_late
        assert detector.state == reference
    else:
        assert set(late) <= set(ref_late)
        assert [n for n in detector.state if n not in set(ref_late)] == reference
    if alpha < 1:
        assert unit.premature > 0


def test_ordering_object_is_checked() -> None:
    assert validate_ordering_object({"mode": "speculative", "alpha": 0.5}) == []
    assert validate_ordering_object({"mode": "speculative", "alpha": "auto", "max_snapshot_bytes": 10}) == []
    problems = validate_ordering_object({"mode": "fast", "alpha": 2, "extra": 1})
    assert any("ordering.mode" in p for p in problems)
    assert any("ordering.extra" in p for p in problems)
    assert validate_ordering_object({"mode": "speculative", "alpha": 1.5})
    assert validate_ordering_object({"alpha": 0.5})  # alpha only with speculative
    assert validate_ordering_object({"mode": "speculative", "max_snapshot_bytes": -1})
    assert validate_ordering_object([1])
    assert validate_ordering_object({"mode": "speculative", "input_view": "settled"}) == []
    assert any("ordering.input_view" in p for p in validate_ordering_object({"mode": "speculative", "input_view": "x"}))
    assert any("ordering.input_view" in p for p in validate_ordering_object({"input_view": "raw"}))
    assert validate_ordering_object({"mode": "speculative", "alpha": "auto", "cpu": "component"}) == []
    for wrong in ({"alpha": "auto", "cpu": 1}, {"alpha": 0.5, "cpu": "machine"}):
        assert any("ordering.cpu" in p for p in validate_ordering_object({"mode": "speculative", **wrong}))


def test_a_speculative_worker_reads_raw_unless_told_otherwise() -> None:
    from pan.components.ordered import Merge
    from pan.config.specs import WorkerSpec

    def spec(ordering: dict | None) -> WorkerSpec:
        return WorkerSpec(name="M", type="merge", host="127.0.0.1", port=1, peer="p", inputs=["A"],
                          params={"output": "X"}, ordering=ordering)

    assert Merge.reads_raw(spec({"mode": "speculative"}))
    assert not Merge.reads_raw(spec({"mode": "speculative", "input_view": "settled"}))
    assert not Merge.reads_raw(spec(None))


def test_alpha_adaptation_follows_algorithm_3() -> None:
    """Halve while there is headroom, back to 1 when busy, then halve down to the bisection line and step."""
    from pan.ordering.alpha_controller import AlphaController

    control = AlphaController(low=0.8, high=0.9, step=0.05)
    assert [control.update(0.5) for _ in range(3)] == [0.5, 0.25, 0.125]
    assert control.update(0.85) == 0.125  # inside the target zone: unchanged
    assert control.update(0.95) == 1.0 and control.last_minimum == 0.125 and control.resets == 1
    # (1 - 0.125) / 2 = 0.4375: 1 -> 0.5 halves; 0.25 would cross the line, so it steps by 0.05 from then on.
    assert control.update(0.5) == 0.5
    assert control.update(0.5) == pytest.approx(0.45)
    assert control.update(0.5) == pytest.approx(0.40)
    assert control.slow


# --- retraction across levels: on-demand output, raw inputs ---------------------------------------------


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


def test_busy_share_is_the_busy_share_since_the_previous_reading() -> None:
    from pan.util.cpu_share import BusyShare

    readings = iter([(10.0, 100.0), (19.0, 110.0), (19.0, 120.0), (19.0, 120.0)])
    cpu = BusyShare(lambda: next(readings))
    assert cpu.known
    assert cpu.busy_share() == pytest.approx(0.9)  # 9 of 10 s busy
    assert cpu.busy_share() == 0.0  # idle
    assert cpu.busy_share() == 0.0  # no time passed: nothing to say
    assert BusyShare(None).busy_share() == 0.0 and not BusyShare(None).known


def test_the_loop_share_counts_a_thread_that_works_and_not_one_that_sleeps() -> None:
    """Running and waiting for a core both count as busy, so a spinning thread is busy whatever else the
    machine runs; a sleeping thread is not (the sleep is the idleness under test)."""
    from pan.util.cpu_share import BusyShare, loop_reader

    reader = loop_reader()
    if reader is None:
        pytest.skip("this kernel has no /proc/thread-self/schedstat")
    share = BusyShare(reader)
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        pass
    assert share.busy_share() > 0.8  # the kernel adds a wait to the total when it ends: allow one in progress
    time.sleep(0.5)
    assert share.busy_share() < 0.5


def test_the_loop_reader_is_none_without_schedstat(tmp_path: Path) -> None:
    from pan.util.cpu_share import loop_reader

    assert loop_reader(tmp_path / "missing") is None


@pytest.mark.parametrize("signal", ["loop", "machine", "component"])
def test_alpha_auto_backs_off_when_the_cpu_is_busy_unless_told_to_watch_the_component(signal: str) -> None:
    """A starved component works little while its loop waits for a core or every core is taken: with
    ``cpu: loop`` or ``cpu: machine`` that busy share counts too, so alpha goes back to 1 instead of
    halving; with ``cpu: component`` (the default) only the component's own work does."""
    from pan.components.testing import build_component
    from pan.util.cpu_share import BusyShare

    component = build_component("merge", {"output": "X", "clock_mode": "watermark"}, ["A"],
                                ordering={"mode": "speculative", "alpha": "auto", "cpu": signal})
    if signal == "component":
        assert component._cpu_share is None
    else:
        assert component._cpu_share is not None
        busy = iter([(0.0, 0.0), (0.95, 1.0), (1.9, 2.0)])  # 95% busy
        component._cpu_share = BusyShare(lambda: next(busy))
    for _ in range(2):
        component.unit.adapt(component._busy_share(0.1))  # the component itself works 10% of the time
    assert component.unit.alpha == (Fraction(1, 4) if signal == "component" else 1)


def test_alpha_auto_watches_the_component_by_default() -> None:
    from pan.components.testing import build_component

    component = build_component("merge", {"output": "X", "clock_mode": "watermark"}, ["A"],
                                ordering={"mode": "speculative", "alpha": "auto"})
    assert component.unit.speculation.cpu == "component" and component._cpu_share is None
