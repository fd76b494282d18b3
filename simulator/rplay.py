"""The realistic generator's play engine: players at 10 Hz, the ball by physics.

Every step the players steer (bounded acceleration and speed) toward what
they want: the ball's interception point for the nearest players of each
team, a spot in the team's shifted formation for the others, now and then a
sprint into space. A touch happens when a player's body actually reaches the
ball in flight or on the ground; what the touch does (pass, dribble, shot,
clearance, header, save, deflection) is decided by the player's situation and
executed with an error, and the ball then flies by ``simulator.rball``
physics. Nobody is kept away from anybody: duels, deflections and near misses
are whatever the play produces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from simulator import rball
from simulator.debs import ENTITIES, GOAL_X, GOAL_Y, N_PLAYERS, X_MAX, X_MID, X_MIN, Y_MAX, Y_MIN
from simulator.motion import Knots

DT = 0.1
SUB = 10  # sub-steps per step when looking for a touch
A_MAX = 4.5
V_CAP = np.array([7.0 if e.is_keeper else 9.0 for e in ENTITIES])
V_CAP[-1] = 7.0
FOOT_REACH = 0.75  # m, body centre to ball centre for a deliberate foot touch
SLIDE_REACH = 1.0
FOOT_Z = 0.75
HEAD_Z = (1.35, 2.35)
HAND_REACH = 1.3  # keeper's dive
HAND_Z = 2.6
RETOUCH_S = 0.3
SPARE_SPOTS = [(-1.6, 12.0), (X_MAX + 1.6, -12.0), (-1.6, -20.0), (X_MAX + 1.6, 20.0)]

FORMATION = np.array(
    [[X_MID, -31.0], [11.0, -20.0], [X_MID, -22.0], [41.5, -20.0], [9.0, -6.0], [X_MID, -9.0], [43.5, -6.0],
     [X_MID, 4.0]]
)
STAND, WALK, JOG, RUN, FAST, SPRINT = 0.3, 0.9, 2.2, 4.0, 5.6, 7.6


@dataclass
class Touch:
    """One contact of a player with the ball."""

    t: float  # s since kick-off
    ent: int
    ball: int
    part: str  # foot, head, hands
    kind: str  # pass, dribble, shot, clear, cross, header, catch, parry, deflection, restart, control, punt, tackle
    leg: int = 0  # 0 left, 1 right (foot touches)
    pos: np.ndarray = field(default_factory=lambda: np.zeros(3))
    dv: np.ndarray = field(default_factory=lambda: np.zeros(3))
    contact_s: float = 0.01
    v_out: np.ndarray = field(default_factory=lambda: np.zeros(3))


@dataclass
class Stop:
    start: float  # play stops (ball out, whistle)
    end: float  # restart touch
    kind: str


@dataclass
class Played:
    """What one half produced."""

    knots: Knots
    touches: list[Touch]
    stops: list[Stop]
    tracks: dict[int, list[rball.Seg]]
    sprints: int = 0


def unit(v: np.ndarray) -> np.ndarray:
    n = float(np.hypot(v[0], v[1]))
    return v / n if n > 1e-9 else np.array([1.0, 0.0])


class Engine:
    """Plays one half; ``attack_a`` is +1 when team A attacks +y."""

    def __init__(self, rng: np.random.Generator, play_len: float, lead: float, attack_a: int,
                 balls: tuple[int, ...], kickoff_team: int) -> None:
        self.rng = rng
        self.play_len = play_len
        self.t0 = -lead
        self.n = math.ceil((play_len + 2 * lead) / DT) + 2
        ne = len(ENTITIES)
        self.pos = np.zeros((ne, self.n, 2))
        self.vel = np.zeros((ne, self.n, 2))
        self.attack_a = attack_a
        self.sign = np.array([attack_a if e < 8 else -attack_a for e in range(N_PLAYERS)] + [0], dtype=float)
        self.balls = balls
        self.active = balls[0]
        self.tracks: dict[int, list[rball.Seg]] = {}
        for b, spot in zip(balls[1:], SPARE_SPOTS, strict=False):
            self.tracks[b] = [rball.Seg(self.t0 - 1, rball.REST, np.array([*spot, rball.R]), np.zeros(3))]
        self.tracks[self.active] = [rball.Seg(self.t0 - 1, rball.REST, np.array([X_MID, 0.0, rball.R]),
                                              np.zeros(3))]
        self.touches: list[Touch] = []
        self.stops: list[Stop] = []
        self.owner = -1  # last player to touch
        self.team = kickoff_team  # team in possession (0 A, 1 B)
        self.receiver = -1
        self.last_touch_t = np.full(ne, -1e9)
        self.state = "restart"
        self.restart_t = 0.0
        self.restart_ent = 7 if kickoff_team == 0 else 15
        self.restart_kind = "kickoff"
        self.stop_start = 0.0
        self.holder = -1
        self.hold_until = 0.0
        self.dribbles = 0
        self.ep_end = np.zeros(ne)
        self.ep_speed = np.full(ne, WALK)
        self.ep_off = np.zeros((ne, 2))
        self.sprint_end = np.zeros(ne)
        self.sprints = 0
        self.no_deflect: set[tuple[int, int]] = set()
        self.n_touch_at_check = 0
        self.whistle_at = math.inf
        self.ball_entered = True  # False from a throw-in until the ball is on the pitch
        self._arr_key: tuple | None = None
        self._arr: dict[str, np.ndarray] = {}
        self._fut_key: tuple | None = None
        self._fut: tuple[np.ndarray, np.ndarray] = (np.zeros(0), np.zeros((0, 3)))

    # ---------------------------------------------------------------- geometry helpers
    def team_of(self, e: int) -> int:
        return 0 if e < 8 else 1

    def goal_side(self, e: int) -> int:
        """+1/-1: the goal line that player ``e`` attacks."""
        return int(self.sign[e])

    def own_box(self, e: int, p: np.ndarray) -> bool:
        side = -self.goal_side(e)
        return abs(p[1] - GOAL_Y[side]) < 16.5 and 10.0 < p[0] < X_MAX - 10.0

    def world(self, e: int, xy: np.ndarray) -> np.ndarray:
        return np.array([xy[0], xy[1] * self.sign[e]])

    def ball_state(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        if self.holder >= 0 and self.state == "held":
            j = min(int((t - self.t0) / DT), self.n - 1)
            p = self.pos[self.holder, j]
            return np.array([p[0], p[1] + 0.3 * self.goal_side(self.holder), 1.0]), np.zeros(3)
        pos, vel, _, _ = rball.eval_at(self.arr(), np.array([t]))
        return pos[0], vel[0]

    def arr(self) -> dict[str, np.ndarray]:
        """Column arrays of the active ball's track (cached until the track changes)."""
        tr = self.tracks[self.active]
        key = (self.active, id(tr), len(tr))
        if self._arr_key != key:
            self._arr_key, self._arr = key, rball.seg_arrays(tr)
        return self._arr

    def ball_future(self, t: float, horizon: float = 4.0, step: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
        key = (t, self._arr_key)
        if self._fut_key != key:
            times = t + np.arange(0, int(horizon / step) + 1) * step
            pos, _, _, _ = rball.eval_at(self.arr(), times)
            self._fut_key, self._fut = key, (times, pos)
        return self._fut

    # ---------------------------------------------------------------- decisions of targets
    def anchors(self, ball: np.ndarray) -> np.ndarray:
        out = np.zeros((len(ENTITIES), 2))
        for e in range(N_PLAYERS):
            f = FORMATION[e % 8].copy()
            own = ball[1] * self.sign[e]  # ball position in this team's frame
            push = 8.0 if self.team_of(e) == self.team else -4.0
            if e % 8 == 0:
                f[0] = X_MID + 0.2 * (ball[0] - X_MID)
                f[1] = -31.5 + max(0.0, min(6.0, (own + 34) * 0.08))
            else:
                f[0] += 0.35 * (ball[0] - X_MID)
                f[1] += 0.4 * own + push
            out[e] = self.world(e, np.array([min(max(f[0], 2), X_MAX - 2), min(max(f[1], -33), 33)]))
        out[-1] = np.array([ball[0] + 12.0 * (1 if ball[0] < X_MID else -1), ball[1] * 0.9])
        return out

    def interception(self, t: float, e: int) -> tuple[float, np.ndarray]:
        """Earliest time (s from now) and point where ``e`` can meet the ball at foot or head height."""
        times, pos = self.ball_future(t)
        j = min(int((t - self.t0) / DT), self.n - 1)
        body = self.pos[e, j]
        d = np.hypot(pos[:, 0] - body[0], pos[:, 1] - body[1])
        reach_t = np.maximum(d - FOOT_REACH * 0.7, 0) / (V_CAP[e] * 0.9) + 0.25
        ok = (times - t >= reach_t) & ((pos[:, 2] < FOOT_Z) | ((pos[:, 2] > HEAD_Z[0]) & (pos[:, 2] < HEAD_Z[1])))
        idx = np.nonzero(ok)[0]
        k = int(idx[0]) if len(idx) else len(times) - 1
        return float(times[k] - t), pos[k, :2]

    def step_targets(self, j: int, t: float) -> tuple[np.ndarray, np.ndarray]:
        ball, _ = self.ball_state(t)
        anchors = self.anchors(ball)
        target = anchors.copy()
        speed = np.zeros(len(ENTITIES))
        rng = self.rng
        for e in range(len(ENTITIES)):
            if t >= self.ep_end[e]:
                r = rng.uniform()
                self.ep_speed[e] = (STAND if r < 0.5 else WALK if r < 0.78 else JOG if r < 0.9 else RUN if r < 0.97
                                    else FAST)
                self.ep_off[e] = rng.normal(0, 5.0 if e % 8 else 1.0, 2)
                self.ep_end[e] = t + rng.uniform(2.0, 6.0)
                if (e < N_PLAYERS and e % 8 and self.state == "play" and rng.uniform() < 0.09
                        and t > self.sprint_end[e] + 8):
                    self.sprint_end[e] = t + rng.uniform(2.5, 4.5)
                    ang = rng.uniform(-0.6, 0.6)
                    d = np.array([math.sin(ang), math.cos(ang) * self.sign[e]])
                    self.ep_off[e] = d * 28.0
                    self.sprints += 1
            target[e] = anchors[e] + self.ep_off[e]
            speed[e] = SPRINT + 0.6 if t < self.sprint_end[e] else self.ep_speed[e]
        speed[-1] = min(speed[-1], RUN)
        if self.state == "play":
            chasers = self.chasers_now
            for e, (tau, point) in chasers.items():
                target[e] = point
                speed[e] = SPRINT if tau > 1.0 else FAST
            for keeper in (0, 8):
                if keeper in chasers:
                    continue
                side = -self.goal_side(keeper)
                gx = min(max(ball[0], GOAL_X[side][0] + 0.5), GOAL_X[side][1] - 0.5)
                gy = GOAL_Y[side] - side * min(5.0, 1.0 + abs(ball[1] - GOAL_Y[side]) * 0.06)
                target[keeper] = np.array([gx, gy])
                speed[keeper] = RUN
        elif self.state == "held":
            target[self.holder] = self.pos[self.holder, j] + np.array([0, 3.0 * self.goal_side(self.holder)])
            speed[self.holder] = WALK
        elif self.state in ("restart", "stopped"):
            spot = self.restart_spot
            back = unit(np.array([X_MID, 0.0]) - spot[:2]) if self.restart_kind != "kickoff" else np.array(
                [0.0, -self.goal_side(self.restart_ent)])
            target[self.restart_ent] = spot[:2] - 0.45 * back
            speed[self.restart_ent] = JOG
            if self.restart_kind == "kickoff":
                for e in range(N_PLAYERS):
                    if e != self.restart_ent:
                        f = FORMATION[e % 8].copy()
                        f[1] = min(f[1], -1.0)
                        target[e] = self.world(e, f)
                        speed[e] = JOG
        return target, speed

    def chasers(self, t: float) -> dict[int, tuple[float, np.ndarray]]:
        """The players who go for the ball now: the best placed of each team, plus a presser."""
        out: dict[int, tuple[float, np.ndarray]] = {}
        if self.holder >= 0:
            return out
        for team in (0, 1):
            cands = []
            for e in range(team * 8, team * 8 + 8):
                if t - self.last_touch_t[e] < RETOUCH_S:
                    continue
                cands.append((*self.interception(t, e), e))
            cands.sort(key=lambda c: c[0])
            picks = cands[:1]
            if team == self.team and self.receiver >= 0 and self.team_of(self.receiver) == team:
                mine = [c for c in cands if c[2] == self.receiver]
                picks = mine or picks
            elif team != self.team:
                picks = cands[:2]
            for tau, point, e in picks:
                out[e] = (tau, point)
        return out

    # ---------------------------------------------------------------- motion
    def steer(self, j: int, target: np.ndarray, speed: np.ndarray) -> None:
        p, v = self.pos[:, j], self.vel[:, j]
        gap = target - p
        dist = np.hypot(gap[:, 0], gap[:, 1])
        want = np.minimum(speed, np.sqrt(2 * A_MAX * 0.8 * dist))
        want = np.where(dist > 0.15, want, 0.0)
        dirn = gap / np.maximum(dist, 1e-9)[:, None]
        dv = dirn * want[:, None] - v
        mag = np.hypot(dv[:, 0], dv[:, 1])
        lim = A_MAX * DT
        dv *= np.minimum(1.0, lim / np.maximum(mag, 1e-9))[:, None]
        nv = v + dv
        sp = np.hypot(nv[:, 0], nv[:, 1])
        nv *= np.minimum(1.0, V_CAP / np.maximum(sp, 1e-9))[:, None]
        self.vel[:, j + 1] = nv
        self.pos[:, j + 1] = p + (v + nv) / 2 * DT

    # ---------------------------------------------------------------- touches
    def find_touch(self, j: int, t: float) -> tuple[float, int, str] | None:
        """First contact within this step: (time, entity, part)."""
        if self.holder >= 0:
            return None
        s = (np.arange(1, SUB + 1) / SUB)
        times = t + s * DT
        bpos, _, _, _ = rball.eval_at(self.arr(), times)
        bodies = self.pos[:N_PLAYERS, j][:, None, :] * (1 - s)[None, :, None] + self.pos[:N_PLAYERS, j + 1][
            :, None, :] * s[None, :, None]
        d = np.hypot(bodies[..., 0] - bpos[None, :, 0], bodies[..., 1] - bpos[None, :, 1])
        chasers = self.chasers_now
        best = None
        z = bpos[:, 2]
        for e in range(N_PLAYERS):
            if t - self.last_touch_t[e] < RETOUCH_S:
                continue
            keeper_hands = e % 8 == 0 and self.own_box(e, bpos[0, :2])
            if e in chasers:
                reach = np.where(z < FOOT_Z, FOOT_REACH, np.where((z > HEAD_Z[0]) & (z < HEAD_Z[1]), 0.45, -1))
                if keeper_hands:
                    reach = np.where(z < HAND_Z, HAND_REACH, -1)
            else:
                if (e, len(self.touches)) in self.no_deflect:
                    continue
                reach = np.where(z < 0.6, 0.35, -1.0)
            hit = np.nonzero(d[e] <= reach)[0]
            if len(hit):
                k = int(hit[0])
                if e not in chasers and self.rng.uniform() < 0.5:
                    self.no_deflect.add((e, len(self.touches)))  # the ball slips past
                    continue
                part = "hands" if keeper_hands and e in chasers else ("foot" if z[k] < FOOT_Z else "head")
                if e not in chasers:
                    part = "foot"
                if best is None or times[k] < best[0]:
                    best = (float(times[k]), e, part)
        return best

    def do_touch(self, t: float, e: int, part: str, involuntary: bool) -> None:
        rng = self.rng
        p, v_in = self.ball_state(t)
        j = min(int((t - self.t0) / DT), self.n - 1)
        body = self.pos[e, j]
        pv = self.vel[e, j]
        side = self.goal_side(e)
        goal_c = np.array([(GOAL_X[side][0] + GOAL_X[side][1]) / 2, GOAL_Y[side]])
        d_goal = float(np.hypot(*(goal_c - p[:2])))
        kind = "pass"
        v_out = None
        hold = False
        if involuntary:
            kind = "deflection"
            ang = rng.normal(0, 0.6)
            c, s_ = math.cos(ang), math.sin(ang)
            v2 = np.array([c * v_in[0] - s_ * v_in[1], s_ * v_in[0] + c * v_in[1]]) * rng.uniform(0.4, 0.8)
            v_out = np.array([v2[0], v2[1], abs(v_in[2]) * 0.5 + rng.uniform(0, 2)])
        elif part == "hands":
            if float(np.linalg.norm(v_in)) < 24 and rng.uniform() < 0.65:
                kind, hold, v_out = "catch", True, np.zeros(3)
            else:
                kind = "parry"
                out = np.array([1.0 if p[0] < X_MID else -1.0, -side * 0.5])
                v_out = np.array([*(unit(out) * np.linalg.norm(v_in[:2]) * 0.35), 2.5])
        elif part == "head":
            kind = "header"
            mates = [m for m in range(self.team_of(e) * 8 + 1, self.team_of(e) * 8 + 8) if m != e]
            m = int(rng.choice(mates))
            dirn = unit(self.pos[m, j] - p[:2])
            v_out = np.array([*(dirn * rng.uniform(7, 13)), rng.uniform(-1.5, 2.5)])
        else:
            v_out, kind = self.foot_action(e, j, t, p, v_in, body, pv, d_goal, goal_c)
        v_out = np.asarray(v_out, dtype=float)
        dv = v_out - v_in
        contact = float(rng.uniform(0.008, 0.012)) if part == "foot" else float(rng.uniform(0.015, 0.03))
        leg = int(rng.integers(0, 2))
        self.touches.append(Touch(t, e, self.active, part, kind, leg, p.copy(), dv, contact, v_out.copy()))
        self.last_touch_t[e] = t
        track = [s for s in self.tracks[self.active] if s.t0 < t]
        if hold:
            self.holder, self.state = e, "held"
            self.hold_until = t + rng.uniform(2.0, 5.0)
            hands = np.array([0.0, 0.3 * self.goal_side(e), 1.0])  # held in front, at hand height
            track.append(rball.Seg(t, rball.HELD, p.copy(), np.zeros(3), ent=e, end=hands))
        else:
            track += rball.free_path(t, p, v_out)
        self.tracks[self.active] = track
        new_team = self.team_of(e)
        if new_team != self.team:
            self.dribbles = 0
        self.team = new_team
        self.owner = e
        self.receiver = getattr(self, "_next_receiver", -1)
        self._next_receiver = -1
        if (kind in ("tackle", "deflection") or (part == "foot" and self.closest_opponent(e, j, p) < 1.2)) and \
                rng.uniform() < 0.06:
            self.whistle_at = t + rng.uniform(0.3, 0.8)

    def closest_opponent(self, e: int, j: int, p: np.ndarray) -> float:
        opp = range(8, 16) if e < 8 else range(0, 8)
        return min(float(np.hypot(*(self.pos[o, j] - p[:2]))) for o in opp)

    def foot_action(self, e: int, j: int, t: float, p: np.ndarray, v_in: np.ndarray, body: np.ndarray,
                    pv: np.ndarray, d_goal: float, goal_c: np.ndarray) -> tuple[np.ndarray, str]:
        rng = self.rng
        side = self.goal_side(e)
        mine = self.team_of(e) == self.team and self.owner >= 0 and self.team_of(self.owner) == self.team_of(e)
        pressure = self.closest_opponent(e, j, p)
        self._next_receiver = -1
        if self.state == "restart_kick":
            return self.pass_to(e, j, p, rng.uniform() < 0.3 and self.restart_kind == "goalkick"), "restart"
        if e % 8 == 0:
            if rng.uniform() < 0.5:
                return self.lofted(p, np.array([X_MID + rng.normal(0, 10), side * rng.uniform(5, 20)]), 40), "clear"
            return self.pass_to(e, j, p, False), "pass"
        angle_ok = abs(p[0] - goal_c[0]) < 0.9 * abs(p[1] - goal_c[1]) + 6
        if angle_ok and d_goal < 33:
            shoot_p = 0.6 if d_goal < 18 else 0.3 if d_goal < 26 else 0.15
            if rng.uniform() < shoot_p:
                return self.shot(e, p, side, d_goal), "shot"
        own_third = p[1] * side < -18
        if own_third and pressure < 3 and rng.uniform() < 0.35:
            return self.lofted(p, np.array([X_MID + rng.normal(0, 12), side * rng.uniform(0, 20)]), 42), "clear"
        wide = abs(p[0] - X_MID) > 15 and p[1] * side > 18
        if wide and rng.uniform() < 0.5:
            box = np.array([X_MID + rng.normal(0, 5), side * (GOAL_Y[1] - rng.uniform(6, 12))])
            return self.lofted(p, box, 25), "cross"
        if mine and self.dribbles < rng.integers(1, 5) and pressure > 1.5:
            self.dribbles += 1
            run = unit(np.array([rng.normal(0, 0.5), side]) if float(np.hypot(*pv)) < 1 else pv)
            speed = float(np.hypot(*pv)) + rng.uniform(1.5, 3.5)
            self._next_receiver = e
            return np.array([*(run * speed), 0.0]), "dribble"
        if not mine and rng.uniform() < 0.5:
            self._next_receiver = e
            run = unit(np.array([rng.normal(0, 0.4), side]))
            return np.array([*(run * rng.uniform(2.5, 4.5)), 0.0]), "control"
        self.dribbles = 0
        return self.pass_to(e, j, p, rng.uniform() < 0.2), "pass"

    def pass_to(self, e: int, j: int, p: np.ndarray, lofted: bool) -> np.ndarray:
        rng = self.rng
        mates = [m for m in range(self.team_of(e) * 8, self.team_of(e) * 8 + 8) if m != e]
        side = self.goal_side(e)
        w = []
        for m in mates:
            d = float(np.hypot(*(self.pos[m, j] - p[:2])))
            fwd = (self.pos[m, j, 1] - p[1]) * side
            w.append(math.exp(-abs(d - 15) / 12) * (1.5 if fwd > 0 else 1.0) * (0.3 if m % 8 == 0 else 1.0))
        w_arr = np.array(w) / sum(w)
        m = mates[int(rng.choice(len(mates), p=w_arr))]
        self._next_receiver = m
        lead = self.pos[m, j] + self.vel[m, j] * 1.0
        dist = float(np.hypot(*(lead - p[:2])))
        if lofted or dist > 32:
            return self.lofted(p, lead, rng.uniform(25, 40))
        arrive = rng.uniform(3.0, 8.0)
        speed = math.sqrt(arrive**2 + 2 * (rball.C_ROLL + rball.K_ROLL * (arrive + 4)) * dist)
        ang = rng.normal(0, 0.05)
        d = unit(lead - p[:2])
        c, s_ = math.cos(ang), math.sin(ang)
        d = np.array([c * d[0] - s_ * d[1], s_ * d[0] + c * d[1]])
        return np.array([*(d * speed), 0.0])

    def lofted(self, p: np.ndarray, target: np.ndarray, elev_deg: float) -> np.ndarray:
        rng = self.rng
        dist = max(float(np.hypot(*(target - p[:2]))), 3.0)
        th = math.radians(elev_deg + rng.normal(0, 3))
        speed = math.sqrt(dist * rball.G / max(math.sin(2 * th), 0.2)) * (1 + rball.K_AIR * 0.35) * rng.uniform(
            0.95, 1.05)
        ang = rng.normal(0, 0.06)
        d = unit(target - p[:2])
        c, s_ = math.cos(ang), math.sin(ang)
        d = np.array([c * d[0] - s_ * d[1], s_ * d[0] + c * d[1]])
        return np.array([*(d * speed * math.cos(th)), speed * math.sin(th)])

    def shot(self, e: int, p: np.ndarray, side: int, d_goal: float) -> np.ndarray:
        rng = self.rng
        x0, x1 = GOAL_X[side]
        corner = rng.uniform() < 0.5  # aiming for a corner risks missing it
        ax = rng.uniform(x0 - 0.3, x0 + 1.0) if rng.uniform() < 0.5 else rng.uniform(x1 - 1.0, x1 + 0.3)
        aim = np.array([ax if corner else rng.uniform(x0 + 0.8, x1 - 0.8), GOAL_Y[side],
                        rng.uniform(1.6, 2.6) if corner else rng.uniform(0.2, 1.8)])
        speed = rng.uniform(17.0, 30.0) if d_goal > 18 else rng.uniform(13.0, 26.0)
        flat = aim[:2] - p[:2]
        dist = float(np.hypot(*flat))
        tf = dist / (speed * 0.93)
        vz = (aim[2] - p[2]) / tf + 0.5 * rball.G * tf
        h = unit(flat) * math.sqrt(max(speed**2 - vz**2, 1.0))
        err_h = rng.normal(0, 0.06)
        c, s_ = math.cos(err_h), math.sin(err_h)
        h = np.array([c * h[0] - s_ * h[1], s_ * h[0] + c * h[1]])
        return np.array([h[0], h[1], vz + rng.normal(0, 1.2)])

    # ---------------------------------------------------------------- interruptions
    def check_out(self, t: float) -> None:
        """Ball over a line during this step: stop play."""
        if self.holder >= 0:
            return
        t_out = rball.boundary_exit(self.arr(), t, t + DT, entered=self.ball_entered)
        if not self.ball_entered:
            p, _ = self.ball_state(t + DT)
            self.ball_entered = bool(X_MIN <= p[0] <= X_MAX and Y_MIN <= p[1] <= Y_MAX)
        whistle = self.whistle_at <= t + DT
        if t_out is None and not whistle:
            return
        if t_out is None:
            t_out = self.whistle_at
        self.whistle_at = math.inf
        p, _ = self.ball_state(t_out)
        rng = self.rng
        last = self.owner if self.owner >= 0 else 0
        if whistle and abs(p[1]) <= Y_MAX and 0 <= p[0] <= X_MAX:
            kind, taker_team, spot, pause = "foul", 1 - self.team_of(last), p.copy(), rng.uniform(8, 18)
        elif abs(p[1]) > Y_MAX - 0.01:  # over a goal line
            side = 1 if p[1] > 0 else -1
            if GOAL_X[side][0] < p[0] < GOAL_X[side][1] and p[2] < 2.44:
                kind, pause = "goal", rng.uniform(20, 35)
                taker_team = 1 if self.sign[0] == side else 0  # the team that conceded kicks off
                spot = np.array([X_MID, 0.0, rball.R])
            else:
                kind, pause = "goalkick", rng.uniform(8, 16)
                taker_team = 0 if self.sign[0] == -side else 1
                spot = np.array([X_MID + rng.uniform(-8, 8), side * (Y_MAX - 5.5), rball.R])
        else:
            kind, pause = "throwin", rng.uniform(5, 12)
            taker_team = 1 - self.team_of(last)
            x = -0.3 if p[0] < X_MID else X_MAX + 0.3
            spot = np.array([x, min(max(p[1], -Y_MAX + 1), Y_MAX - 1), 1.9])
        self.state = "stopped"
        self.stop_start = t_out
        self.restart_t = t_out + pause
        self.restart_kind = kind
        self.restart_spot = spot
        j = min(int((t - self.t0) / DT), self.n - 1)
        team = range(taker_team * 8 + 1, taker_team * 8 + 8) if kind != "goalkick" else [taker_team * 8]
        self.restart_ent = min(team, key=lambda m: float(np.hypot(*(self.pos[m, j] - spot[:2]))))
        if kind == "kickoff" or kind == "goal":
            self.restart_ent = 7 + 8 * taker_team
        self.team = taker_team
        self.receiver = -1
        # the restart ball: the nearest spare one (or the same ball for fouls) is carried to the spot
        old = self.active
        if kind != "foul":
            cands = [b for b in self.balls if b != old]
            rest = {b: self.tracks[b][-1].p0 for b in cands}
            new = min(cands, key=lambda b: float(np.hypot(*(rest[b][:2] - spot[:2]))))
        else:
            new = old
        t_a = max(t_out + 1.5, self.restart_t - pause + 1.5)
        t_b = self.restart_t - 1.0
        start_p = self.tracks[new][-1].p0.copy() if new != old else self.ball_state(t_a)[0]
        if new == old:
            self.tracks[old] = [s for s in self.tracks[old] if s.t0 < t_a]
        lift = np.array([start_p[0], start_p[1], 1.0])
        tr = self.tracks[new]
        carry_to = spot.copy()
        tr.append(rball.Seg(t_a, rball.CARRY, start_p, np.zeros(3), end=carry_to, length=max(t_b - t_a, 0.5)))
        tr.append(rball.Seg(max(t_b, t_a + 0.5), rball.REST, carry_to, np.zeros(3)))
        del lift
        self.active = new
        self.stops.append(Stop(t_out, self.restart_t, kind))

    def restart_touch(self, t: float, j: int) -> bool:
        """Take the restart kick when the taker stands at the ball."""
        if t + DT < self.restart_t:
            return False
        e = self.restart_ent
        p, _ = self.ball_state(t)
        if float(np.hypot(*(self.pos[e, j] - p[:2]))) > 1.2:
            self.restart_t = t + DT  # wait for the taker
            if self.stops:
                self.stops[-1].end = self.restart_t
            return False
        self.state = "restart_kick"
        if self.restart_kind == "throwin":
            v = self.pass_to(e, j, p, False)
            v = v * 0.7
            v[2] = 2.0
            self.ball_entered = False
            self.touches.append(Touch(t, e, self.active, "hands", "throwin", 0, p.copy(), v.copy(), 0.3, v.copy()))
            self.tracks[self.active] = [s for s in self.tracks[self.active] if s.t0 < t] + rball.free_path(t, p, v)
            self.last_touch_t[e] = t
            self.receiver = self._next_receiver
            self.owner = e
        else:
            self.do_touch(t, e, "foot", False)
            self.touches[-1].kind = "restart" if self.restart_kind != "kickoff" else "kickoff"
        if self.stops and self.stops[-1].end != t:
            self.stops[-1].end = t
        self.state = "play"
        return True

    # ---------------------------------------------------------------- main loop
    def run(self) -> Played:
        p0 = self.anchors(np.array([X_MID, 0.0, 0.0]))
        for e in range(N_PLAYERS):
            f = FORMATION[e % 8].copy()
            f[1] = min(f[1], -1.0)
            p0[e] = self.world(e, f)
        self.pos[:, 0] = p0
        self.restart_spot = np.array([X_MID, 0.0, rball.R])
        self.state = "restart"
        self.restart_t = 0.0
        self.chasers_now: dict[int, tuple[float, np.ndarray]] = {}
        self._next_receiver = -1
        for j in range(self.n - 1):
            t = self.t0 + j * DT
            if t >= self.play_len:
                self.state = "over"
            self.chasers_now = self.chasers(t) if self.state == "play" else {}
            target, speed = self.step_targets(j, t)
            self.steer(j, target, speed)
            if self.state in ("restart", "stopped") and t >= 0:
                self.state = "restart"
                self.restart_touch(t, j + 1)
                continue
            if self.state == "held":
                if t >= self.hold_until:
                    e = self.holder
                    self.holder = -1
                    self.state = "play"
                    side = self.goal_side(e)
                    p = np.array([*self.pos[e, j + 1], 0.6])
                    p[:2] += np.array([0.0, 0.3 * side])
                    self.tracks[self.active].append(rball.Seg(t + DT - 0.2, rball.HELD, p, np.zeros(3), ent=e,
                                                              end=np.array([0.0, 0.3 * side, 0.6])))
                    self.tracks[self.active].append(rball.Seg(t + DT - 0.05, rball.REST, p, np.zeros(3)))
                    v = self.lofted(p, np.array([X_MID + self.rng.normal(0, 10), side * 10.0]), 38)
                    self.touches.append(Touch(t + DT, e, self.active, "foot", "punt", 1, p.copy(), v, 0.01, v.copy()))
                    self.tracks[self.active] += rball.free_path(t + DT, p, v)
                    self.last_touch_t[e] = t + DT
                    self.owner = e
                continue
            if self.state == "restart_kick":
                self.state = "play"
            if self.state != "play":
                continue
            hit = self.find_touch(j, t)
            if hit is not None:
                tc, e, part = hit
                self.do_touch(tc, e, part, e not in self.chasers_now)
            if self.state == "play":
                self.check_out(t)
        knots = Knots(self.t0, DT, self.pos, self.vel)
        heading = np.array([math.pi / 2 * self.sign[e] if e < N_PLAYERS else 0.0 for e in range(len(ENTITIES))])
        knots.finish(heading)
        return Played(knots, self.touches, self.stops, self.tracks, self.sprints)
