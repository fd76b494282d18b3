"""Touches of the realistic engine (``simulator/rplay.py``): when a body reaches the ball, and what follows.

A touch happens when a player's body actually reaches the ball in flight or on the ground (foot, head, a
keeper's hands, or a deflection by a bystander); its outcome re-plans the ball's track by ``simulator.rball``
physics, and now and then a tackle draws a whistle.
"""

from __future__ import annotations

import math

import numpy as np

from simulator import rball
from simulator.debs import GOAL_X, GOAL_Y, N_PLAYERS, X_MID
from simulator.rplay_actions import Actions
from simulator.rplay_records import Touch
from simulator.rplay_state import (
    DT,
    FOOT_REACH,
    FOOT_Z,
    HAND_REACH,
    HAND_Z,
    HEAD_Z,
    RETOUCH_S,
    SUB,
    unit,
)


class Touches(Actions):
    """The part of ``Engine`` that finds the first contact of a step and carries it out."""

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
