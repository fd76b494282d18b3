"""The speculative ordering unit (pan/ordering/speculation.py): seed 002's Fig. 8, snapshots, the memory cap,
and equivalence with the buffering unit once everything settled."""

from __future__ import annotations

import json
import random
from fractions import Fraction

import pytest

from pan.ordering.settings import OrderingSettings
from pan.ordering.speculation import SpeculativeUnit
from pan.ordering.speculation_settings import SpeculationSettings
from pan.ordering.unit import OrderingUnit
from tests.pan.ordering.speculation_targets import Detector


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
