"""Q1 running analysis: exact band times and distances, windows, game time, determinism."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import pytest

from pan.components.testing import build_component, output_tuples
from pan.config.specs import WorkflowError
from tests.support.match_feed import (
    OFFLINE,
    all_outputs,
    feed_in_chunks,
    feed_jittered,
    load_match,
    merged,
    player_stream_of,
)
from workers.debs import FIRST_HALF, PLAYERS, PS_PER_MS, PS_PER_S, SECOND_HALF
from workers.gametime import L1
from workers.running import BANDS, band_of

S1, E1 = FIRST_HALF
S2, E2 = SECOND_HALF
STEP = 20 * PS_PER_MS


def sample(player: str, ts: int, x: float = 0.0, y: float = 0.0) -> dict[str, Any]:
    """A player_average tuple; its ``v`` (mean sensor |v|) is deliberately nonsense: Q1 must not use it."""
    return {"ts": ts, "player": player, "x": x, "y": y, "z": 0.0, "v": 99e6, "a": 0.0}


def along_x(player: str, steps: list[tuple[int, float]]) -> list[dict[str, Any]]:
    """Samples at the given ts, moving along x: each at ``v`` µm/s (metres per second * 1e6) until the next."""
    out, x = [], 1000.0
    for n, (ts, v) in enumerate(steps):
        out.append(sample(player, ts, x))
        if n + 1 < len(steps):
            x += v * (steps[n + 1][0] - ts) / 1e15  # mm
    return out


def build(**params: Any):
    return build_component("running", {**OFFLINE, **params}, buffer_size=20_000)


def totals(row: dict[str, Any]) -> tuple[dict[str, int], dict[str, float]]:
    return {b: row[f"{b}_time_ps"] for b in BANDS}, {b: row[f"{b}_distance"] for b in BANDS}


def test_bands_by_speed() -> None:
    kmh = 1 / 3.6e-6  # µm/s per km/h
    cases = {0: 0, 277777: 0, 277778: 1, 11 * kmh - 1: 1, 11 * kmh + 1: 2, 14 * kmh - 1: 2, 14 * kmh + 1: 3,
             17 * kmh - 1: 3, 17 * kmh + 1: 4, 24 * kmh - 1: 4, 24 * kmh + 1: 5, 10**8: 5}
    assert {v: band_of(v) for v in cases} == cases


def test_outputs_and_params() -> None:
    comp = build(players=["A2", "B7"], windows=["1min", "wholeGame"])
    assert list(comp.ctx.inputs) == ["A2", "B7"]
    assert [s for s in comp.ctx.outputs if not s.endswith("_late")] == [
        "RUN_A2", "RUNAGG_1min_A2", "RUNAGG_wholeGame_A2", "RUN_B7", "RUNAGG_1min_B7", "RUNAGG_wholeGame_B7"]
    assert len(build().ctx.outputs) == 16 * 6 + 1
    for bad in ({"players": ["X1"]}, {"windows": ["2min"]}, {"agg_period_ms": 30}, {"agg_period_ms": 0}):
        with pytest.raises(WorkflowError):
            build(**bad)


def test_constant_speed_gives_exact_times_and_distances() -> None:
    comp = build(players=["A2"])
    v = 5_000_000  # 5 m/s = 18 km/h: high
    comp.process(along_x("A2", [(S1 + n * STEP, v) for n in range(-50, 90 * 50 + 1)]))
    agg = {w: output_tuples(comp, f"RUNAGG_{w}_A2")[-1] for w in ("1min", "5min", "wholeGame")}
    assert agg["wholeGame"]["ts"] == S1 + 90 * PS_PER_S
    times, dist = totals(agg["wholeGame"])
    assert times == {**dict.fromkeys(BANDS, 0), "high": 90 * PS_PER_S}
    assert dist == {**dict.fromkeys(BANDS, 0.0), "high": 450.0}
    assert totals(agg["5min"]) == totals(agg["wholeGame"])
    times, dist = totals(agg["1min"])  # game clock 90 s: seconds 30..89
    assert times["high"] == 60 * PS_PER_S and dist["high"] == 300.0
    runs = output_tuples(comp, "RUN_A2")
    assert len(runs) == 90 * 50  # one per 20 ms of play, none before kick-off
    assert runs[-1] == {"i": len(runs) - 1, "ts": S1 + 90 * PS_PER_S, "ts_start": S1, "ts_stop": S1 + 90 * PS_PER_S,
                        "player": "A2", "intensity": "high", "distance": 450.0, "speed": 18.0}


def test_windows_slide_exactly() -> None:
    comp = build(players=["A2"], windows=["1min"])
    comp.process(along_x("A2", [(S1 + n * STEP, 5_000_000 if n < 30 * 50 else 0) for n in range(90 * 50 + 1)]))
    out = {t["ts"]: t for t in output_tuples(comp, "RUNAGG_1min_A2")}
    # At 70.02 s the window holds the current partial second and 59 whole ones: seconds 11..70.
    times, dist = totals(out[S1 + 70 * PS_PER_S + STEP])
    assert times["high"] == 19 * PS_PER_S and dist["high"] == 95.0
    assert times["standing"] == 40 * PS_PER_S + STEP and dist["standing"] == 0.0
    # On a whole second it is exactly the last minute.
    times, _ = totals(out[S1 + 70 * PS_PER_S])
    assert times["high"] == 20 * PS_PER_S and times["standing"] == 40 * PS_PER_S
    times, _ = totals(out[S1 + 90 * PS_PER_S])
    assert times == {**dict.fromkeys(BANDS, 0), "standing": 60 * PS_PER_S}


def test_only_game_time_counts() -> None:
    comp = build(players=["A2"], windows=["1min", "wholeGame"])
    v = 2_000_000  # 7.2 km/h: trot
    ts = [S1 - 3 * PS_PER_S + n * STEP for n in range(5 * 50)]  # 3 s before kick-off to 2 s after
    ts += [E1 - 2 * PS_PER_S + n * STEP for n in range(6 * 50)]  # across the end of the first half
    ts += [S2 - PS_PER_S + n * STEP for n in range(3 * 50)]  # across the second kick-off
    comp.process(along_x("A2", [(t, v) for t in ts]))
    whole = output_tuples(comp, "RUNAGG_wholeGame_A2")
    first_end = max(t for t in ts if t < S2)
    counted = (ts[5 * 50 - 1] - S1) + (E1 - (E1 - 2 * PS_PER_S)) + (ts[-1] - S2)
    assert whole[-1]["trot_time_ps"] == counted
    assert all(S1 < t["ts"] <= E1 or S2 < t["ts"] <= E2 for t in whole)
    assert E1 in {t["ts"] for t in whole} and first_end > E1  # the clipped end of play is emitted
    # The 1 min window spans the break: it still holds the end of the first half.
    last_1min = output_tuples(comp, "RUNAGG_1min_A2")[-1]
    g = L1 + ts[-1] - S2
    lowest = (math.ceil(g / PS_PER_S) - 60) * PS_PER_S
    assert last_1min["trot_time_ps"] == (ts[-1] - S2) + min(2 * PS_PER_S, L1 - lowest)
    runs = output_tuples(comp, "RUN_A2")
    assert {(r["ts_start"]) for r in runs} == {S1, E1 - 2 * PS_PER_S, S2}  # no run spans the break


def test_run_segments_change_with_intensity_and_gaps() -> None:
    comp = build(players=["A2"], windows=["wholeGame"])
    speeds = [0] * 50 + [8_000_000] * 50 + [0] * 50  # 1 s standing, 1 s sprint (28.8 km/h), standing
    steps = [(S1 + n * STEP, v) for n, v in enumerate(speeds)]
    t = S1 + 149 * STEP
    steps.append((t + PS_PER_S, 4_000_000))  # after a gap of exactly 1 s standing (counted) ...
    steps.append((t + 2 * PS_PER_S + 1, 8_000_000))  # ... one over 1 s, covering 4 m: not counted
    steps.append((t + 2 * PS_PER_S + 1 + STEP, 0))
    comp.process(along_x("A2", steps))
    runs = output_tuples(comp, "RUN_A2")
    last_of = {}
    for r in runs:
        last_of[r["ts_start"]] = r
    segs = list(last_of.values())
    assert [(s["intensity"], s["ts_start"] - S1, s["ts_stop"] - S1) for s in segs] == [
        ("standing", 0, PS_PER_S),
        ("sprint", PS_PER_S, 2 * PS_PER_S),
        ("standing", 2 * PS_PER_S, t - S1 + PS_PER_S),
        ("sprint", t - S1 + 2 * PS_PER_S + 1, t - S1 + 2 * PS_PER_S + 1 + STEP),
    ]
    assert segs[1]["distance"] == 8.0 and segs[1]["speed"] == pytest.approx(28.8, rel=1e-12)
    assert comp.counters()["gaps"] == 1
    whole = output_tuples(comp, "RUNAGG_wholeGame_A2")[-1]
    assert whole["standing_time_ps"] == t - S1 and whole["sprint_time_ps"] == PS_PER_S + STEP


def test_bad_samples_are_counted_not_fatal() -> None:
    comp = build(players=["A2"])
    good = along_x("A2", [(S1 + n * STEP, 1_000_000) for n in range(10)])
    comp.process([
        *good[:5],
        {"ts": S1 + 4 * STEP + 1, "player": "A2"},            # no position
        {**good[5], "ts": "x"},                               # ts not an int
        {**good[5], "x": math.nan},                           # not finite
        {**good[5], "y": "0"},                                # not a number
        {**good[5], "player": "Z9"},                          # not ours
        {**good[5], "player": ["A2"]},                        # unhashable name
        good[4],                                              # same ts again
        *good[5:],
    ])
    c = comp.counters()
    assert (c["bad"], c["foreign"], c["out_of_order"]) == (4, 2, 1)
    assert output_tuples(comp, "RUNAGG_wholeGame_A2")[-1]["trot_time_ps"] == 9 * STEP


def test_distance_is_the_path_of_the_averaged_position_not_the_sensors_speed() -> None:
    """A goalkeeper walks 1 m/s along x while swinging both hands (issue 11, fix 10).

    The hand sensors report 6 m/s and move 0.4 m to either side, mirror images of each other, so the mean of
    the four sensors walks exactly the body's straight line: 10 m in 10 s, at 3.6 km/h (trot). The mean
    sensor |v| (3.5 m/s) would make it 35 m of low-speed running.
    """
    from tests.support.match_feed import run_players

    rows = []
    for k in range(-100, 2001):  # 200 Hz, from 0.5 s before kick-off to 10 s after
        ts = S1 + k * 5 * PS_PER_MS
        body = 20000 + 5 * k  # mm: 1 m/s
        swing = round(400 * math.sin(2 * math.pi * k / 160))  # 0.8 s period
        for sid, x, y, v in ((13, body, -150, 1_000_000), (14, body, 150, 1_000_000),  # legs
                             (97, body + swing, -400 + swing, 6_000_000), (98, body - swing, 400 - swing, 6_000_000)):
            rows.append({"sid": sid, "ts": ts, "x": x, "y": y, "z": 100, "v": v, "a": 0})
    averaged = run_players(rows, ["A1"])["A1"]
    assert {t["y"] for t in averaged} == {0.0}
    comp = build(players=["A1"], windows=["wholeGame"])
    comp.process([{k: v for k, v in t.items() if k != "i"} for t in averaged])
    whole = output_tuples(comp, "RUNAGG_wholeGame_A1")[-1]
    times, dist = totals(whole)
    walked = (whole["ts"] - S1) / PS_PER_S  # metres at 1 m/s
    assert walked > 9.9 and set(times) == set(BANDS) and times["trot"] == whole["ts"] - S1
    assert dist["trot"] == pytest.approx(walked, rel=1e-6) and sum(dist.values()) == dist["trot"]
    runs = output_tuples(comp, "RUN_A1")
    assert {r["intensity"] for r in runs} == {"trot"} and runs[-1]["speed"] == pytest.approx(3.6, rel=1e-6)


def random_samples(seed: int, players: list[str], seconds: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    out = []
    for p in players:
        v, heading, x, y = 0.0, 0.0, rnd.uniform(0, 52483), rnd.uniform(-33960, 33965)
        for n in range(seconds * 50):
            v = min(max(0.0, v + rnd.gauss(0, 300_000)), 9e6)  # µm/s
            heading += rnd.gauss(0, 0.2)
            x, y = x + v * STEP / 1e15 * math.cos(heading), y + v * STEP / 1e15 * math.sin(heading)
            if rnd.random() < 0.01:
                continue  # a missing slot
            out.append(sample(p, S1 - PS_PER_S + n * STEP, x, y))
    out.sort(key=lambda s: s["ts"])
    return out


def test_same_outputs_whatever_the_batching_and_arrival_jitter() -> None:
    samples = random_samples(3, ["A2", "B5", "B8"], 40)
    runs = []
    for seed, delay_ms, batch in ((0, 0, 1), (1, 200, 7), (2, 500, 60)):
        comp = build_component("running", {"players": ["A2", "B5", "B8"], "initial_k": 3 * PS_PER_S,
                                           "window": 10**9}, buffer_size=20_000)
        feed_jittered(comp, samples, player_stream_of, seed, delay_ms * PS_PER_MS, batch)
        assert comp.counters()["ordering"]["late"] == 0
        runs.append(all_outputs(comp))
    assert runs[0] == runs[1] == runs[2]
    assert len(runs[0]["RUNAGG_1min_B5"]) > 39 * 45


@pytest.fixture(scope="session")
def match(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return load_match(tmp_path_factory)


@pytest.mark.process
def test_generated_match(match: dict[str, Any]) -> None:
    streams = match["player_streams"]
    samples = merged(streams, list(PLAYERS))
    comp = build_component("running", dict(OFFLINE), buffer_size=50_000)
    feed_in_chunks(comp, samples, player_stream_of, PS_PER_S)
    c = comp.counters()
    assert c["bad"] == c["foreign"] == c["out_of_order"] == c["gaps"] == 0
    for p in PLAYERS:
        tss = [t["ts"] for t in streams[p]]
        covered = sum(max(0, min(b, E1) - max(a, S1)) for a, b in itertools.pairwise(tss))
        whole = output_tuples(comp, f"RUNAGG_wholeGame_{p}")[-1]
        times, dist = totals(whole)
        assert sum(times.values()) == covered, p
        metres = sum(dist.values())
        assert 0 < metres <= 10.0 * covered / PS_PER_S, p  # never above 36 km/h on average
        runs = output_tuples(comp, f"RUN_{p}")
        assert max(r["speed"] for r in runs) <= 36.0, p
        # The distance is the path length of the averaged position, goalkeepers included (the part of each
        # step within play; the rest is nm rounding).
        path = sum(math.hypot(b["x"] - a["x"], b["y"] - a["y"]) * (min(b["ts"], E1) - max(a["ts"], S1))
                   / (b["ts"] - a["ts"]) for a, b in itertools.pairwise(streams[p]) if b["ts"] > S1) / 1000
        assert metres == pytest.approx(path, rel=1e-6), p
