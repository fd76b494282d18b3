"""How the realistic engine's players move (``simulator/rplay.py``): targets every step, then steering.

The nearest players of each team go for the ball's interception point, keepers guard their goal, the others
hold a spot in their team's shifted formation with an episode's offset and speed, now and then a sprint into
space; steering follows with bounded acceleration and speed.
"""

from __future__ import annotations

import math

import numpy as np

from simulator.debs import ENTITIES, GOAL_X, GOAL_Y, N_PLAYERS, X_MAX, X_MID
from simulator.rplay_state import (
    A_MAX,
    DT,
    FAST,
    FOOT_REACH,
    FOOT_Z,
    FORMATION,
    HEAD_Z,
    JOG,
    RETOUCH_S,
    RUN,
    SPRINT,
    STAND,
    V_CAP,
    WALK,
    EngineState,
    unit,
)


class Movement(EngineState):
    """The part of ``Engine`` that picks where each player goes and steers them there."""

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
