"""ball_hits: one hit per kick, by the player whose sensor is within 1 m (rules in workers/hits.py)."""

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
BALL_DT = MS // 2  # 2000 Hz
KICK = 900_000_000  # 900 m/s^2 in µm/s^2
TOLERANCE_PS = 10 * MS


def ball(ts: int, x: int = 20000, y: int = 0, a: int = 200_000, sid: int = 4) -> dict:
    return {"sid": sid, "ts": ts, "x": x, "y": y, "z": 110, "v": 1_000_000, "a": a,
            "vx": 0, "vy": 10000, "vz": 0, "ax": 0, "ay": 10000, "az": 0}


def leg(sid: int, ts: int, x: int, y: int = 0, z: int = 200) -> dict:
    return {"sid": sid, "ts": ts, "x": x, "y": y, "z": z, "v": 0, "a": 0,
            "vx": 0, "vy": 10000, "vz": 0, "ax": 0, "ay": 10000, "az": 0}


def kick(ts: int, samples: int = 4, x: int = 20000, a: int = KICK) -> list[dict]:
    """A kick's |a| spike: ``samples`` ball rows over the threshold, then one quiet row."""
    return [ball(ts + n * BALL_DT, x=x, a=a) for n in range(samples)] + [ball(ts + samples * BALL_DT, x=x)]


def hits(rows: list[dict], **params: object) -> tuple[list[dict], object]:
    comp = build_component("ball_hits", params, buffer_size=SMALL)
    comp.process(sorted(rows, key=lambda r: r["ts"]))
    return output_tuples(comp, "BALLHITS"), comp


def test_inputs_are_every_player_sensor_and_the_active_ball_not_the_referee() -> None:
    comp = build_component("ball_hits", buffer_size=SMALL)
    names = list(comp.ctx.inputs)
    assert names[-1] == "ACTIVEBALL"
    assert len(names) == 1 + sum(len(s) for s in debs.PLAYER_SENSORS.values())
    assert "SENSOR105" not in names and "SENSOR106" not in names
    assert "SENSOR97" in names  # goalkeeper hands count


def test_one_hit_per_spike_with_the_first_sample() -> None:
    rows = [leg(47, KO - 2 * MS, 20500), *kick(KO)]
    out, comp = hits(rows)
    assert len(out) == 1
    hit = out[0]
    assert {k: hit[k] for k in ("ts", "player", "sid", "x", "y", "z", "a")} == {
        "ts": KO, "player": "A2", "sid": 4, "x": 20000, "y": 0, "z": 110, "a": KICK}
    assert comp.counters()["hits"] == 1


def test_two_kicks_give_two_hits() -> None:
    rows = [leg(47, KO - 2 * MS, 20500), *kick(KO), leg(63, KO + 500 * MS, 30500), *kick(KO + 501 * MS, x=30000)]
    out, _ = hits(rows)
    assert [(h["ts"], h["player"]) for h in out] == [(KO, "A2"), (KO + 501 * MS, "B2")]


def test_a_spike_that_flickers_across_the_threshold_is_one_contact() -> None:
    """A goalkeeper's catch: |a| hovers around 55 m/s² for 20 ms, dipping under it every few rows."""
    around = [60_000_000, 50_000_000, 58_000_000, 47_000_000, 49_000_000, 56_000_000]
    catch = [ball(KO + n * BALL_DT, a=around[n % len(around)]) for n in range(40)]
    out, comp = hits([leg(13, KO - MS, 20500), *catch, ball(KO + 40 * BALL_DT)])
    assert [(h["ts"], h["player"]) for h in out] == [(KO, "A1")]
    assert comp.counters()["spikes_without_player"] == 0


def test_a_new_contact_after_the_rearm_time_is_a_new_hit() -> None:
    """Two rows over the threshold 10 ms apart (the default ``rearm_ms``) belong to two contacts."""
    rows = [leg(47, KO - MS, 20500), ball(KO, a=KICK), ball(KO + 5 * MS), ball(KO + 10 * MS, a=KICK)]
    out, _ = hits(rows)
    assert [h["ts"] for h in out] == [KO, KO + 10 * MS]
    out, _ = hits(rows, rearm_ms=11)
    assert [h["ts"] for h in out] == [KO]


def test_threshold_is_inclusive_and_below_is_no_hit() -> None:
    out, _ = hits([leg(47, KO - MS, 20500), *kick(KO, a=55_000_000)])
    assert len(out) == 1
    out, _ = hits([leg(47, KO - MS, 20500), *kick(KO, a=54_999_999)])
    assert out == []


def test_distance_is_three_dimensional_and_one_metre() -> None:
    # 0.6 m along x and 0.8 m in height: exactly 1 m away -> a hit
    out, _ = hits([leg(47, KO - MS, 20600, z=910), *kick(KO)])
    assert len(out) == 1
    out, comp = hits([leg(47, KO - MS, 20600, z=1000), *kick(KO)])
    assert out == []
    assert comp.counters()["spikes_without_player"] == 1


def test_nearest_sensor_wins_and_ambiguity_is_counted() -> None:
    rows = [leg(47, KO - MS, 20700), leg(63, KO - MS, 19800), *kick(KO)]
    out, comp = hits(rows)
    assert [h["player"] for h in out] == ["B2"]
    assert comp.counters()["ambiguous_hits"] == 1


def test_position_is_latest_sample_at_or_before_the_ball_ts() -> None:
    comp = build_component("ball_hits", buffer_size=SMALL)
    names = list(comp.ctx.inputs)
    # The player sample with the ball's very ts comes first (input position), so it counts.
    comp.process([leg(47, KO - 5 * MS, 25000), leg(47, KO, 20500), *kick(KO)])
    assert len(output_tuples(comp, "BALLHITS")) == 1
    assert names.index("SENSOR47") < names.index("ACTIVEBALL")
    # A sample after the spike cannot create the hit retroactively.
    out, _ = hits([leg(47, KO - 5 * MS, 25000), *kick(KO), leg(47, KO + 3 * MS, 20500)])
    assert out == []


def test_stale_sensor_cannot_kick() -> None:
    out, _ = hits([leg(47, KO - 300 * MS, 20500), *kick(KO)])
    assert out == []
    out, _ = hits([leg(47, KO - 300 * MS, 20500), *kick(KO)], stale_ms=400)
    assert len(out) == 1


def test_late_contact_within_the_spike_still_hits_once() -> None:
    rows = [leg(47, KO - MS, 25000), ball(KO, a=KICK), leg(47, KO + BALL_DT // 2, 20400), *kick(KO + BALL_DT, 3)]
    out, _ = hits(rows)
    assert [h["ts"] for h in out] == [KO + BALL_DT]


def test_referee_rows_and_bad_rows_are_counted() -> None:
    comp = build_component("ball_hits", buffer_size=SMALL)
    bad = [{"sid": 47, "ts": KO}, {**leg(47, KO, 1), "x": "1"}, {**ball(KO + 1), "a": None},
           {**leg(47, KO + 2, 1), "z": math.nan}, {**ball(KO + 3), "sid": {}}]
    comp.process([*bad, leg(105, KO + 4, 20000), leg(47, KO + 5, 20500), *kick(KO + 6)])
    counters = comp.counters()
    assert counters["bad_rows"] == len(bad)
    assert counters["other_sensor_rows"] == 1
    assert [h["player"] for h in output_tuples(comp, "BALLHITS")] == ["A2"]


@pytest.mark.parametrize("key,value", [("threshold", 0), ("radius_mm", -1), ("stale_ms", "x")])
def test_bad_params_are_rejected(key: str, value: object) -> None:
    with pytest.raises(WorkflowError, match=key):
        build_component("ball_hits", {key: value}, buffer_size=SMALL)


# --- generated match ---------------------------------------------------------------


def check_kicks(m: ballgame.Match) -> tuple[float, float]:
    found = m.outputs["BALLHITS"]
    matched, missed, false = ballgame.match_kicks(m.kicks, found, TOLERANCE_PS)
    precision = matched / len(found) if found else 0.0
    recall = matched / len(m.kicks)
    assert precision >= 0.98 and recall >= 0.98, (precision, recall, missed[:5], false[:5])
    return precision, recall


@pytest.mark.process
def test_kicks_against_ground_truth() -> None:
    m = ballgame.match(3, 2)
    assert len(m.kicks) > 100
    check_kicks(m)
    ts = {t for t, _p, _b in m.kicks}
    assert sum(h["ts"] in ts for h in m.outputs["BALLHITS"]) >= 0.98 * len(m.kicks)  # exact ts, not only within 10 ms


@pytest.mark.heavy
def test_kicks_against_ground_truth_ten_minutes() -> None:
    m = ballgame.match(10, 5)
    assert len(m.kicks) > 300
    check_kicks(m)


@pytest.mark.process
def test_hits_determinism_under_jitter() -> None:
    m = ballgame.match(3, 2)
    begin, end = KO + debs.PS_PER_S, KO + 20 * debs.PS_PER_S  # the sample's player rows start at KO
    active = m.active[(m.active[:, 1] >= begin) & (m.active[:, 1] < end)]
    sample = m.sample[m.sample[:, 1] < end]
    streams = {name: [] for name in build_component("ball_hits", buffer_size=SMALL).ctx.inputs}
    for sids in debs.PLAYER_SENSORS.values():
        for sid in sids:
            streams[debs.sensor_stream(sid)] = ballgame.rows_to_events(sample, [sid])
    streams["ACTIVEBALL"] = ballgame.as_events(active)
    outputs = []
    for seed in (3, 4):
        comp = build_component("ball_hits", {"min_k": 500 * MS}, buffer_size=SMALL)
        ballgame.feed_jittered(comp, streams, seed)
        assert comp.unit.late_count == 0
        outputs.append(output_tuples(comp, "BALLHITS"))
    expected = [h for h in m.outputs["BALLHITS"] if begin <= h["ts"] < end]
    assert len(expected) >= 5
    assert outputs[0] == outputs[1]
    strip = [{k: v for k, v in h.items() if k != "i"} for h in outputs[0]]
    assert strip == [{k: v for k, v in h.items() if k != "i"} for h in expected]
    assert np.all(np.diff([h["ts"] for h in strip]) > 0)
