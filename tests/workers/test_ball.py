"""active_ball: which ball is in play (rules in workers/ball.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pan.components.testing import build_component, output_tuples
from pan.config.specs import WorkflowError
from tests.support import ballgame
from workers import debs

KO = debs.FIRST_HALF[0]
MS = debs.PS_PER_MS
SMALL = 10_000  # ring buffer size for small tests (the default preallocates a million slots)
INSIDE = (20000, 1000)
OUTSIDE = (-1500, 15000)


def ball(sid: int, ts: int, xy: tuple[int, int], a: int = 100_000) -> dict:
    return {"sid": sid, "ts": ts, "x": xy[0], "y": xy[1], "z": 110, "v": 0, "a": a,
            "vx": 0, "vy": 10000, "vz": 0, "ax": 0, "ay": 10000, "az": 0}


def run(rows: list[dict], **params: object) -> tuple[list[dict], object]:
    comp = build_component("active_ball", params, buffer_size=SMALL)
    comp.process(sorted(rows, key=lambda r: r["ts"]))
    return output_tuples(comp, "ACTIVEBALL"), comp


def test_inputs_default_to_the_four_ball_streams() -> None:
    comp = build_component("active_ball", buffer_size=SMALL)
    assert list(comp.ctx.inputs) == ["SENSOR4", "SENSOR8", "SENSOR10", "SENSOR12"]
    assert "ACTIVEBALL" in comp.ctx.outputs


def test_the_ball_inside_the_pitch_is_active_and_spares_are_ignored() -> None:
    rows = []
    for n in range(10):
        ts = KO + n * MS
        rows += [ball(4, ts, INSIDE), ball(8, ts + 1, OUTSIDE), ball(10, ts + 2, (60000, 0))]
    out, comp = run(rows)
    assert [r["sid"] for r in out] == [4] * 10
    assert [r["ts"] for r in out] == [KO + n * MS for n in range(10)]
    assert set(out[0]) == {"i", "ts", "sid", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az"}
    assert comp.counters()["active"] == 4


def test_current_ball_stays_active_while_another_enters() -> None:
    rows = [ball(4, KO + n * MS, INSIDE) for n in range(10)]
    rows += [ball(8, KO + n * MS + 1, OUTSIDE if n < 3 else (30000, 0)) for n in range(10)]
    out, _ = run(rows)
    assert {r["sid"] for r in out} == {4}


def test_exit_row_then_nothing_until_a_ball_is_inside_again() -> None:
    rows = [ball(4, KO + n * MS, INSIDE if n < 5 else (52600, 1000)) for n in range(10)]
    rows += [ball(8, KO + n * MS + 1, OUTSIDE if n < 7 else (52000, 0)) for n in range(10)]
    out, comp = run(rows)
    sids = [(r["sid"], debs.in_pitch(r["x"], r["y"])) for r in out]
    assert sids == [(4, True)] * 5 + [(4, False)] + [(8, True)] * 3
    assert out[5]["ts"] == KO + 5 * MS
    assert comp.counters()["exits"] == 1
    assert comp.counters()["activations"] == 2


def test_ball_12_is_in_play_only_in_the_second_half() -> None:
    """DEBS 2013: balls 4, 8, 10 in the first half, 4, 8, 10, 12 in the second (issue 11, fix 6)."""
    ko2 = debs.SECOND_HALF[0]
    rows = []
    for start in (KO, ko2):
        rows += [ball(12, start + n * MS, INSIDE) for n in range(10)]  # lying inside from the kick-off
        rows += [ball(4, start + n * MS + 1, OUTSIDE if n < 5 else (30000, 0)) for n in range(10)]
    for n in range(1, 4):  # the break: every ball transmits (this resets the active ball)
        rows += [ball(12, debs.FIRST_HALF[1] + n * MS, INSIDE), ball(4, debs.FIRST_HALF[1] + n * MS + 1, OUTSIDE)]
    out, comp = run(rows)
    first = [(r["sid"], r["ts"]) for r in out if r["ts"] < ko2]
    assert first == [(4, KO + n * MS + 1) for n in range(5, 10)]  # ball 4 once it is inside; 12 never
    assert {r["sid"] for r in out if r["ts"] >= ko2} == {12}  # in the second half 12 is in play first
    assert comp.counters()["off_half_rows"] == 13


def test_two_balls_entering_together_first_in_ts_order_wins() -> None:
    rows = [ball(10, KO + 5, INSIDE), ball(8, KO + 5, INSIDE), ball(4, KO + 3, OUTSIDE), ball(4, KO + 9, INSIDE)]
    out, _ = run(rows)
    assert [r["sid"] for r in out] == [10]


def test_rows_outside_the_halves_are_not_play() -> None:
    before = [ball(4, KO - 1000 * MS + n * MS, INSIDE) for n in range(5)]
    brk = [ball(4, debs.FIRST_HALF[1] + 60 * debs.PS_PER_S, INSIDE)]
    out, comp = run([*before, ball(4, KO, INSIDE), *brk])
    assert [r["ts"] for r in out] == [KO]
    assert comp.counters()["outside_game_rows"] == 6
    out, _ = run(before, game_time_only=False)
    assert len(out) == 5


def test_bad_rows_are_counted_and_skipped() -> None:
    good = ball(4, KO + 10, INSIDE)
    bad = [
        {"sid": 4, "ts": KO},  # missing fields
        {**ball(4, KO + 1, INSIDE), "x": "12"},
        {**ball(4, KO + 2, INSIDE), "z": None},
        {**ball(4, KO + 3, INSIDE), "v": math.nan},
        {**ball(4, KO + 4, INSIDE), "ax": math.inf},
        {**ball(4, KO + 5, INSIDE), "ts": "soon"},
        {**ball(4, KO + 6, INSIDE), "sid": [4]},
        {**ball(4, KO + 7, INSIDE), "vz": [1]},
    ]
    comp = build_component("active_ball", buffer_size=SMALL)
    comp.process([*bad, good, ball(99, KO + 11, INSIDE)])  # as released, including the bad ts
    out = output_tuples(comp, "ACTIVEBALL")
    assert [r["ts"] for r in out] == [KO + 10]
    counters = comp.counters()
    assert counters["bad_rows"] == len(bad)
    assert counters["other_sensor_rows"] == 1


@pytest.mark.parametrize("balls", [[], "4", [4, "8"], 4])
def test_bad_ball_list_is_rejected(balls: object) -> None:
    with pytest.raises(WorkflowError, match="balls"):
        build_component("active_ball", {"balls": balls}, buffer_size=SMALL)


def test_game_time_only_must_be_a_bool() -> None:
    with pytest.raises(WorkflowError, match="game_time_only"):
        build_component("active_ball", {"game_time_only": "yes"}, buffer_size=SMALL)


# --- generated match ---------------------------------------------------------------


@pytest.fixture(scope="module")
def match() -> ballgame.Match:
    return ballgame.match(3, 2)


@pytest.mark.process
def test_active_ball_at_every_kick_is_the_kicked_ball(match: ballgame.Match) -> None:
    active = match.active
    index = {int(ts): int(sid) for sid, ts in active[:, :2]}
    assert all(index.get(ts) == b for ts, _p, b in match.kicks)


@pytest.mark.process
def test_active_rows_are_inside_except_one_exit_row_per_exit(match: ballgame.Match) -> None:
    active = match.active
    inside = (active[:, 2] >= debs.X_MIN) & (active[:, 2] <= debs.X_MAX)
    inside &= (active[:, 3] >= debs.Y_MIN) & (active[:, 3] <= debs.Y_MAX)
    exits = np.nonzero(~inside)[0]
    assert len(exits) == match.counters["active_ball"]["exits"] >= 1
    assert np.all(np.diff(active[:, 1]) > 0)
    # Each exit is the last row of its ball before a different ball (or nothing) follows.
    for i in exits:
        if i + 1 < len(active):
            assert active[i + 1, 1] - active[i, 1] > 1000 * debs.PS_PER_MS


@pytest.mark.process
def test_active_ball_determinism_under_jitter(match: ballgame.Match) -> None:
    sample = match.sample
    # 20 s: the ball leaves the pitch and play restarts
    rows = sample[np.isin(sample[:, 0], debs.BALLS) & (sample[:, 1] < KO + 20 * debs.PS_PER_S)]
    streams = {debs.sensor_stream(b): ballgame.rows_to_events(rows, [b]) for b in debs.BALLS}
    expected = None
    for seed in (1, 2):
        comp = build_component("active_ball", {"min_k": 500 * MS}, buffer_size=200_000)
        ballgame.feed_jittered(comp, streams, seed)
        got = [{k: v for k, v in r.items()} for r in output_tuples(comp, "ACTIVEBALL")]
        assert comp.unit.late_count == 0
        expected = expected or got
        assert got == expected
    assert any(not debs.in_pitch(r["x"], r["y"]) for r in expected)  # an exit row
    ref = build_component("active_ball", buffer_size=200_000)
    ref.process(ballgame.as_events(rows))
    assert output_tuples(ref, "ACTIVEBALL") == expected
