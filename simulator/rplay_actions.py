"""What a foot touch of the realistic engine does (``simulator/rplay.py``): pass, dribble, shot, clearance, cross.

The choice follows the player's situation (distance and angle to goal, pressure, own third, wing); each kick
is executed with an error.
"""

from __future__ import annotations

import math

import numpy as np

from simulator import rball
from simulator.debs import GOAL_X, GOAL_Y, X_MID
from simulator.rplay_state import EngineState, unit


class Actions(EngineState):
    """The part of ``Engine`` that decides and executes a deliberate kick."""

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
