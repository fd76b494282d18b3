"""Ground truth of a realistic match, from the physics, never from a detector.

* ``kicks.csv``: every *hit* (a contact by a body part that wears a sensor: a
  foot, or a goalkeeper's hands) with its physical kicker, whether it is
  ambiguous (another player's sensor within 1 m of the ball at the contact)
  and whether the data can show it at all (no ball rows during the contact:
  a dropout or the half-time ball-data gap). ``touches.csv`` lists every
  contact, headers and throw-ins included.
* ``shots.csv``: hits whose free path (the ball's physics with nobody touching
  it) crosses the attacked goal line between the posts and under the bar
  within 1.5 s; ``near_misses.csv``: the ones that cross it within 1.5 s just
  wide (< 1.5 m) or over (< 1 m).
* ``possession.csv``: DEBS possession from the hits: from a player's hit to
  the next hit by someone else, the ball leaving the pitch, an interruption,
  the end of the half or the start of a ball-data gap.
* ``distance.csv``: each player's path length (m) of the true (noise-free)
  mean of the player's sensors, every 20 ms of game time with data: Q1.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simulator import rball
from simulator.debs import ENTITIES, GOAL_X, GOAL_Z, HALF1, HALF2, N_PLAYERS, PS_PER_S
from simulator.motion import KIND_INDEX
from simulator.rsample import RSession, _leg_positions, dropouts

SHOT_HORIZON = 1.5
REACH = 1.0
RESUME_LEAD_PS = 200 * 10**9
WIDE_M, OVER_M = 1.5, 1.0
SLICE_PS = 10 * PS_PER_S


@dataclass
class RTruth:
    kicks: list[dict] = field(default_factory=list)
    touches: list[dict] = field(default_factory=list)
    shots: list[dict] = field(default_factory=list)
    near_misses: list[dict] = field(default_factory=list)
    possession: list[tuple[str, int, int]] = field(default_factory=list)
    interruptions: list[tuple[int, int]] = field(default_factory=list)
    distance: dict[str, float] = field(default_factory=dict)
    sprints: int = 0

    def summary(self) -> dict:
        hits = self.kicks
        return {
            "kicks": len(hits),
            "ambiguous": sum(k["ambiguous"] for k in hits),
            "unobservable": sum(1 - k["observable"] for k in hits),
            "touches_by_kind": dict(Counter(t["kind"] for t in self.touches)),
            "shots": len(self.shots),
            "shooters": sorted({s["player"] for s in self.shots}),
            "near_misses": len(self.near_misses),
            "interruptions": len(self.interruptions),
            "sprint_runs": self.sprints,
        }


def _ps(s: RSession, t: float) -> int:
    return s.ko_ps + round(t * PS_PER_S)


def _sensors_of(e: int) -> tuple[np.ndarray, np.ndarray]:
    return np.array([e] * len(ENTITIES[e].sensors)), np.array([KIND_INDEX[k] for _, k in ENTITIES[e].sensors])


def _observable(s: RSession, seed: int, ball: int, a: int, b: int) -> bool:
    """Whether some row of ``ball`` can fall in [a, b): not all of it in a dropout or the gap."""
    if s.ball_gap is not None and s.ball_gap[0] <= a and b <= s.ball_gap[1]:
        return False
    lo = s.base_ps + (a - s.base_ps) // SLICE_PS * SLICE_PS
    for start in (lo - SLICE_PS, lo):
        for x, y in dropouts(seed, s.index, ball, max(start, s.base_ps), min(start + SLICE_PS, s.end_ps)):
            if x <= a and b <= y:
                return False
    return True


def add_half(truth: RTruth, s: RSession, seed: int) -> None:
    played = s.played
    assert played is not None
    knots = played.knots
    half_end_t = s.play_len
    if s.ball_gap is not None:
        half_end_t = min(half_end_t, (s.ball_gap[0] - s.ko_ps) / PS_PER_S)
    stops = [(st.start, st.end, st.kind) for st in played.stops]
    for a, b, _ in stops:
        truth.interruptions.append((_ps(s, a), _ps(s, b) - RESUME_LEAD_PS))
    all_ent = np.concatenate([_sensors_of(e)[0] for e in range(N_PLAYERS)])
    all_kind = np.concatenate([_sensors_of(e)[1] for e in range(N_PLAYERS)])
    hits = []
    for k in played.touches:
        name = ENTITIES[k.ent].name
        ts = _ps(s, k.t)
        row = {"ts": ts, "player": name, "ball": k.ball, "kind": k.kind, "part": k.part}
        truth.touches.append(row)
        is_hit = k.part == "foot" or (k.part == "hands" and ENTITIES[k.ent].is_keeper)
        if not is_hit:
            continue
        pos, _ = knots.sensor(all_ent, all_kind, np.full(len(all_ent), k.t))
        other = all_ent != k.ent
        near = np.linalg.norm(pos[other] - k.pos, axis=1)
        hit = dict(row, ambiguous=int(bool((near < REACH).any())),
                   observable=int(_observable(s, seed, k.ball, ts, ts + round(k.contact_s * PS_PER_S))
                                  and k.t < half_end_t))
        hits.append((k, hit))
        truth.kicks.append(hit)
    # possession
    ends = [a for a, _, _ in stops] + [half_end_t]
    events = sorted([(k.t, 1, k.ent) for k, _ in hits] + [(a, 0, -1) for a in ends])
    holder, since = -1, 0.0
    for t, is_hit, e in events:
        if t > half_end_t:
            break
        if is_hit and (e == holder or any(a <= t < b for a, b, _ in stops)):
            continue
        if holder >= 0 and t > since:
            truth.possession.append((ENTITIES[holder].name, _ps(s, since), _ps(s, t)))
        holder, since = (e, t) if is_hit else (-1, 0.0)
    # shots and near misses
    hit_times = [k.t for k, _ in hits]
    for i, (k, hit) in enumerate(hits):
        if k.part != "foot" or k.kind == "catch":
            continue
        side = s.attack_a if k.ent < 8 else -s.attack_a
        path = rball.free_path(k.t, k.pos, k.v_out, horizon=SHOT_HORIZON + 1)
        cross = rball.goal_crossing(path, k.t, side, SHOT_HORIZON)
        if cross is None:
            continue
        tau, x, z = cross
        x0, x1 = GOAL_X[side]
        if x0 < x < x1 and z < GOAL_Z:
            later = [t for t in hit_times[i + 1:]] + [a for a, _, _ in stops if a > k.t] + [half_end_t]
            truth.shots.append({"player": hit["player"], "ts_start": hit["ts"], "ts_end": _ps(s, min(later)),
                                "arrival_s": round(tau, 3), "observable": hit["observable"],
                                "ambiguous": hit["ambiguous"]})
        else:
            wide = max(x0 - x, x - x1, 0.0)
            over = max(z - GOAL_Z, 0.0)
            if wide < WIDE_M and over < OVER_M:
                truth.near_misses.append({"player": hit["player"], "ts": hit["ts"], "wide_m": round(wide, 3),
                                          "over_m": round(over, 3)})
    # Q1: path length of the true mean sensor position, every 20 ms of game time with data
    half = HALF1 if s.index == 0 else HALF2
    t_end = (min(s.end_ps, half[1]) - s.ko_ps) / PS_PER_S
    grid = np.arange(0.0, t_end, 0.02)
    for e in range(N_PLAYERS):
        ents, kinds = _sensors_of(e)
        n = len(ents)
        tt = np.repeat(grid, n)
        pos = _leg_positions(s, np.tile(ents, len(grid)), np.tile(kinds, len(grid)), tt)
        mean = pos.reshape(len(grid), n, 3).mean(axis=1)
        step = np.hypot(np.diff(mean[:, 0]), np.diff(mean[:, 1]))
        name = ENTITIES[e].name
        truth.distance[name] = truth.distance.get(name, 0.0) + float(step.sum())
    truth.sprints += played.sprints


def write(truth: RTruth, out: Path) -> None:
    tdir = out / "truth"
    tdir.mkdir(parents=True, exist_ok=True)
    (tdir / "kicks.csv").write_text("ts,player,ball_sid,kind,part,ambiguous,observable\n" + "".join(
        f"{k['ts']},{k['player']},{k['ball']},{k['kind']},{k['part']},{k['ambiguous']},{k['observable']}\n"
        for k in truth.kicks))
    (tdir / "touches.csv").write_text("ts,player,ball_sid,kind,part\n" + "".join(
        f"{k['ts']},{k['player']},{k['ball']},{k['kind']},{k['part']}\n" for k in truth.touches))
    (tdir / "possession.csv").write_text(
        "player,start_ts,end_ts\n" + "".join(f"{p},{a},{b}\n" for p, a, b in truth.possession))
    (tdir / "shots.csv").write_text("player,ts_start,ts_end,arrival_s,observable,ambiguous\n" + "".join(
        f"{x['player']},{x['ts_start']},{x['ts_end']},{x['arrival_s']},{x['observable']},{x['ambiguous']}\n"
        for x in truth.shots))
    (tdir / "near_misses.csv").write_text("player,ts,wide_m,over_m\n" + "".join(
        f"{x['player']},{x['ts']},{x['wide_m']},{x['over_m']}\n" for x in truth.near_misses))
    (tdir / "distance.csv").write_text(
        "player,path_m\n" + "".join(f"{p},{d:.3f}\n" for p, d in sorted(truth.distance.items())))
    (tdir / "summary.json").write_text(json.dumps(truth.summary(), indent=1) + "\n")
    (out / "interruptions.csv").write_text(
        "start_ts,end_ts\n" + "".join(f"{a},{b}\n" for a, b in truth.interruptions))
