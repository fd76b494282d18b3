"""player_average: one mean sample per player per 20 ms slot, exact and deterministic."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections.abc import Callable
from typing import Any

import pytest

from pan.components.testing import build_component, output_tuples
from pan.config.specs import WorkflowError
from pan.wire.progress import StreamProgress
from tests.conftest import wait_until
from tests.support.match_feed import OFFLINE, all_outputs, feed_jittered, load_match, sensor_stream_of
from workers.debs import PS_PER_MS, PS_PER_S
from workers.players import SLOT_PS

T0 = 10_000 * PS_PER_S  # a multiple of 20 ms


def row(sid: int, ts: int, x: int = 0, y: int = 0, z: int = 0, v: int = 0, a: int = 0) -> dict[str, Any]:
    return {"sid": sid, "ts": ts, "x": x, "y": y, "z": z, "v": v, "a": a, "vx": 0, "vy": 0, "vz": 0,
            "ax": 0, "ay": 0, "az": 0}


def build(**params: Any):
    return build_component("player_average", {**OFFLINE, **params}, buffer_size=20_000)


def test_inputs_and_outputs_follow_players() -> None:
    comp = build(players=["A1", "B2", "REFEREE"])
    assert list(comp.ctx.inputs) == [f"SENSOR{s}" for s in (13, 14, 97, 98, 63, 64, 105, 106)]
    assert sorted(comp.ctx.outputs) == ["A1", "A1_late", "B2", "REFEREE"]  # late events: first output + _late
    everyone = build()
    assert len(everyone.ctx.outputs) == 18 and len(everyone.ctx.inputs) == 2 * 17 + 4


@pytest.mark.parametrize("players", [["Z9"], [], "A1", ["A1", "A1"]])
def test_bad_players_param_is_rejected(players: Any) -> None:
    with pytest.raises(WorkflowError):
        build(players=players)


def test_mean_of_latest_rows_per_slot_boundary() -> None:
    comp = build(players=["A2"])  # sensors 47, 16
    ms = PS_PER_MS
    comp.feed("SENSOR47", [row(47, T0 + 1 * ms, x=100, y=10, v=1000), row(47, T0 + 6 * ms, x=110, y=12, v=1200)])
    comp.feed("SENSOR16", [row(16, T0 + 3 * ms, x=201, y=-5, z=7, v=3001, a=9)])
    # Next slot: closes [T0, T0+20ms) with the latest row of each sensor.
    comp.feed("SENSOR47", [row(47, T0 + 21 * ms, x=120, v=1400)])
    comp.feed("SENSOR16", [row(16, T0 + 23 * ms, x=221, v=3201)])
    # Skips two slots: one tuple for the boundary after the last slot with data.
    comp.feed("SENSOR47", [row(47, T0 + 85 * ms, x=500)])
    comp.finish()  # the end of the data closes the last slot, [80, 100) ms
    out = output_tuples(comp, "A2")
    assert [t["ts"] for t in out] == [T0 + SLOT_PS, T0 + 2 * SLOT_PS, T0 + 5 * SLOT_PS]
    first = out[0]
    assert first == {"i": 0, "ts": T0 + SLOT_PS, "player": "A2", "x": 155.5, "y": 3.5, "z": 3.5, "v": 2100.5, "a": 4.5}
    assert out[1]["x"] == (120 + 221) / 2 and out[1]["v"] == (1400 + 3201) / 2


def test_goalkeeper_hands_count_and_stale_sensors_drop_out() -> None:
    comp = build(players=["B1"])  # 61, 62 legs; 99, 100 hands
    for k, sid in enumerate((61, 62, 99, 100)):
        comp.feed(f"SENSOR{sid}", [row(sid, T0 + k * PS_PER_MS, x=1000 * (k + 1), z=100 * k)])
    comp.feed("SENSOR61", [row(61, T0 + 30 * PS_PER_MS, x=9000)])
    # 61 keeps reporting; the others fall silent and leave the mean after 1 s.
    late = [row(61, T0 + 30 * PS_PER_MS + n * 20 * PS_PER_MS, x=9000) for n in range(1, 60)]
    comp.feed("SENSOR61", late)
    comp.finish()
    out = output_tuples(comp, "B1")
    assert out[0]["x"] == (1000 + 2000 + 3000 + 4000) / 4 and out[0]["z"] == 150.0
    assert out[1]["x"] == (9000 + 2000 + 3000 + 4000) / 4
    boundary = T0 + PS_PER_S + 20 * PS_PER_MS  # 62/99/100 rows at T0+1..3 ms are older than 1 s by then
    by_ts = {t["ts"]: t["x"] for t in out}
    assert by_ts[boundary - SLOT_PS] == (9000 + 2000 + 3000 + 4000) / 4
    assert by_ts[boundary] == 9000.0


def test_referee_stream() -> None:
    comp = build(players=["REFEREE"])
    comp.feed("SENSOR105", [row(105, T0, x=10, y=20), row(105, T0 + 40 * PS_PER_MS, x=12)])
    comp.feed("SENSOR106", [row(106, T0 + PS_PER_MS, x=30, y=40)])
    comp.finish()
    out = output_tuples(comp, "REFEREE")
    assert out[0]["player"] == "REFEREE" and out[0]["x"] == 20.0 and out[0]["y"] == 30.0


def test_bad_rows_are_counted_not_fatal() -> None:
    comp = build(players=["A2"])
    good = [row(47, T0 + n * 5 * PS_PER_MS, x=n) for n in range(10)]
    bad: list[dict[str, Any]] = [
        {"sid": 47, "ts": T0 + 1},                       # fields missing
        {**row(47, T0 + 2), "x": "12"},                  # not a number
        {**row(47, T0 + 3), "v": -5},                    # negative speed
        {**row(47, T0 + 4), "y": math.nan},              # not finite
        {**row(47, T0 + 5), "z": True},                  # bool is no number
    ]
    comp.process([*good[:5], *bad, {**row(999, T0 + 6)}, *good[5:]])  # 999: no sensor of A2
    comp.process([row(47, T0)])  # behind this sensor's newer row
    counters = comp.counters()
    assert counters["bad"] == 5 and counters["foreign"] == 1 and counters["stale"] == 1
    assert [t["x"] for t in output_tuples(comp, "A2")] == [3.0, 7.0]  # latest rows of slots 0 and 1


def test_float_fields_are_accepted() -> None:
    comp = build(players=["A2"])
    comp.process([{**row(47, T0), "x": 1.5}, row(47, T0 + SLOT_PS)])
    assert output_tuples(comp, "A2")[0]["x"] == 1.5


def random_sensor_rows(seed: int, seconds: int) -> list[dict[str, Any]]:
    """Rows of A1 (4 sensors), A2 and the referee at 200 Hz with random phases, dropouts and values."""
    rnd = random.Random(seed)
    rows = []
    for sid in (13, 14, 97, 98, 47, 16, 105, 106):
        phase = rnd.randrange(5 * PS_PER_MS)
        for n in range(seconds * 200):
            if rnd.random() < 0.02:
                continue
            rows.append(row(sid, T0 + phase + n * 5 * PS_PER_MS, x=rnd.randrange(52483), y=rnd.randrange(-33960, 33965),
                            z=rnd.randrange(2000), v=rnd.randrange(10**7), a=rnd.randrange(10**8)))
    rows.sort(key=lambda r: r["ts"])
    return rows


def test_same_outputs_whatever_the_batching_and_arrival_jitter() -> None:
    rows = random_sensor_rows(1, 4)
    runs = []
    for seed, delay_ms, batch in ((0, 0, 1), (1, 100, 10), (2, 300, 40)):
        comp = build_component("player_average", {"players": ["A1", "A2", "REFEREE"], "initial_k": 2 * PS_PER_S,
                                                  "window": 10**9}, buffer_size=20_000)
        feed_jittered(comp, rows, sensor_stream_of, seed, delay_ms * PS_PER_MS, batch)
        assert comp.counters()["ordering"]["late"] == 0
        runs.append(all_outputs(comp))
    assert runs[0] == runs[1] == runs[2]
    assert len(runs[0]["A1"]) == 4 * 50  # one per slot, the last one closed by the end of the data


@pytest.fixture(scope="session")
def match(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return load_match(tmp_path_factory)


@pytest.mark.process
def test_match_outputs(match: dict[str, Any]) -> None:
    """On a generated match: 50 Hz per player, 20 ms boundaries, plausible speeds."""
    samples = match["player_streams"]
    span_slots = (match["last_ts"] - match["first_ts"]) // SLOT_PS
    for player, tuples in samples.items():
        assert abs(len(tuples) - span_slots) <= 2, player
        assert all(t["ts"] % SLOT_PS == 0 for t in tuples)
        assert max(t["v"] for t in tuples) * 3.6e-6 < 40.0
    assert match["player_counters"]["bad"] == 0 and match["player_counters"]["foreign"] == 0



class Feeder:
    """Drives a running player_average the way the pull tasks do: rows with indices, then the producer's ``wm``."""

    def __init__(self, comp: Any) -> None:
        self.comp = comp
        self.next_index: dict[str, int] = {}

    def rows(self, sid: int, tss: list[int]) -> None:
        stream = self.comp.ctx.inputs[f"SENSOR{sid}"]
        start = self.next_index.get(stream.name, 0)
        stream.add([{**row(sid, ts, x=sid * 100 + n), "i": start + n} for n, ts in enumerate(tss)])
        self.next_index[stream.name] = start + len(tss)

    def promise(self, sid: int, ts: int) -> None:
        self.comp.ctx.inputs[f"SENSOR{sid}"].set_progress(StreamProgress(wm=ts))


async def started_a3_and_a2() -> tuple[Any, Feeder, Callable[[], int], asyncio.Task[None]]:
    """A running player_average of A3 and A2 (watermark mode), its feeder, A2's output watermark and its task."""
    comp = build_component("player_average", {"players": ["A3", "A2"], "clock_mode": "watermark"},
                           buffer_size=20_000)
    await comp.start()
    out = comp.ctx.outputs["A2"]

    def a2_wm() -> int:
        wm = out.progress.wm
        return wm if isinstance(wm, int) else -1

    return comp, Feeder(comp), a2_wm, asyncio.create_task(comp.run())


async def stopped(comp: Any, task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await comp.stop()


async def player_outage_run(outage_promise: bool) -> tuple[list[dict[str, Any]], bool]:
    """A3 sends throughout; A2's sensors stop mid-slot (5 and 13 ms after T0) and come back at 400 ms.

    With ``outage_promise`` the edge declares A2's silent sensors idle and promises the others'
    progress for them (as the forwarder does during a drop outage), so the release point moves
    past A2's open slot while A2 sends nothing. Returns A2's tuples and whether the slot's tuple
    was out before A2's output watermark passed its ts.
    """
    ms = PS_PER_MS
    comp, feed, a2_wm, task = await started_a3_and_a2()
    try:
        for sid in (49, 88):
            feed.rows(sid, [T0 + n * 5 * ms for n in range(60)])  # up to 295 ms
        feed.rows(47, [T0 + 5 * ms])
        feed.rows(16, [T0 + 13 * ms])  # A2's last rows before the outage: slot [T0, T0 + 20 ms) is open
        owed = T0 + SLOT_PS
        in_time = True
        if outage_promise:
            for sid in (47, 16):
                feed.promise(sid, T0 + 295 * ms)
            await wait_until(lambda: a2_wm() > owed, timeout_s=60)  # A2's watermark moves on during the outage
            in_time = any(t["ts"] == owed for t in output_tuples(comp, "A2"))
        for sid in (49, 88):
            feed.rows(sid, [T0 + n * 5 * ms for n in range(60, 120)])  # up to 595 ms
        for sid in (47, 16):  # reconnect
            feed.rows(sid, [T0 + 400 * ms + n * 5 * ms for n in range(40)])
        for sid in (49, 88, 47, 16):
            feed.promise(sid, 2**62)
        await wait_until(lambda: a2_wm() >= 2**62, timeout_s=60)  # the end reaches A2's output
    finally:
        await stopped(comp, task)
    return output_tuples(comp, "A2"), in_time


def test_open_slot_is_emitted_before_the_watermark_passes_it_during_an_outage() -> None:
    """Fix (a) of the ordering-modes acceptance: a silent player's open slot is never late downstream.

    Before, the tuple of A2's open slot waited for A2's next row (after the outage)
    while A2's output watermark (release point - 100 ms) had already passed it, so
    every consumer saw it late. It now goes out once the release point passes the
    slot's end, and the tuples are the same as without the outage promises.
    """
    with_outage, in_time = asyncio.run(player_outage_run(outage_promise=True))
    plain, _ = asyncio.run(player_outage_run(outage_promise=False))
    assert in_time, "A2's output watermark passed its open slot before the slot's tuple went out"
    assert with_outage == plain
    ts = [t["ts"] for t in with_outage]
    assert ts[0] == T0 + SLOT_PS and ts[1] == T0 + 400 * PS_PER_MS + SLOT_PS  # one tuple for the gap
    assert with_outage[0]["x"] == (4700 + 1600) / 2
    assert len(ts) == 11 and ts == sorted(ts)  # 400..595 ms: 10 slots, the last one closed by the end


async def early_end_run(end_early: bool) -> tuple[list[dict[str, Any]], bool]:
    """A2 sends rows up to 53 ms and, with ``end_early``, ends while A3 is still at 41 ms.

    The unit then holds A2's rows from 43 ms on (A3 has not passed them) while A2's
    inputs already say "ended". Returns A2's tuples and whether the tuple of A2's
    slot [20, 40) ms was out before A2's output watermark passed 40 ms.
    """
    ms = PS_PER_MS
    comp, feed, a2_wm, task = await started_a3_and_a2()
    owed = T0 + 2 * SLOT_PS
    try:
        for sid in (47, 16):
            feed.rows(sid, [T0 + 3 * ms + n * 5 * ms for n in range(11)])  # 3..53 ms
            if end_early:
                feed.promise(sid, 2**62)
        for sid in (49, 88):
            feed.rows(sid, [T0 + n * ms for n in range(42)])  # up to 41 ms: the release point passes 40 ms
        await wait_until(lambda: a2_wm() >= owed, timeout_s=60)
        in_time = any(t["ts"] == owed for t in output_tuples(comp, "A2"))
        for sid in (49, 88, 47, 16):
            feed.promise(sid, 2**62)
        await wait_until(lambda: a2_wm() >= 2**62, timeout_s=60)
    finally:
        await stopped(comp, task)
    return output_tuples(comp, "A2"), in_time


def test_an_end_that_arrives_while_the_players_rows_are_held_changes_nothing() -> None:
    """CI saw it under load: the end of a player's sensors came while the unit still held the
    player's last rows; its open slot was skipped as "the last one", the output watermark passed
    it, and the tuple went out late once the rows were released (late at every consumer)."""
    early, in_time = asyncio.run(early_end_run(end_early=True))
    plain, _ = asyncio.run(early_end_run(end_early=False))
    assert in_time, "A2's output watermark passed 40 ms before the tuple of its slot [20, 40) ms went out"
    assert early == plain
    assert [t["ts"] for t in plain] == [T0 + n * SLOT_PS for n in (1, 2, 3)]  # the last slot [40, 60) included

