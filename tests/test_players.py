"""player_average: one mean sample per player per 20 ms slot, exact and deterministic."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from pan.workflow import WorkflowError
from tests.harness import build_component, output_tuples
from tests.match_feed import OFFLINE, all_outputs, feed_jittered, load_match, sensor_stream_of
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
    comp.finish()
    out = output_tuples(comp, "A2")
    assert [t["ts"] for t in out] == [T0 + SLOT_PS, T0 + 2 * SLOT_PS]
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
    assert len(runs[0]["A1"]) == 4 * 50 - 1  # one per slot but the last


@pytest.fixture(scope="session")
def match(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return load_match(tmp_path_factory)


def test_match_outputs(match: dict[str, Any]) -> None:
    """On a generated match: 50 Hz per player, 20 ms boundaries, plausible speeds."""
    samples = match["player_streams"]
    span_slots = (match["last_ts"] - match["first_ts"]) // SLOT_PS
    for player, tuples in samples.items():
        assert abs(len(tuples) - span_slots) <= 2, player
        assert all(t["ts"] % SLOT_PS == 0 for t in tuples)
        assert max(t["v"] for t in tuples) * 3.6e-6 < 40.0
    assert match["player_counters"]["bad"] == 0 and match["player_counters"]["foreign"] == 0

