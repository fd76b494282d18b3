"""Spark batch reference (`pan reference`): hand-made exact cases, and equality with the streaming components.

The comparison runs the streaming player_average, running and heatmap, and the
Q2 chain active_ball -> ball_hits -> player/team possession, offline
(pan/components/testing.py) on a generated match and checks every recorded tuple against
the batch output: ints exactly, floats within 1e-9 relative. Q2's hand-made
cases are in tests/workers/test_reference_q2.py.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from pan.cli import main
from pan.components.testing import output_tuples
from workers.debs import FIRST_HALF, PLAYERS, PS_PER_MS, PS_PER_S, SECOND_HALF
from workers.sparse_heatmap import PPM, dense, dense_percent

S1, E1 = FIRST_HALF
S2 = SECOND_HALF[0]
SLOT = 20 * PS_PER_MS
ROW_PS = 5 * PS_PER_MS  # 200 Hz


def read_stream(folder: Path, stream: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (folder / f"{stream}.jsonl").read_bytes().splitlines()]


def sensor_rows(sid: int, start: int, stop: int, x: int, y: int, v: int) -> list[str]:
    return [f"{sid},{ts},{x},{y},0,{v},0,10000,0,0,0,0,0" for ts in range(start, stop, ROW_PS)]


def running_rows(sid: int, start: int, stop: int, v: int) -> list[str]:
    """A sensor running along x from (20000, 0) mm at ``start`` at ``v`` µm/s, rows every 5 ms from ``start``.

    Positions are whole mm (rounded half up), so four rows later it is always exactly ``v`` * 20 ms further.
    """
    return [f"{sid},{ts},{20000 + ((ts - RUN_START) * v // 10**14 + 5) // 10},0,0,{v},0,10000,0,0,0,0,0"
            for ts in range(start, stop, ROW_PS)]


# A2 (sensors 47, 16) runs along x at 2.5 m/s (9 km/h, trot) for 3 s inside the first half.
RUN_START = S1 + 10 * PS_PER_S
RUN_STOP = RUN_START + 3 * PS_PER_S
V = 2_500_000
# B3 (sensors 65, 66) stands at (1000, 0) from 2 s before kick-off to 3.3 s after; sensor 66 stood at
# (3000, 0) and stopped 1.1 s before kick-off, so it leaves the average before play starts.
STAND_START, STAND_STOP = S1 - 2 * PS_PER_S, S1 + 3300 * PS_PER_MS
SIXTY_SIX_STOP = S1 - 1100 * PS_PER_MS
# B4 (sensors 67, 68) stands 100 mm inside the 5th of the 13 rows (y = Y_MIN + 4 * 67925 / 13 + 100): fine row 30 of
# 100, whose centre lies in the 4th row, so an 8x13 map summed from 64x100 would put B4 one row too low.
EDGE_Y = -33960 + 21000
# A5 (sensors 53, 54) changes speed and place at random across half time, long enough after the
# second kick-off for the 1 min windows to reach back across the break.
BREAK_SPANS = ((E1 - 3 * PS_PER_S, E1 + PS_PER_S), (S2 - PS_PER_S, S2 + 62 * PS_PER_S))
#: The hand-made folder's heat maps: the irregular coarse grid and the fine one (A5 emits ~1900 times).
HAND_GRIDS = ["8x13", "64x100"]


def wandering_rows(sid: int, seed: int) -> list[str]:
    """Rows of one sensor across half time: speed and position change every 100 ms, with pauses."""
    import random

    rng = random.Random(seed)
    rows, x, y, v = [], 26000, 0, 0
    for start, stop in BREAK_SPANS:
        ts = start + seed * PS_PER_MS
        while ts < stop:
            if rng.random() < 0.05:
                v, x, y = rng.randrange(0, 9_000_000), x + rng.randrange(-900, 901), y + rng.randrange(-900, 901)
            if rng.random() < 0.002:
                ts += rng.choice((300, 1200)) * PS_PER_MS  # a short pause, or a gap of over 1 s
            rows.append(f"{sid},{ts},{x},{y},0,{v},0,10000,0,0,0,0,0")
            ts += ROW_PS
    return rows


@pytest.fixture(scope="module")
def hand_made(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from workers.reference import run_reference

    data = tmp_path_factory.mktemp("hand-split")
    files = {
        47: running_rows(47, RUN_START, RUN_STOP, V),
        16: running_rows(16, RUN_START + PS_PER_MS, RUN_STOP, V),
        65: sensor_rows(65, STAND_START, STAND_STOP, 1000, 0, 0),
        66: sensor_rows(66, STAND_START, SIXTY_SIX_STOP, 3000, 0, 0),
        67: sensor_rows(67, STAND_START, STAND_STOP, 30000, EDGE_Y, 0),
        68: sensor_rows(68, STAND_START, STAND_STOP, 30000, EDGE_Y, 0),
        53: wandering_rows(53, 1),
        54: wandering_rows(54, 2),
    }
    for sid, rows in files.items():
        (data / f"SENSOR{sid}.csv").write_text("".join(r + "\n" for r in rows))
    (data / "interruptions.csv").write_text("start_ts,end_ts\n")
    out = tmp_path_factory.mktemp("hand-ref")
    run_reference(spark, data, out, grids=HAND_GRIDS)
    return out


def test_constant_speed_gives_exact_running_analysis(hand_made: Path) -> None:
    first = (RUN_START // SLOT + 1) * SLOT  # first player_average boundary
    last = ((RUN_STOP - ROW_PS) // SLOT) * SLOT  # the end of the last full slot
    end = last + SLOT  # the end of the last, partial slot: emitted when the data ends
    slots = (last - first) // SLOT
    # 2.5 m/s over a 20 ms slot is exactly 0.05 m; a slot cut at a game second (kick-off is not on
    # the 20 ms grid) loses 1 nm to the floor of each of its two pieces' distances.
    cuts = sum(1 for n in range(1, 20) if first < S1 + n * PS_PER_S < last)
    assert cuts == 2
    nm = slots * 50_000_000 - cuts
    *average, final = read_stream(hand_made, "A2")
    assert [t["ts"] for t in average] == list(range(first, last + 1, SLOT))
    assert [t["i"] for t in average] == list(range(len(average)))
    assert final["ts"] == end and 0 < final["x"] - average[-1]["x"] < 50.0  # the partial slot's latest rows
    assert all((t["y"], t["v"]) == (0.0, float(V)) for t in average)
    assert {b["x"] - a["x"] for a, b in itertools.pairwise(average)} == {50.0}  # 2.5 m/s: 50 mm a slot
    *run, run_final = read_stream(hand_made, "RUN_A2")
    assert len(run) == slots and {t["intensity"] for t in run} == {"trot"}
    assert run[-1] == {
        "i": slots - 1, "ts": last, "ts_start": first, "ts_stop": last, "player": "A2", "intensity": "trot",
        "distance": nm / 1e9, "speed": nm / 1e9 * 3.6e12 / (last - first),
    }
    assert run[-1]["speed"] == pytest.approx(9.0, rel=1e-6)
    assert run_final["ts"] == end and run_final["ts_start"] == first and run_final["distance"] > nm / 1e9
    for window in ("1min", "5min", "10min", "20min", "wholeGame"):
        *agg, _ = read_stream(hand_made, f"RUNAGG_{window}_A2")  # the last: the partial slot
        assert len(agg) == slots
        assert agg[-1]["trot_time_ps"] == last - first and agg[-1]["trot_distance"] == nm / 1e9
        assert all(agg[-1][f"{b}_time_ps"] == 0 for b in ("standing", "low", "medium", "high", "sprint"))
    assert read_stream(hand_made, "RUN_A1") == []
    assert read_stream(hand_made, "RUNAGG_1min_B3")[-1]["standing_time_ps"] > 3 * PS_PER_S  # B3 stands


def test_standing_in_one_cell_gives_exact_heat_maps(hand_made: Path) -> None:
    average = read_stream(hand_made, "B3")
    assert {t["x"] for t in average if t["ts"] <= SIXTY_SIX_STOP + PS_PER_S} == {2000.0}
    assert {t["x"] for t in average if t["ts"] > SIXTY_SIX_STOP + PS_PER_S} == {1000.0}
    # (1000, 0) mm is cell (1, 49) of 64x100 (cells of 820 x 679 mm) and (0, 6) of 8x13 (6560 x 5225 mm);
    # B4 at (30000, EDGE_Y) is in column 36 and row 30 of 64x100, column 4 and row 4 of 8x13.
    cells = {"B3": {"64x100": 1 * 100 + 49, "8x13": 0 * 13 + 6}, "B4": {"64x100": 36 * 100 + 30, "8x13": 4 * 13 + 4}}
    size = {"64x100": 6400, "8x13": 104}
    for window in ("1min", "5min", "10min", "wholeGame"):
        for player, cell in cells.items():
            for grid, c in cell.items():
                tuples = read_stream(hand_made, f"HM_{window}_{grid}_{player}")
                heads = [(t["i"], t["ts"], t["player"]) for t in tuples]
                assert heads == [(0, S1 + PS_PER_S, player)]  # three boundaries, one map: it never changes
                assert (tuples[0]["grid"], tuples[0]["runs"], tuples[0]["ppm"]) == (grid, [c, 1], [PPM])
                assert dense(tuples[0]).tolist() == [PPM if k == c else 0 for k in range(size[grid])]
    assert read_stream(hand_made, "HM_1min_8x13_A1") == []
    # A2 ran along y = 0 from x = 20000 mm at game second 10, at 2.5 m/s: boundaries 1..10 have nothing counted
    # and send nothing; at 12 s each cell of row 49 holds the share of the 5 m it ran in the cell's 820 mm
    # (within a 20 ms slot: 1%).
    a2 = read_stream(hand_made, "HM_wholeGame_64x100_A2")
    # 13 s: the tuple of A2's last, partial slot (emitted at the end of the data) ends after it
    assert [t["ts"] for t in a2] == [S1 + n * PS_PER_S for n in (11, 12, 13)]
    width = 52483 / 64
    ran = {ix * 100 + 49: max(0.0, min(25000, (ix + 1) * width) - max(20000, ix * width)) / 5000 * 100
           for ix in range(64)}
    at_12 = dense_percent(a2[1])
    assert all(abs(at_12[c] - ran.get(c, 0.0)) <= 1.0 for c in range(6400))
    rounding = np.count_nonzero(at_12) * 0.5 * 100 / PPM  # half a ppm per cell, in percent
    assert sum(ran.values()) == pytest.approx(100.0) and abs(at_12.sum() - 100.0) <= rounding


def test_half_time_and_gaps_equal_the_streaming_components(hand_made: Path) -> None:
    """A5's random walk across the break: game clock, clipping, gaps, windows reaching back over half time."""
    from pan.components.testing import build_component
    from tests.support.match_feed import OFFLINE, feed_in_chunks, player_stream_of, sensor_stream_of

    events = [dict(zip(("sid", "ts", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az"),
                       map(int, row.split(",")), strict=True))
              for row in wandering_rows(53, 1) + wandering_rows(54, 2)]
    events.sort(key=lambda e: e["ts"])
    average = build_component("player_average", {**OFFLINE, "players": ["A5"]})
    feed_in_chunks(average, events, sensor_stream_of, PS_PER_S)
    out = {"A5": output_tuples(average, "A5")}
    samples = [{k: v for k, v in t.items() if k != "i"} for t in out["A5"]]
    running = build_component("running", {**OFFLINE, "players": ["A5"]})
    heatmap = build_component("heatmap", {**OFFLINE, "players": ["A5"], "grids": ["8x13"]})
    for comp in (running, heatmap):
        feed_in_chunks(comp, samples, player_stream_of, PS_PER_S)
        out.update({name: output_tuples(comp, name) for name in comp.ctx.outputs if not name.endswith("_late")})
    assert running.counters()["gaps"] > 0 and max(t["ts"] for t in samples) > S2 + 61 * PS_PER_S
    stats = compare(out, hand_made, only_these=True)
    assert stats["streams"] == 1 + 6 + 4 and stats["tuples"] > 10_000
    one_min = read_stream(hand_made, "RUNAGG_1min_A5")
    after = [t for t in one_min if S2 + 30 * PS_PER_S <= t["ts"] < S2 + 55 * PS_PER_S]
    bands = ("standing", "trot", "low", "medium", "high", "sprint")
    # The first half's last seconds still count after the second kick-off.
    assert after and all(sum(t[f"{b}_time_ps"] for b in bands) > t["ts"] - S2 + PS_PER_S for t in after)


# --- equality with the streaming components on a generated match -----------------------------------

def close(a: Any, b: Any) -> bool:
    """Ints and strings exactly; floats within 1e-9 relative (lists element by element)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is float and type(b) is float:
        return a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b))
    return type(a) is type(b) and a == b


def streaming_outputs(full_game: Path, heatmap: dict[str, Any] | None = None) -> dict[str, list[dict[str, Any]]]:
    """player_average over every sensor row, then running and heatmap over its outputs (offline).

    ``heatmap``: extra heatmap parameters (a subset of its windows and grids).
    """
    from pan.components.testing import build_component
    from tests.support.match_feed import (
        OFFLINE,
        as_events,
        feed_in_chunks,
        merged,
        player_rows,
        player_stream_of,
        sensor_stream_of,
    )

    average = build_component("player_average", dict(OFFLINE), buffer_size=2_000_000)
    feed_in_chunks(average, as_events(player_rows(full_game)), sensor_stream_of, PS_PER_S)
    out = {name: output_tuples(average, name) for name in average.ctx.outputs}
    samples = merged(out, list(PLAYERS))
    for type_name in ("running", "heatmap"):
        params = dict(OFFLINE) | (heatmap or {} if type_name == "heatmap" else {})
        comp = build_component(type_name, params, buffer_size=2_000_000 if type_name == "running" else 20_000)
        feed_in_chunks(comp, samples, player_stream_of, PS_PER_S)
        out.update({name: output_tuples(comp, name) for name in comp.ctx.outputs})
    return {name: tuples for name, tuples in out.items() if not name.endswith("_late")}


def sensor_array(split: Path, sids: list[int]) -> np.ndarray:
    """Rows of ``sids`` from a split folder, in (ts, position in ``sids``, file) order: the ordering units' order."""
    parts = [np.loadtxt(split / f"SENSOR{sid}.csv", delimiter=",", dtype=np.int64, ndmin=2).reshape(-1, 13)
             for sid in sids if (split / f"SENSOR{sid}.csv").is_file()]
    if not parts:
        return np.empty((0, 13), dtype=np.int64)
    rows = np.concatenate(parts)
    rank = np.searchsorted(np.sort(sids), rows[:, 0])
    order = np.argsort(sids)[rank]  # position of each row's sensor in ``sids``
    return rows[np.lexsort((order, rows[:, 1]))]  # stable: file order within a sensor


def interruptions_fed(split: Path, heartbeats: bool = True) -> list[dict[str, Any]]:
    """The INTERRUPTIONS stream exactly as `pan simulate` feeds it (begin/end, heartbeats every 100 ms)."""
    from simulator.simulate import HEARTBEAT_PS
    from simulator.sources import first_ts, interruption_lines, last_ts, sensor_files

    files = sensor_files(split)
    beat = (first_ts(split, files), last_ts(split, files), HEARTBEAT_PS) if heartbeats else None
    events = [orjson.loads(line) for line in interruption_lines(split / "interruptions.csv", beat)]
    return [{k: v for k, v in ev.items() if k != "stream"} for ev in events]


def q2_streaming_outputs(split: Path, heartbeats: bool = True) -> dict[str, list[dict[str, Any]]]:
    """active_ball -> ball_hits -> player/team possession over a split folder, offline.

    Each component gets its inputs merged in (ts, input position) order, chunk by
    chunk, as its ordering unit delivers them when nothing is late.
    """
    from pan.components.testing import OutputReader, build_component, in_input_order
    from tests.support.ballgame import as_events
    from workers.debs import BALLS, PLAYER_SENSORS

    active = build_component("active_ball", buffer_size=2_000_000)
    hits = build_component("ball_hits", buffer_size=100_000)
    possession = [build_component(t, buffer_size=2_000_000) for t in ("player_possession", "team_possession")]
    readers = OutputReader(active, "ACTIVEBALL"), OutputReader(hits, "BALLHITS")
    balls = sensor_array(split, list(BALLS))
    players = sensor_array(split, [sid for sids in PLAYER_SENSORS.values() for sid in sids])
    inter = interruptions_fed(split, heartbeats)
    out: dict[str, list[dict[str, Any]]] = {"ACTIVEBALL": [], "BALLHITS": []}
    firsts = [int(rows[0, 1]) for rows in (balls, players) if len(rows)] + [ev["ts"] for ev in inter[:1]]
    lasts = [int(rows[-1, 1]) for rows in (balls, players) if len(rows)]
    lo, n = min(firsts, default=0), 0
    while lo <= max(lasts, default=lo - 1):
        hi = lo + 5 * PS_PER_S
        active.process(as_events(balls[(balls[:, 1] >= lo) & (balls[:, 1] < hi)]))
        ab = readers[0].new()
        hits.process(in_input_order(as_events(players[(players[:, 1] >= lo) & (players[:, 1] < hi)]), ab))
        new_hits = readers[1].new()
        start = n
        while n < len(inter) and inter[n]["ts"] < hi:
            n += 1
        chunk = in_input_order(inter[start:n], new_hits, ab)
        for comp in possession:
            comp.process(chunk)
        out["ACTIVEBALL"] += ab
        out["BALLHITS"] += new_hits
        lo = hi
    for comp in possession:
        comp.process(inter[n:])
        out.update({name: output_tuples(comp, name) for name in comp.ctx.outputs if not name.endswith("_late")})
    return out


def compare(streaming: dict[str, list[dict[str, Any]]], reference: Path, only_these: bool = False) -> dict[str, int]:
    """Tuple-by-tuple comparison; fails at the first difference with stream, index and field."""
    files = {p.stem for p in reference.glob("*.jsonl")}
    assert set(streaming) <= files if only_these else files == set(streaming), sorted(files ^ set(streaming))[:10]
    stats = {"streams": 0, "tuples": 0, "identical": 0}
    for name, expected in streaming.items():
        got = read_stream(reference, name)
        assert len(got) == len(expected), (name, len(expected), len(got))
        for s, r in zip(expected, got, strict=True):
            if s != r:
                assert list(s) == list(r), (name, s["i"], list(s), list(r))
                bad = [(k, s[k], r[k]) for k in s if not close(s[k], r[k])]
                assert not bad, (name, s["i"], [b if not isinstance(b[1], list) else b[0] for b in bad])
            else:
                stats["identical"] += 1
            stats["tuples"] += 1
        stats["streams"] += 1
    return stats


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_reference_equals_streaming_on_a_generated_match(spark: Any, tmp_path: Path) -> None:
    from simulator.split import split
    from workers.reference import run_reference
    from workers.reference_q2 import q2_streams

    assert main(["generate", "--exact", "--minutes", "1", "--seed", "5", "--out", str(tmp_path / "gen")]) == 0
    split(tmp_path / "gen" / "full-game", tmp_path / "split")
    summary = run_reference(spark, tmp_path / "split", tmp_path / "ref")
    from tests.workers.test_reference_q4 import streaming_shots

    q2_out = q2_streaming_outputs(tmp_path / "split")
    streaming = streaming_outputs(tmp_path / "gen" / "full-game") | q2_out
    streaming["SHOTS"] = streaming_shots(tmp_path / "split", q2_out)
    stats = compare(streaming, tmp_path / "ref")
    assert stats["streams"] == 17 + 16 * 6 + 16 * 16 + 2 + 16 + 10 + 1
    assert stats["tuples"] == summary["tuples"] > 300_000
    q2 = {s: len(streaming[s]) for s in q2_streams()}
    assert q2["BALLHITS"] > 50 and q2["ACTIVEBALL"] > 100_000 and q2["BP_wholeGame_A"] > 1000
    print(stats, q2)


def test_close_is_strict_about_types_and_tolerance() -> None:
    assert close(1.0, 1.0 + 1e-12) and close([0.0, 2.0], [0.0, 2.0]) and close("A1", "A1")
    assert not close(1.0, 1.0 + 1e-8) and not close(1, 1.0) and not close([1.0], [1.0, 0.0])


@pytest.mark.heavy
@pytest.mark.timeout(1200)
def test_reference_equals_streaming_on_a_realistic_match(spark: Any, tmp_path: Path) -> None:
    """The same equality on the realistic generator's data: both halves, clock jitter, dropouts, noise,
    duels, spare balls and the ball-data gap. One heat-map window and grid keep the output small."""
    from simulator.split import split
    from tests.workers.test_reference_q4 import streaming_shots
    from workers.reference import run_reference
    from workers.reference_q2 import q2_streams

    assert main(["generate", "--minutes", "1", "--seed", "5", "--out", str(tmp_path / "gen")]) == 0
    split(tmp_path / "gen" / "full-game", tmp_path / "split")
    heatmap = {"windows": ["1min"], "grids": ["8x13"]}
    summary = run_reference(spark, tmp_path / "split", tmp_path / "ref", hm_windows=heatmap["windows"],
                            grids=heatmap["grids"])
    q2_out = q2_streaming_outputs(tmp_path / "split")
    streaming = streaming_outputs(tmp_path / "gen" / "full-game", heatmap) | q2_out
    streaming["SHOTS"] = streaming_shots(tmp_path / "split", q2_out)
    stats = compare(streaming, tmp_path / "ref")
    assert stats["tuples"] == summary["tuples"]
    halves = {t["ts"] >= S2 for t in streaming["BALLHITS"]}
    assert halves == {False, True}, "hits in both halves"
    assert streaming["SHOTS"], "the realistic minute has shots"
    print(stats, {s: len(streaming[s]) for s in q2_streams()})
