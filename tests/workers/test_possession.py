"""player_possession and team_possession (rules in workers/possession.py)."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise
from pathlib import Path

import pytest

from pan.components.testing import build_component, in_input_order, output_tuples
from tests.support import ballgame
from workers import debs

KO = debs.FIRST_HALF[0]
T0 = -(-KO // (20 * debs.PS_PER_MS)) * 20 * debs.PS_PER_MS  # first 20 ms bucket boundary in the game
MS = debs.PS_PER_MS
S = debs.PS_PER_S
SMALL = 20_000
INSIDE = (20000, 0)
OUTSIDE = (52600, 0)


def hit(ts: int, player: str) -> dict:
    return {"ts": ts, "player": player, "sid": 4, "x": 20000, "y": 0, "z": 110, "a": 90_000_000}


def ball(ts: int, xy: tuple[int, int] = INSIDE) -> dict:
    return {"ts": ts, "sid": 4, "x": xy[0], "y": xy[1], "z": 110, "v": 0, "a": 0,
            "vx": 0, "vy": 10000, "vz": 0, "ax": 0, "ay": 10000, "az": 0}


def balls(start: int, end: int, step: int = 5 * MS) -> list[dict]:
    return [ball(t) for t in range(start, end, step)]


def run(type_name: str, events: list[dict]) -> object:
    comp = build_component(type_name, buffer_size=SMALL)
    order = {"event": 0, "player": 1}
    comp.process(sorted(events, key=lambda e: (e["ts"], next((v for k, v in order.items() if k in e), 2))))
    return comp


def last(comp: object, stream: str) -> dict:
    out = output_tuples(comp, stream)
    return out[-1] if out else {}


def test_possession_from_hit_to_the_next_players_hit() -> None:
    comp = run("player_possession", [hit(KO, "A2"), hit(KO + 2 * S, "A2"), hit(KO + 3 * S, "B3"),
                                     *balls(KO, KO + 4 * S)])
    a2 = last(comp, "BP_A2")
    assert (a2["ts"], a2["player"], a2["time_ps"], a2["hits"]) == (KO + 3 * S, "A2", 3 * S, 2)
    b3 = last(comp, "BP_B3")
    assert b3["hits"] == 1 and b3["time_ps"] == b3["ts"] - (KO + 3 * S) > S - 25 * MS
    assert output_tuples(comp, "BP_A1") == []


def test_exit_row_and_interruption_end_possession_hits_meanwhile_do_not_count() -> None:
    events = [hit(KO, "A2"), *balls(KO, KO + S), ball(KO + S, OUTSIDE),
              {"ts": KO + S + 1, "event": "begin"}, hit(KO + 2 * S, "B3"), {"ts": KO + 3 * S, "event": "end"},
              hit(KO + 3 * S, "B4"), *balls(KO + 3 * S + 1, KO + 4 * S + 1), {"ts": KO + 4 * S, "event": "begin"}]
    comp = run("player_possession", events)
    assert last(comp, "BP_A2")["time_ps"] == S
    assert output_tuples(comp, "BP_B3") == []
    b4 = last(comp, "BP_B4")
    assert (b4["time_ps"], b4["hits"]) == (S, 1)  # the end at the kick's own ts lets the kick count
    assert comp.counters()["hits_while_interrupted"] == 1
    assert comp.counters()["holder"] is None


def test_possession_stops_at_the_end_of_the_half() -> None:
    end = debs.FIRST_HALF[1]
    comp = run("player_possession", [hit(end - S, "A5"), ball(end - 1), ball(end + 5 * S)])
    assert last(comp, "BP_A5")["time_ps"] == S


def test_player_output_is_at_most_50_hz_plus_hits_and_ends() -> None:
    comp = run("player_possession", [hit(KO + 7 * MS, "A2"), *balls(KO, KO + 2 * S, MS // 2), hit(KO + 2 * S, "B2")])
    out = output_tuples(comp, "BP_A2")
    periodic = out[1:-1]
    assert 95 <= len(periodic) <= 100
    buckets = [t["ts"] // (20 * MS) for t in periodic]
    assert len(set(buckets)) == len(buckets)
    times = [t["time_ps"] for t in out]
    assert all(b > a for a, b in pairwise(times))
    assert out[-1]["time_ps"] == 2 * S - 7 * MS
    assert all(t["time_ps"] == t["ts"] - (KO + 7 * MS) for t in out)


def test_bad_tuples_are_counted() -> None:
    comp = build_component("player_possession", buffer_size=SMALL)
    comp.process([{"ts": KO}, {"ts": KO, "player": "Z9"}, {"ts": "x", "x": 1, "y": 2}, {"ts": KO, "event": "pause"},
                  {"ts": KO, "x": None, "y": 3}, hit(KO + 1, "A2"), {"ts": KO + 2, "x": "far", "y": 0}])
    assert comp.counters()["bad_tuples"] == 6
    assert last(comp, "BP_A2")["hits"] == 1


def window_events() -> list[dict]:
    # A holds 0..30 s, B holds 30..40 s, nobody 40..100 s (interrupted), A holds 100..110 s.
    return [hit(T0, "A2"), hit(T0 + 30 * S, "B2"), {"ts": T0 + 40 * S, "event": "begin"},
            {"ts": T0 + 100 * S, "event": "end"}, hit(T0 + 100 * S, "A3"), *balls(T0, T0 + 110 * S + 1, 10 * MS)]


def value_at(comp: object, window: str, team: str, ts: int) -> dict:
    """The latest emitted value of a team stream at or before ``ts``."""
    out = [t for t in output_tuples(comp, f"BP_{window}_{team}") if t["ts"] <= ts]
    return out[-1]


def test_team_windows() -> None:
    comp = run("team_possession", window_events())
    at = T0 + 110 * S
    assert value_at(comp, "wholeGame", "A", at)["time_ps"] == 40 * S
    assert value_at(comp, "wholeGame", "B", at)["time_ps"] == 10 * S
    assert value_at(comp, "wholeGame", "A", at)["time_percent"] == pytest.approx(80.0)
    # last minute = 50..110 s: only A's 10 s
    assert value_at(comp, "1min", "A", at)["time_ps"] == 10 * S
    assert value_at(comp, "1min", "B", at)["time_ps"] == 0
    assert value_at(comp, "1min", "A", at)["time_percent"] == 100.0
    # at 70 s the last minute is 10..70 s: A 20 s, B 10 s
    assert value_at(comp, "1min", "A", T0 + 70 * S)["time_ps"] == 20 * S
    assert value_at(comp, "1min", "B", T0 + 70 * S)["time_percent"] == pytest.approx(100 / 3)
    # at 99 s the last minute is 39..99 s: B's last second only
    assert value_at(comp, "1min", "B", T0 + 99 * S)["time_ps"] == S
    assert value_at(comp, "5min", "A", at)["time_ps"] == 40 * S


def test_team_percent_is_zero_when_nobody_had_the_ball_and_output_only_changes() -> None:
    comp = run("team_possession", [hit(KO, "A2"), {"ts": KO + S, "event": "begin"}, *balls(KO, KO + 200 * S, 10 * MS)])
    ones = output_tuples(comp, "BP_1min_A")
    assert ones[-1]["time_ps"] == 0 and ones[-1]["time_percent"] == 0.0
    assert all((a["time_ps"], a["time_percent"]) != (b["time_ps"], b["time_percent"])
               for a, b in pairwise(ones))
    whole = output_tuples(comp, "BP_wholeGame_A")
    assert whole[-1]["time_ps"] == S and whole[-1]["time_percent"] == 100.0
    assert whole[-1]["ts"] < KO + 2 * S  # no emission while nothing changes
    b = output_tuples(comp, "BP_wholeGame_B")
    assert b and b[-1]["time_percent"] == 0.0 and b[-1]["time_ps"] == 0
    for t in ones + whole:
        assert set(t) == {"i", "ts", "team", "time_ps", "time_percent"}


def test_team_output_is_at_most_50_hz() -> None:
    comp = run("team_possession", [hit(KO, "B2"), *balls(KO, KO + 5 * S, MS // 2)])
    for w in debs.WINDOWS:
        out = output_tuples(comp, f"BP_{w}_B")
        buckets = [t["ts"] // (20 * MS) for t in out]
        assert len(set(buckets)) == len(buckets) >= 240


def test_windows_count_game_time_across_the_break() -> None:
    """Early in the second half the 20 min window holds 20 min of play, 15 of them before the break (fix 5)."""
    e1, s2 = debs.FIRST_HALF[1], debs.SECOND_HALF[0]
    minute = 60 * S
    events = [hit(e1 - 30 * minute, "A2"), *balls(e1 - 30 * minute, e1 + 1, 100 * MS),
              hit(s2, "B2"), *balls(s2, s2 + 5 * minute + 1, 100 * MS)]
    comp = run("team_possession", events)
    at = s2 + 5 * minute
    assert value_at(comp, "20min", "A", at)["time_ps"] == 15 * minute  # the first half's last 15 min of play
    assert value_at(comp, "20min", "B", at)["time_ps"] == 5 * minute
    assert value_at(comp, "20min", "A", at)["time_percent"] == 75.0
    assert value_at(comp, "1min", "A", s2 + 20 * S)["time_ps"] == 40 * S
    assert value_at(comp, "1min", "A", at)["time_ps"] == 0
    assert value_at(comp, "wholeGame", "A", at)["time_ps"] == 30 * minute


# --- generated match ---------------------------------------------------------------


def truth_times(m: ballgame.Match) -> Counter:
    times: Counter = Counter()
    for player, start, end in m.possession:
        times[player] += end - start
    return times


def check_players(m: ballgame.Match) -> dict[str, float]:
    errors = {}
    truth = truth_times(m)
    hits = Counter(p for _t, p, _b in m.kicks)
    for player in debs.PLAYERS:
        out = m.outputs[f"BP_{player}"]
        got = out[-1]["time_ps"] if out else 0
        errors[player] = abs(got - truth[player]) / truth[player] if truth[player] else float(got != 0)
        assert errors[player] <= 0.02, (player, got, truth[player])
        assert (out[-1]["hits"] if out else 0) == hits[player]
    return errors


def check_teams(m: ballgame.Match) -> None:
    truth = truth_times(m)
    for team in debs.TEAMS:
        expected = sum(t for p, t in truth.items() if debs.team_of(p) == team)
        got = m.outputs[f"BP_wholeGame_{team}"][-1]["time_ps"]
        assert abs(got - expected) <= 0.02 * expected
    # Sliding windows: every emitted 1-minute value against the truth intervals.
    width = debs.WINDOWS["1min"]
    for team in debs.TEAMS:
        intervals = [(s, e) for p, s, e in m.possession if debs.team_of(p) == team]
        for t in m.outputs[f"BP_1min_{team}"][::50]:
            ts = t["ts"]
            expected = sum(max(0, min(e, ts) - max(s, ts - width)) for s, e in intervals)
            assert abs(t["time_ps"] - expected) <= 10 * MS, (team, ts, t["time_ps"], expected)


@pytest.mark.process
def test_possession_against_ground_truth() -> None:
    m = ballgame.match(3, 2)
    check_players(m)
    check_teams(m)


@pytest.mark.heavy
def test_possession_against_ground_truth_ten_minutes() -> None:
    m = ballgame.match(10, 5)
    check_players(m)
    check_teams(m)


@pytest.mark.process
def test_possession_determinism_under_jitter() -> None:
    m = ballgame.match(3, 2)
    end = KO + 40 * S
    streams = {
        "INTERRUPTIONS": [e for e in ballgame.interruption_events(m.interruptions) if e["ts"] < end],
        "BALLHITS": [h for h in m.outputs["BALLHITS"] if h["ts"] < end],
        "ACTIVEBALL": ballgame.as_events(m.active[m.active[:, 1] < end]),
    }
    assert streams["INTERRUPTIONS"] and len(streams["BALLHITS"]) >= 5
    for type_name in ("player_possession", "team_possession"):
        results = []
        for seed in (5, 6):
            comp = build_component(type_name, {"min_k": 500 * MS}, buffer_size=SMALL)
            ballgame.feed_jittered(comp, streams, seed)
            assert comp.unit.late_count == 0
            results.append({name: output_tuples(comp, name) for name in comp.ctx.outputs})
        direct = build_component(type_name, buffer_size=SMALL)
        direct.process(in_input_order(*streams.values()))
        assert results[0] == results[1] == {name: output_tuples(direct, name) for name in direct.ctx.outputs}
        assert sum(len(v) for v in results[0].values()) > 100


# --- a ball-data gap (issue 11, fix 2) ----------------------------------------------


def test_possession_ends_when_the_ball_falls_silent_and_resumes_after_a_dropout() -> None:
    """A 300 ms dropout (real sensors have 50-500 ms) keeps the possession; a 60 s silence ends it at the last row."""
    dropout = (KO + 2 * S, KO + 2 * S + 300 * MS)
    rows = [b for b in balls(KO, KO + 5 * S) if not dropout[0] <= b["ts"] < dropout[1]]
    gap = (KO + 5 * S, KO + 65 * S)
    beats = [{"ts": t, "event": "heartbeat"} for t in range(KO, KO + 70 * S, 10 * MS)]
    comp = run("player_possession", [*beats, hit(KO, "A2"), *rows, *balls(gap[1], KO + 70 * S)])
    out = output_tuples(comp, "BP_A2")
    last_row = max(b["ts"] for b in rows)
    assert out[-1]["time_ps"] == last_row - KO  # the dropout counts, the silence does not
    assert max(t["time_ps"] for t in out) == out[-1]["time_ps"]
    assert all(b["time_ps"] >= a["time_ps"] and b["ts"] >= a["ts"] for a, b in pairwise(out))
    during = [t for t in out if dropout[0] < t["ts"] < dropout[1]]
    assert during and all(t["time_ps"] <= dropout[0] - KO for t in during)  # stalls while nothing is heard ...
    after = next(t for t in out if t["ts"] >= dropout[1])
    assert after["time_ps"] == after["ts"] - KO  # ... and catches up when the ball is heard again
    assert comp.counters()["holder"] is None


def ball_gap_folder(source: Path, folder: Path, gap: tuple[int, int], end: int) -> None:
    """``source``'s full-game up to ``end`` without any ball row in ``gap``; players keep moving."""
    folder.mkdir()
    ball_sids = {str(b) for b in debs.BALLS}
    with (source / "full-game").open() as src, (folder / "full-game").open("w") as out:
        for line in src:
            sid, ts, _rest = line.split(",", 2)
            t = int(ts)
            if t >= end:
                continue
            if not (sid in ball_sids and gap[0] <= t < gap[1]):
                out.write(line)


@pytest.mark.process
def test_nobody_gains_possession_during_a_ball_data_gap(tmp_path: Path) -> None:
    """60 s without ball rows in the first half, as in the real file: nobody's possession grows meanwhile."""
    source = ballgame.generate(3, 2)
    truth = [(p, int(a), int(b)) for p, a, b in ballgame.read_csv(source / "truth" / "possession.csv")]
    # The gap starts 0.5 s into the first possession of the generator's truth that lasts at least 2 s.
    start = next(a for _p, a, b in truth if b - a >= 2 * S and a >= KO + 5 * S)
    gap = (start + 500 * MS, start + 500 * MS + 60 * S)
    interruptions = [(int(a), int(b)) for a, b in ballgame.read_csv(source / "interruptions.csv")]
    folder = tmp_path / "gap"
    ball_gap_folder(source, folder, gap, gap[1] + 5 * S)
    m = ballgame.run_pipeline(folder, interruptions)
    ball_ts = m.active[:, 1]
    silent_from = int(ball_ts[ball_ts < gap[0]].max())  # the last active-ball row before the gap
    heard_again = int(ball_ts[ball_ts >= gap[1]].min())
    assert heard_again - silent_from > 59 * S
    held_then = [p for p in debs.PLAYERS if any(t["ts"] <= silent_from for t in m.outputs[f"BP_{p}"])
                 and m.outputs[f"BP_{p}"][-1]["ts"] >= silent_from]
    assert held_then, "someone must hold the ball when it falls silent"
    for p in debs.PLAYERS:
        out = m.outputs[f"BP_{p}"]
        before = max((t["time_ps"] for t in out if t["ts"] <= silent_from), default=0)
        until_back = max((t["time_ps"] for t in out if t["ts"] <= heard_again), default=0)
        # At most what the last 20 ms bucket before the silence had not yet reported.
        assert until_back - before <= 20 * MS, (p, (until_back - before) / S)
    for team in debs.TEAMS:
        out = m.outputs[f"BP_wholeGame_{team}"]
        before = max((t["time_ps"] for t in out if t["ts"] <= silent_from), default=0)
        assert max(t["time_ps"] for t in out if t["ts"] <= heard_again) - before <= 20 * MS
    # Possession resumes with the next kick after the gap.
    assert any(t["ts"] > heard_again for p in debs.PLAYERS for t in m.outputs[f"BP_{p}"])
