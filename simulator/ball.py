"""Pass 2 of the generator: exact ball trajectories, pinned to the kickers' legs.

Every kick starts with the ball just in front of the kicking leg sensor, and a
pass ends exactly where the receiver's leg is at the next kick. So the hit
condition (ball within 1 m of the kicker's sensor) holds by construction, and
the velocity jump at each kick becomes the only |a| >= 55 m/s^2 in the data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from simulator import geometry as geo
from simulator.debs import BALL_RADIUS
from simulator.motion import KIND_INDEX
from simulator.plan_script import Kick, Session

KICK_OFFSET = 0.22  # m, ball centre ahead of the kicking leg sensor
SPIKE_S = 0.002  # s, how long a kick's acceleration spike lasts (4 ball samples)
SPIKE_MIN = 70.0  # m/s^2, weakest touch
SPIKE_MAX = 3000.0
CONTACT_S = 0.009  # s, foot-ball contact time used to size the spike
OUT_BRAKE = 25.0  # m/s^2, ball slowed down behind the lines (fence, ball boys)
GOAL_BRAKE = 50.0  # m/s^2, ball caught by the net; still below the hit threshold
STOP_BRAKE = 6.0  # m/s^2, ball stopped after the whistle
QUAD, MOVE = 0, 1


@dataclass
class Segment:
    """Ball motion from ``t0`` until the next segment starts."""

    t0: float
    kind: int
    start: np.ndarray  # (x, y, z)
    direction: np.ndarray  # (dx, dy) unit
    u: float = 0.0
    d: float = 0.0
    vz: float = 0.0
    g: float = 0.0
    end: np.ndarray | None = None  # MOVE target
    length: float = 0.0  # MOVE duration

    def state(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Position and velocity at time ``t`` (scalar)."""
        tau = t - self.t0
        if self.kind == MOVE:
            assert self.end is not None
            f = min(tau / self.length, 1.0) if self.length > 0 else 1.0
            e = (1 - math.cos(math.pi * f)) / 2
            rate = math.pi / (2 * self.length) * math.sin(math.pi * f) if f < 1 else 0.0
            return self.start + (self.end - self.start) * e, (self.end - self.start) * rate
        tau_h = min(tau, self.u / self.d) if self.d > 0 else tau
        s = self.u * tau_h - 0.5 * self.d * tau_h * tau_h
        sp = self.u - self.d * tau_h
        z = self.start[2] + self.vz * tau - 0.5 * self.g * tau * tau
        pos = np.array([*(self.start[:2] + self.direction * s), z])
        vel = np.array([*(self.direction * sp), self.vz - self.g * tau])
        return pos, vel


@dataclass
class BallTrack:
    """All segments of one ball in one half, plus its kicks (for the |a| spikes)."""

    sid: int
    segments: list[Segment] = field(default_factory=list)
    kick_t: list[float] = field(default_factory=list)
    kick_ps: list[int] = field(default_factory=list)
    kick_a: list[float] = field(default_factory=list)
    kick_dir: list[np.ndarray] = field(default_factory=list)

    def add(self, seg: Segment) -> None:
        while self.segments and self.segments[-1].t0 >= seg.t0:
            self.segments.pop()
        self.segments.append(seg)

    def at(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        i = max(0, np.searchsorted([s.t0 for s in self.segments], t, side="right") - 1)
        return self.segments[i].state(t)

    def arrays(self) -> dict[str, np.ndarray]:
        """Column arrays of the segments, for vectorised evaluation."""
        segs = self.segments
        out = {
            "t0": np.array([s.t0 for s in segs]),
            "kind": np.array([s.kind for s in segs]),
            "start": np.array([s.start for s in segs]),
            "dir": np.array([s.direction for s in segs]),
            "u": np.array([s.u for s in segs]),
            "d": np.array([s.d for s in segs]),
            "vz": np.array([s.vz for s in segs]),
            "g": np.array([s.g for s in segs]),
            "end": np.array([s.end if s.end is not None else s.start for s in segs]),
            "length": np.array([s.length for s in segs]),
            "kick_ps": np.array(self.kick_ps, dtype=np.int64),
            "kick_a": np.array(self.kick_a),
            "kick_dir": np.array(self.kick_dir).reshape(-1, 3),
        }
        return out


@dataclass
class KickResult:
    """What pass 2 fixed about a kick: the exact launch and where the ball ends."""

    start: np.ndarray  # (x, y, z)
    direction: np.ndarray
    u: float
    d: float
    vz: float
    g: float
    t_out: float | None = None  # ball left the pitch


def rest_segment(t0: float, pos: np.ndarray, direction: np.ndarray) -> Segment:
    return Segment(t0, QUAD, pos.copy(), direction.copy())


def leg_position(session: Session, kick: Kick) -> np.ndarray:
    knots = session.knots
    assert knots is not None
    ent = np.array([kick.player])
    p, _ = knots.sensor(ent, np.array([KIND_INDEX[kick.leg]]), np.array([kick.t]))
    return p[0]


def build_tracks(session: Session) -> tuple[dict[int, BallTrack], list[KickResult]]:
    """Turn the planned kicks and stops of one half into exact ball tracks."""
    kicks = session.kicks
    tracks = {b: BallTrack(b) for b in session.balls}
    t_begin = -session.lead
    starts = []
    for k in kicks:
        leg = leg_position(session, k)
        aim = geo.unit(k.aim - leg[:2])
        starts.append(np.array([*(leg[:2] + aim * KICK_OFFSET), BALL_RADIUS]))
    default_dir = np.array([0.0, 1.0])
    for b, pos in session.ball_start.items():
        p = np.array([pos[0], pos[1], BALL_RADIUS])
        if kicks and b == kicks[0].ball:
            p = starts[0]
        tracks[b].add(rest_segment(t_begin, p, default_dir))
    rest_pos = {b: (tracks[b].segments[0].start, t_begin) for b in session.balls}
    stop_after = {st.kick_before: st for st in session.stops}
    results: list[KickResult] = []
    for i, k in enumerate(kicks):
        track = tracks[k.ball]
        s0 = starts[i]
        _, v_before = track.at(k.t)
        if k.end == "kick" and i + 1 < len(kicks):
            end = starts[i + 1]
            gap = end[:2] - s0[:2]
            dist = float(np.hypot(*gap))
            direction = geo.unit(gap) if dist > 1e-9 else geo.unit(k.aim - s0[:2])
            u, d = geo.roll_params(dist, kicks[i + 1].t - k.t)
            vz, g = (geo.GRAVITY * (kicks[i + 1].t - k.t) / 2, geo.GRAVITY) if k.lofted else (0.0, 0.0)
            seg = Segment(k.t, QUAD, s0, direction, u, d, vz, g)
            track.add(seg)
            res = KickResult(s0, direction, u, d, vz, g)
        elif k.end == "out":
            direction = geo.unit(k.aim - s0[:2])
            u, d = k.speed, geo.ROLL_DECEL
            seg = Segment(k.t, QUAD, s0, direction, u, d)
            track.add(seg)
            s_exit = geo.exit_distance(s0[:2], direction)
            tau_out = geo.time_to_cover(u, d, s_exit)
            assert tau_out is not None, "planner guarantees the ball reaches the line"
            margin = 0.3 if k.out_kind == "goal" else 1.0
            tau_b = geo.time_to_cover(u, d, s_exit + margin) or tau_out
            p_b, v_b = seg.state(k.t + tau_b)
            brake = GOAL_BRAKE if k.out_kind == "goal" else OUT_BRAKE
            speed_b = float(np.hypot(v_b[0], v_b[1]))
            track.add(Segment(k.t + tau_b, QUAD, p_b, direction, speed_b, brake))
            t_rest = k.t + tau_b + speed_b / brake
            p_r, _ = track.segments[-1].state(t_rest)
            track.add(rest_segment(t_rest, p_r, direction))
            rest_pos[k.ball] = (p_r, t_rest)
            res = KickResult(s0, direction, u, d, 0.0, 0.0, t_out=k.t + tau_out)
        else:  # "stop", or the last kick of the half
            direction = geo.unit(k.aim - s0[:2])
            dist = float(np.hypot(*(k.aim - s0[:2])))
            dur = max(k.duration, 0.05)
            u, d = geo.roll_params(dist, dur)
            vz, g = (geo.GRAVITY * dur / 2, geo.GRAVITY) if k.lofted else (0.0, 0.0)
            seg = Segment(k.t, QUAD, s0, direction, u, d, vz, g)
            track.add(seg)
            t_stop = k.t_stop if k.end == "stop" else k.t + dur
            if k.lofted:
                t_stop = max(t_stop, k.t + dur)  # let it land first
            p_s, v_s = seg.state(t_stop)
            p_s[2] = max(p_s[2], BALL_RADIUS)
            speed_s = float(np.hypot(v_s[0], v_s[1]))
            track.add(Segment(t_stop, QUAD, p_s, direction, speed_s, STOP_BRAKE))
            t_rest = t_stop + speed_s / STOP_BRAKE
            p_r, _ = track.segments[-1].state(t_rest)
            track.add(rest_segment(t_rest, p_r, direction))
            rest_pos[k.ball] = (p_r, t_rest)
            res = KickResult(s0, direction, u, d, vz, g)
        results.append(res)
        _, v_after = seg.state(k.t)
        dv = v_after - v_before
        mag = float(np.linalg.norm(dv))
        track.kick_t.append(k.t)
        track.kick_ps.append(k.t_ps)
        track.kick_a.append(min(max(mag / CONTACT_S, SPIKE_MIN), SPIKE_MAX))
        track.kick_dir.append(dv / mag if mag > 1e-9 else np.array([*direction, 0.0]))
        stop = stop_after.get(i)
        if stop is not None and stop.restart is not None:
            _carry_to_restart(tracks, rest_pos, stop.new_ball, kicks[stop.restart], starts[stop.restart],
                              res.t_out if res.t_out is not None else stop.start, res.t_out is not None)
    return tracks, results


def _carry_to_restart(
    tracks: dict[int, BallTrack],
    rest_pos: dict[int, tuple[np.ndarray, float]],
    ball: int | None,
    restart: Kick,
    spot: np.ndarray,
    t_stop: float,
    was_out: bool,
) -> None:
    """Bring the restart ball to the taker's foot during the interruption, smoothly."""
    assert ball is not None
    pos, t_rest = rest_pos[ball]
    if was_out:
        t_a = max(t_stop + 2.0, t_rest + 0.2)
        t_b = restart.t - 1.0
    else:
        t_a = max(restart.t - 2.5, t_rest + 0.2)
        t_b = restart.t - 0.5
    t_b = max(t_b, t_a + 0.5)
    direction = geo.unit(spot[:2] - pos[:2])
    track = tracks[ball]
    track.add(Segment(t_a, MOVE, pos.copy(), direction, end=spot.copy(), length=t_b - t_a))
    track.add(rest_segment(t_b, spot, direction))
    rest_pos[ball] = (spot, t_b)
