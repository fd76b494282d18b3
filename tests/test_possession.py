"""player_possession and team_possession (rules in workers/possession.py)."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import pytest

from tests import ballgame
from tests.harness import build_component, output_tuples
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


def test_possession_against_ground_truth() -> None:
    m = ballgame.match(3, 2)
    check_players(m)
    check_teams(m)


@pytest.mark.slow
def test_possession_against_ground_truth_ten_minutes() -> None:
    m = ballgame.match(10, 5)
    check_players(m)
    check_teams(m)


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
        direct.process(ballgame.merge(*streams.values()))
        assert results[0] == results[1] == {name: output_tuples(direct, name) for name in direct.ctx.outputs}
        assert sum(len(v) for v in results[0].values()) > 100
