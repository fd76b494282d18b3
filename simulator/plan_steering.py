"""The planner's state and the players' 10 Hz steering, for pass 1 of the generator (``simulator/plan.py``).

Players steer toward targets with bounded acceleration and speed: a spot in their team's formation shifted
toward the ball, an episode's offset and speed, or, for whoever the play script involves, a point to reach in
time. ``Steering`` holds the state of one half's run; the kick planner (``simulator/plan_kicks.py``) and the
event loop (``simulator/plan.py``) build on it.
"""

from __future__ import annotations

import math

import numpy as np

from simulator import geometry as geo
from simulator.debs import ENTITIES, N_PLAYERS, REF_INDEX, X_MAX, X_MID, X_MIN, Y_MAX, Y_MIN
from simulator.motion import Knots
from simulator.plan_script import Session

DT = 0.1  # s, knot spacing
A_MAX = 3.5  # m/s^2, player acceleration limit
V_MAX = 8.0  # m/s (28.8 km/h), body speed cap
V_MAX_KEEPER = 6.5
KEEP_AWAY = 3.0  # m, bystanders keep this far from the ball and upcoming kick points
SEPARATION = 2.2  # m, minimum body distance of bystanders from the ball at a kick

# Speed classes (DESIGN Q1 bands, m/s) and how often players pick them.
SPEED_BANDS = [(0.0, 0.0), (1.0, 3.0), (3.15, 3.8), (3.95, 4.6), (4.8, 6.5), (6.9, 7.9)]
FIELD_P = [0.12, 0.55, 0.12, 0.09, 0.08, 0.04]
KEEPER_P = [0.45, 0.55, 0.0, 0.0, 0.0, 0.0]

# Formation for a team attacking +y (x, y); index = shirt - 1. A8/B8 is the forward.
FORMATION = np.array(
    [[X_MID, -31.5], [12.0, -20.0], [X_MID, -22.0], [40.5, -20.0], [9.0, -8.0], [X_MID, -10.0], [43.5, -8.0],
     [X_MID, -2.5]]
)


def team_of(player: int) -> range:
    return range(0, 8) if player < 8 else range(8, 16)


def opponents_of(player: int) -> range:
    return range(8, 16) if player < 8 else range(0, 8)


def clip_pitch(p: np.ndarray, margin: float) -> np.ndarray:
    return np.array([min(max(p[0], X_MIN + margin), X_MAX - margin), min(max(p[1], Y_MIN + margin), Y_MAX - margin)])


class Steering:
    """The part of ``Planner`` that moves the players: its state, and the steering toward targets."""

    def __init__(self, session: Session, rng: np.random.Generator) -> None:
        self.s = session
        self.rng = rng
        n = math.ceil((session.play_len + 2 * session.lead) / DT) + 2
        self.n = n
        self.t0 = -session.lead
        self.pos = np.zeros((len(ENTITIES), n, 2))
        self.vel = np.zeros((len(ENTITIES), n, 2))
        # Episode state of free-running entities.
        self.ep_end = np.zeros(len(ENTITIES))
        self.ep_speed = np.zeros(len(ENTITIES))
        self.ep_offset = np.zeros((len(ENTITIES), 2))
        self.involved: dict[int, tuple[np.ndarray, float]] = {}
        self.pending: tuple[str, float, int] | None = None  # (kind, t, player) of the next ball event
        self.pending_point: np.ndarray | None = None
        self.ball_from = (np.array([X_MID, 0.0]), 0.0)
        self.ball_to = (np.array([X_MID, 0.0]), 1.0)
        self.active = session.balls[0]
        self.rest: dict[int, np.ndarray] = {}
        self.touches_left = 0
        self.holder: int | None = None
        self.mode = "pre"
        self.ended = False
        self.shirt = np.arange(N_PLAYERS) % 8
        self.sign = np.array([session.attack(e) for e in range(N_PLAYERS)], dtype=float)
        self.vmax = np.array([V_MAX_KEEPER if e.is_keeper else V_MAX for e in ENTITIES])

    # ----- helpers -------------------------------------------------------------------------
    def world(self, player: int, xy: np.ndarray) -> np.ndarray:
        """Formation coordinates (own goal at -y) to pitch coordinates."""
        return np.array([xy[0], xy[1] * self.s.attack(player)])

    def ball_estimate(self, t: float) -> np.ndarray:
        (p0, t0), (p1, t1) = self.ball_from, self.ball_to
        if t1 <= t0:
            return p1
        f = min(max((t - t0) / (t1 - t0), 0.0), 1.0)
        return p0 + (p1 - p0) * f

    def new_episode(self, e: int, t: float) -> None:
        probs = KEEPER_P if ENTITIES[e].is_keeper else FIELD_P
        band = int(self.rng.choice(len(SPEED_BANDS), p=probs))
        lo, hi = SPEED_BANDS[band]
        self.ep_speed[e] = self.rng.uniform(lo, hi) if hi > 0 else 0.0
        radius = 2.0 if ENTITIES[e].is_keeper else 8.0
        ang = self.rng.uniform(0, 2 * math.pi)
        self.ep_offset[e] = radius * math.sqrt(self.rng.uniform()) * np.array([math.cos(ang), math.sin(ang)])
        self.ep_end[e] = t + self.rng.uniform(2.0, 7.0)

    def position_at(self, e: int, j: int, t: float) -> np.ndarray:
        """Body position at ``t`` inside knot interval j..j+1 (already integrated)."""
        s = (t - (self.t0 + j * DT)) / DT
        s = min(max(s, 0.0), 1.0)
        s2, s3 = s * s, s * s * s
        return (
            (2 * s3 - 3 * s2 + 1) * self.pos[e, j]
            + (s3 - 2 * s2 + s) * DT * self.vel[e, j]
            + (-2 * s3 + 3 * s2) * self.pos[e, j + 1]
            + (s3 - s2) * DT * self.vel[e, j + 1]
        )

    def separate(self) -> int:
        """Nudge bystanders away from every kick so each hit has one obvious kicker.

        Steering alone leaves a few near misses; a smooth Gaussian displacement
        (position and velocity knots together) fixes them without speed jumps.
        Returns how many nudges were needed.
        """
        knots = Knots(self.t0, DT, self.pos, self.vel)
        everyone = np.arange(len(ENTITIES))
        times = self.t0 + np.arange(self.n) * DT
        nudges = 0
        for k in self.s.kicks:
            t = np.full(len(ENTITIES), k.t)
            body = knots.body(everyone, t)
            ball = body[k.player] + geo.unit(k.aim - body[k.player]) * 0.3
            gap = body - ball
            dist = np.hypot(gap[:, 0], gap[:, 1])
            for e in np.nonzero(dist < SEPARATION)[0]:
                if e == k.player:
                    continue
                amount = SEPARATION + 0.2 - dist[e]
                sigma = max(0.8, amount / 0.8)
                lo = max(0, int((k.t - 4 * sigma - self.t0) / DT))
                hi = min(self.n, int((k.t + 4 * sigma - self.t0) / DT) + 2)
                x = times[lo:hi] - k.t
                g = np.exp(-0.5 * (x / sigma) ** 2)
                n = geo.unit(gap[e]) if dist[e] > 1e-6 else np.array([1.0, 0.0])
                self.pos[e, lo:hi] += amount * g[:, None] * n
                self.vel[e, lo:hi] += (amount * -x / sigma**2 * g)[:, None] * n
                nudges += 1
        return nudges

    def anchors(self, ball: np.ndarray) -> np.ndarray:
        """Where each entity would stand given the ball: formation shifted toward play."""
        sign = self.sign
        by = ball[1] * sign
        fx, fy = FORMATION[:, 0][self.shirt], FORMATION[:, 1][self.shirt]
        x = fx + 0.3 * (ball[0] - fx)
        y = np.clip(fy + 0.55 * by, -30.0, 29.0)
        keeper = self.shirt == 0
        x[keeper] = X_MID + 0.15 * (ball[0] - X_MID)
        y[keeper] = -31.5 + 0.04 * (by[keeper] + 34)
        out = np.empty((len(ENTITIES), 2))
        out[:N_PLAYERS, 0] = np.clip(x, X_MIN + 1.0, X_MAX - 1.0)
        out[:N_PLAYERS, 1] = np.clip(y * sign, Y_MIN + 1.0, Y_MAX - 1.0)
        side = -1.0 if ball[0] > X_MID else 1.0
        out[REF_INDEX] = clip_pitch(ball + np.array([side * 9.0, -4.0]), 2.0)
        return out

    def step(self, j: int, t: float) -> None:
        self.cur_j = j
        p = self.pos[:, j]
        v = self.vel[:, j]
        ball = self.ball_estimate(t)
        if self.mode == "pre":
            want = np.zeros_like(v)
        else:
            for e in np.nonzero(t >= self.ep_end)[0]:
                if e not in self.involved:
                    self.new_episode(int(e), t)
            target = self.anchors(ball) + self.ep_offset
            speed = self.ep_speed.copy()
            presser = self.presser(ball) if self.mode == "play" else None
            if presser is not None:
                target[presser] = ball + np.array([0.0, -3.8 * self.s.attack(presser)])
                speed[presser] = 4.2
            gap = target - p
            dist = np.hypot(gap[:, 0], gap[:, 1])
            speed = np.minimum(np.minimum(speed, self.vmax), np.sqrt(5.0 * np.maximum(dist - 0.2, 0.0)))
            go = (dist > 0.3) & (speed > 0)
            want = np.where(go[:, None], gap / np.maximum(dist, 1e-9)[:, None] * speed[:, None], 0.0)
            # Bystanders step away from the ball and from the next kick point.
            points = [ball]
            if self.pending_point is not None and self.pending is not None and self.pending[1] - t <= 3.0:
                points.append(self.pending_point)
            for q in points:
                away = p - q
                dq = np.hypot(away[:, 0], away[:, 1])
                near = dq < KEEP_AWAY
                want[near] = away[near] / np.maximum(dq[near], 1e-6)[:, None] * 4.0
        for e, (target_e, t_arr) in self.involved.items():
            gap_e = target_e - p[e]
            dist_e = float(np.hypot(*gap_e))
            need = dist_e / max(t_arr - t - 0.15, 0.05)
            speed_e = min(self.vmax[e], need * 1.1, math.sqrt(2 * 3.0 * max(dist_e - 0.03, 0.0)))
            want[e] = gap_e / dist_e * speed_e if dist_e > 0.03 else 0.0
        dv = want - v
        norm = np.hypot(dv[:, 0], dv[:, 1])
        scale = np.minimum(1.0, A_MAX * DT / np.maximum(norm, 1e-12))
        v1 = v + dv * scale[:, None]
        sp = np.hypot(v1[:, 0], v1[:, 1])
        v1 *= np.minimum(1.0, V_MAX / np.maximum(sp, 1e-12))[:, None]
        self.vel[:, j + 1] = v1
        self.pos[:, j + 1] = p + (v + v1) / 2 * DT

    def presser(self, ball: np.ndarray) -> int | None:
        if self.holder is None:
            return None
        cands = [o for o in opponents_of(self.holder) if o % 8 != 0 and o not in self.involved]
        if not cands:
            return None
        return min(cands, key=lambda o: float(np.hypot(*(self.pos[o, self.cur_j] - ball))))
