"""Spark batch reference for Q2 (workers/reference_q2.py): hand-made exact cases, and equality with the
streaming active_ball -> ball_hits -> player/team possession chain (run offline, see tests/workers/test_reference.py).

The hand-made folder has three balls and four players around both halves:

* ball 4 is in play from kick-off and leaves the pitch 8 s later; ball 8, lying inside the pitch
  all along, takes over at its next row (hysteresis until then), and is in play until the end of the
  first half; it also transmits in the break, which resets the active ball; ball 10 starts the
  second half and falls silent for 1.5 s two seconds after kick-off (a ball-data gap); ball 12 lies
  inside the pitch for the first 12 s but is not a first-half ball, so it is never in play;
* kicks: A2 (the spike's first rows find nobody fresh, and B3's sensor nearby is stale), B3 nearer
  than A2 (at the ball row's very ts), A2 during an interruption (not counted), A2 at the instant the
  interruption ends (counted), B3 on ball 8, A5 one second before half time, B5 in the second half.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.workers.test_reference import compare, q2_streaming_outputs, read_stream
from workers.debs import FIRST_HALF, PS_PER_MS, PS_PER_S, SECOND_HALF

KO, E1 = FIRST_HALF
S2 = SECOND_HALF[0]
MS = PS_PER_MS
KICK_A = 90_000_000  # µm/s², over the 55 m/s² threshold
INTERRUPTIONS = ((KO + 4000 * MS, KO + 5000 * MS), (KO + 11_000 * MS, KO + 12_000 * MS))


def ball_rows(sid: int, start: int, stop: int, x: Any, y: int, kicks: tuple[int, ...]) -> list[str]:
    """Rows every 2 ms in [start, stop]; ``x`` is a number or a function of ts; |a| is high 6 ms from each kick."""
    rows = []
    for ts in range(start, stop + 1, 2 * MS):
        a = KICK_A if any(k <= ts < k + 6 * MS for k in kicks) else 0
        rows.append(f"{sid},{ts},{x(ts) if callable(x) else x},{y},100,0,{a},0,10000,0,0,10000,0")
    return rows


def sensor_rows(sid: int, segments: list[tuple[int, int, int, int, int]]) -> list[str]:
    """A player sensor at 200 Hz: (start, stop, x, y, z) segments, stop excluded."""
    return [f"{sid},{ts},{x},{y},{z},0,0,10000,0,0,0,0,0"
            for start, stop, x, y, z in segments for ts in range(start, stop, 5 * MS)]


def write_folder(data: Path) -> None:
    files = {
        4: ball_rows(4, KO - PS_PER_S, KO + 12 * PS_PER_S - MS, lambda ts: 20000 if ts < KO + 8 * PS_PER_S else 53000,
                     0, (KO + 1000 * MS, KO + 3000 * MS, KO + 4500 * MS, KO + 5000 * MS)),
        8: ball_rows(8, KO - PS_PER_S + MS, KO + 12 * PS_PER_S - MS, 30000, 10000, (KO + 9001 * MS,))
        + ball_rows(8, E1 - 2 * PS_PER_S, E1 + PS_PER_S, 30000, 10000, (E1 - PS_PER_S,)),
        12: ball_rows(12, KO - PS_PER_S + 1, KO + 12 * PS_PER_S, 40000, -10000, ()),
        10: ball_rows(10, S2 - PS_PER_S, S2 + 2 * PS_PER_S, 10000, 0, (S2 + PS_PER_S,))
        + ball_rows(10, S2 + 3500 * MS, S2 + 4 * PS_PER_S - MS, 10000, 0, ()),
        47: sensor_rows(47, [(KO + 1003 * MS, KO + 8000 * MS, 20500, 0, 100)]),  # A2
        65: sensor_rows(65, [(KO - PS_PER_S, KO + 500 * MS, 20000, 300, 0),  # B3, stale at the first kick
                             (KO + 2900 * MS, KO + 3500 * MS, 20000, 300, 100),
                             (KO + 3500 * MS, KO + 8500 * MS, 25000, 0, 100),
                             (KO + 8500 * MS, KO + 9500 * MS, 30000, 10400, 100)]),
        53: sensor_rows(53, [(E1 - 1500 * MS, E1, 30000, 9500, 100)]),  # A5
        69: sensor_rows(69, [(S2 + 500 * MS, S2 + 3 * PS_PER_S, 10000, 500, 100)]),  # B5
    }
    for sid, rows in files.items():
        (data / f"SENSOR{sid}.csv").write_text("".join(r + "\n" for r in rows))
    (data / "interruptions.csv").write_text("start_ts,end_ts\n" + "".join(f"{a},{b}\n" for a, b in INTERRUPTIONS))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("q2-split")
    write_folder(data)
    return data


@pytest.fixture(scope="module")
def reference(spark: Any, folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from workers.reference import run_q2

    out = tmp_path_factory.mktemp("q2-ref")
    summary = run_q2(spark, folder, out)
    assert summary["active_periods"] == 3
    return out


def test_active_ball_switches_only_when_the_ball_in_play_leaves(reference: Path) -> None:
    active = read_stream(reference, "ACTIVEBALL")
    assert [t["i"] for t in active] == list(range(len(active)))
    sids = [t["sid"] for t in active]
    switches = [(active[n]["ts"], sids[n]) for n in range(len(active)) if n == 0 or sids[n] != sids[n - 1]]
    # Ball 8 lies inside from the start but waits for ball 4's exit row, then for the next kick-off after the break;
    # ball 12, inside too and one row ahead of ball 8 after the exit, is no ball of the first half.
    assert switches == [(KO, 4), (KO + 8001 * MS, 8), (S2, 10)]
    exit_row = active[sids.index(8) - 1]
    assert (exit_row["ts"], exit_row["sid"], exit_row["x"]) == (KO + 8 * PS_PER_S, 4, 53000)
    assert sids.count(4) == 4001 and sids.count(8) == 2000 + 1001 and sids.count(10) == 1001 + 250 and 12 not in sids
    assert max(t["ts"] for t in active if t["sid"] == 8) == E1  # break rows are not play
    assert list(active[0]) == ["i", "ts", "sid", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az"]


def test_hits_are_the_first_spike_row_with_a_fresh_sensor_in_range(reference: Path) -> None:
    fields = ("ts", "player", "sid", "x", "y", "z", "a")
    hits = [tuple(t[k] for k in fields) for t in read_stream(reference, "BALLHITS")]
    assert hits == [
        (KO + 1004 * MS, "A2", 4, 20000, 0, 100, KICK_A),  # 1000 and 1002 ms: B3's sensor is stale, A2's not there yet
        (KO + 3000 * MS, "B3", 4, 20000, 0, 100, KICK_A),  # B3's row at the same ts counts; 300 mm beats 500 mm
        (KO + 4500 * MS, "A2", 4, 20000, 0, 100, KICK_A),  # during the interruption: a hit, not possession
        (KO + 5000 * MS, "A2", 4, 20000, 0, 100, KICK_A),
        (KO + 9001 * MS, "B3", 8, 30000, 10000, 100, KICK_A),
        (E1 - 1000 * MS, "A5", 8, 30000, 10000, 100, KICK_A),
        (S2 + 1000 * MS, "B5", 10, 10000, 0, 100, KICK_A),
    ]


def test_possession_ends_at_hits_exits_interruptions_and_half_time(reference: Path) -> None:
    def final(player: str) -> tuple[int, int, int]:
        last = read_stream(reference, f"BP_{player}")[-1]
        return last["ts"], last["time_ps"], last["hits"]

    # A2: 1004 ms -> B3's kick at 3000 ms, then 5000 ms (the interruption's end lets the kick count) -> the exit.
    assert final("A2") == (KO + 8000 * MS, 1996 * MS + 3000 * MS, 2)
    # B3: 3000 ms -> the interruption at 4000 ms, then 9001 ms -> the interruption at 11 s.
    assert final("B3") == (KO + 11_000 * MS, 1000 * MS + 1999 * MS, 2)
    assert final("A5") == (E1, PS_PER_S, 1)  # closed at the end of the half
    b5 = read_stream(reference, "BP_B5")
    # B5 from 1 s; the ball is silent after its row at 2 s: the possession ends 1 s later, credited up to that row.
    assert b5[0]["ts"] == S2 + PS_PER_S and (b5[-1]["ts"], b5[-1]["time_ps"]) == (S2 + 3 * PS_PER_S, PS_PER_S)
    # Meanwhile it counts up to the latest ball row (rows every 2 ms): it stalls in the silence.
    assert all(0 <= min(t["ts"], S2 + 2 * PS_PER_S) - (S2 + PS_PER_S) - t["time_ps"] < 2 * MS for t in b5)
    # About 50 Hz while B5 has the ball: a tuple in every 20 ms bucket, never two, and one more at the end.
    assert len({t["ts"] // (20 * MS) for t in b5[:-1]}) == len(b5) - 1 > 90
    assert read_stream(reference, "BP_A1") == []
    whole_a, whole_b = (read_stream(reference, f"BP_wholeGame_{t}")[-1] for t in "AB")
    assert whole_a["time_ps"] == 4996 * MS + PS_PER_S and whole_b["time_ps"] == 2999 * MS + b5[-1]["time_ps"]
    assert whole_a["time_percent"] == whole_a["time_ps"] * 100.0 / (whole_a["time_ps"] + whole_b["time_ps"])
    # The 1 min windows look back over game time: 4 s into the second half they still hold A5's last second of
    # the first half (in event time, 9 minutes of break would lie between).
    one_a, one_b = (read_stream(reference, f"BP_1min_{t}")[-1] for t in "AB")
    assert one_a["ts"] > S2 and one_b["ts"] > S2
    assert (one_a["time_ps"], one_a["time_percent"]) == (PS_PER_S, 50.0)
    assert (one_b["time_ps"], one_b["time_percent"]) == (b5[-1]["time_ps"], 50.0)
    five_b = read_stream(reference, "BP_5min_B")
    assert [t["i"] for t in five_b] == list(range(len(five_b)))


def test_hand_made_folder_equals_the_streaming_components(folder: Path, reference: Path) -> None:
    stats = compare(q2_streaming_outputs(folder), reference)
    assert stats["streams"] == 2 + 16 + 10 and stats["tuples"] > 10_000


def test_without_heartbeats_equals_the_streaming_components(spark: Any, folder: Path, reference: Path,
                                                            tmp_path: Path) -> None:
    """``heartbeat_ms=0``: INTERRUPTIONS brings only begin/end, so fewer buckets open (and A5's close waits)."""
    from workers.reference import run_q2

    run_q2(spark, folder, tmp_path, heartbeat_ms=0)
    streaming = q2_streaming_outputs(folder, heartbeats=False)
    compare(streaming, tmp_path)
    assert read_stream(tmp_path, "BP_A5")[-1]["ts"] == E1  # closed at the half's end by the first ball row after it
    # Heartbeats open buckets of their own: while nobody has the ball the windows slide only with them.
    assert len(read_stream(tmp_path, "BP_1min_A")) < len(read_stream(reference, "BP_1min_A"))


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_q2_reference_equals_streaming_on_a_generated_match(spark: Any, tmp_path: Path) -> None:
    """Two minutes of seed 1 from the realistic generator: a minute of each half, with sensor dropouts, spare balls,
    the first half's last seconds without ball data, interruptions and the 1 min windows sliding."""
    from pan.cli import main
    from simulator.split import split
    from workers.reference import run_q2

    assert main(["generate", "--minutes", "2", "--seed", "1", "--out", str(tmp_path / "gen")]) == 0
    split(tmp_path / "gen" / "full-game", tmp_path / "split")
    summary = run_q2(spark, tmp_path / "split", tmp_path / "ref")
    streaming = q2_streaming_outputs(tmp_path / "split")
    stats = compare(streaming, tmp_path / "ref")
    assert summary["active_periods"] >= 2 and stats["tuples"] == sum(summary["counts"].values())
    counts = {s: len(t) for s, t in streaming.items()}
    assert counts["BALLHITS"] > 40 and counts["BP_1min_B"] > 1000  # 51 kicks in the truth
    assert all(sum(counts[f"BP_{t}{n}"] for n in range(1, 9)) > 100 for t in "AB")
    # The ball falls silent before half time: from its last first-half row nobody's possession grows.
    silent_from = max(t["ts"] for t in streaming["ACTIVEBALL"] if t["ts"] < S2)
    for p in (f"{t}{n}" for t in "AB" for n in range(1, 9)):
        first_half = [t["time_ps"] for t in streaming[f"BP_{p}"] if t["ts"] < S2]
        before = [t["time_ps"] for t in streaming[f"BP_{p}"] if t["ts"] <= silent_from]
        assert max(first_half, default=0) - max(before, default=0) <= 20 * MS, p
    print(stats, counts)


def test_default_heartbeat_period_is_the_simulators() -> None:
    from simulator.simulate import HEARTBEAT_PS
    from workers.reference_q2_interruptions import HEARTBEAT_MS

    assert HEARTBEAT_MS * 10**9 == HEARTBEAT_PS


def test_ball_silence_is_the_possession_components() -> None:
    from workers.possession import BALL_SILENCE_PS
    from workers.reference_q2_possession import SILENCE_PS

    assert SILENCE_PS == BALL_SILENCE_PS == PS_PER_S
